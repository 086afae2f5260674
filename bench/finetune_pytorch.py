"""PyTorch side of bench/finetune_peers.sh (run with Debian's /usr/bin/python3, which has torch).

  finetune_pytorch.py DIR [--threads 2] [--batch 32] [--length 128] [--steps 5] [--warmup 1] [--labels 2]

Times optimizer steps of BertForSequenceClassification fine-tuning as the Hugging Face Trainer runs them on the
BERT folder DIR (config.json + model.safetensors, BertModel names): BertModelRef of reference/torch (post-LN BERT,
equal to transformers' BertModel) + classifier Linear(H, labels) on the pooler output, mean cross-entropy,
torch.optim.AdamW in the Trainer's two parameter groups, clip_grad_norm_(1.0), the LambdaLR linear schedule. One
batch of random token ids [batch, length] with no padding (what tfm gets from texts of >= length tokens), no
dropout (the tfm side runs with hidden_dropout_prob 0 too). Prints one JSON line: steps_per_s (after `warmup`
untimed steps), the seconds of each timed step, the BLAS torch ran on.
"""
import argparse
import json
import os
import sys
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_blas  # noqa: E402

torch_blas.prepare()  # before any torch import: OpenBLAS reads its environment when it loads
REF = os.environ.get("TFM_TORCH_REFERENCE", os.path.join(HERE, "..", "..", "shared", "reference", "torch"))
sys.path.insert(0, REF)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--labels", type=int, default=2)
    a = ap.parse_args()

    import numpy as np
    import torch
    from torch import nn

    torch.set_num_threads(a.threads)  # before the check, which prints the thread count
    blas = torch_blas.check()
    import reference_modules as rm
    import st

    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    sd = st.load(os.path.join(a.dir, "model.safetensors"))

    class BertForSequenceClassificationRef(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = rm.BertModelRef(SimpleNamespace(**cfg))
            self.classifier = nn.Linear(cfg["hidden_size"], a.labels)

        def forward(self, ids, tt, mask):
            _, pooled = self.bert(ids, tt, mask)
            return self.classifier(pooled)

    model = BertForSequenceClassificationRef()
    model.bert.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()}, strict=True)
    model.train()
    named = list(model.named_parameters())
    no_decay = {n for n, _ in named if n.endswith(".bias") or "LayerNorm" in n}
    opt = torch.optim.AdamW([dict(params=[p for n, p in named if n not in no_decay], weight_decay=0.0),
                             dict(params=[p for n, p in named if n in no_decay], weight_decay=0.0)], lr=5e-5)
    total = a.warmup + a.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (total - s) / total))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, cfg["vocab_size"], (a.batch, a.length), generator=g)
    ids[:, 0], ids[:, -1] = 101 % cfg["vocab_size"], 102 % cfg["vocab_size"]
    tt = torch.zeros_like(ids)
    mask = torch.ones_like(ids)
    labels = torch.randint(0, a.labels, (a.batch,), generator=g)
    times = []
    for s in range(total):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(ids, tt, mask), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps(dict(steps_per_s=len(times) / sum(times), step_seconds=[round(t, 3) for t in times],
                          batch=a.batch, length=a.length, threads=a.threads, blas=blas, loss=loss.item())))


if __name__ == "__main__":
    main()
