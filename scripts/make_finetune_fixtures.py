#!/usr/bin/env python3
"""Expected values for `tfm finetune` (issue 25): steps of BertForSequenceClassification fine-tuning as the
Hugging Face Trainer runs them, computed by PyTorch autograd.

The model is tests/fixtures/heads_seqcls (a BertForSequenceClassification checkpoint: "bert." body + classifier,
3 labels). The body is BertModelRef from ../shared/reference/torch (equal to transformers' BertModel, checked by
the BERT fixtures); the head is modeling_bert.py's BertForSequenceClassification: logits = classifier(dropout(
pooler_output)), loss = CrossEntropyLoss() (mean over the batch). Dropout is 0 here (torch's RNG cannot be
matched); the C++ test runs with hidden dropout 0 too.

The optimizer and schedule are the Trainer's (trainer.py create_optimizer / create_scheduler): torch.optim.AdamW
with two parameter groups (no weight decay on biases and LayerNorm weights: get_decay_parameter_names),
transformers.get_linear_schedule_with_warmup (a LambdaLR: lr factor step / warmup, then (total - step) /
(total - warmup)), torch.nn.utils.clip_grad_norm_ before each optimizer step. The LambdaLR factor of the first
step is 0 when warmup > 0, as in the Trainer.

Writes tests/fixtures/finetune/steps.safetensors: batch{k}.{input_ids,token_type_ids,attention_mask,labels},
loss[K], grad_norm[K], lr[K], step0.grad.<name> (the gradients of the first step, before clipping), and
final.<name> (every parameter after K steps); and hyper.json (the hyperparameters).
Run: /usr/bin/python3 scripts/make_finetune_fixtures.py
"""
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REF = os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch"))
sys.path.insert(0, REF)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import reference_modules as rm  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

HYPER = dict(learning_rate=2e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
             max_grad_norm=0.5, warmup_steps=2, total_steps=5)


def linear_schedule(step, warmup, total):
    # transformers.optimization._get_linear_schedule_with_warmup_lr_lambda
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


class BertForSequenceClassificationRef(nn.Module):
    def __init__(self, cfg, num_labels):
        super().__init__()
        self.bert = rm.BertModelRef(types.SimpleNamespace(**cfg))
        self.classifier = nn.Linear(cfg["hidden_size"], num_labels)

    def forward(self, input_ids, token_type_ids, attention_mask):
        _, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        return self.classifier(pooled)  # dropout p = 0


def batches():
    # Token ids of heads_seqcls/vocab.txt ([PAD] 0, [CLS] 2, [SEP] 3); padded rows, pairs with token type 1.
    rows = [
        ([[2, 17, 60, 19, 49, 3], [2, 17, 66, 3, 0, 0], [2, 44, 45, 20, 17, 3]],
         [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], [2, 0, 1]),
        ([[2, 40, 3, 41, 53, 3, 0], [2, 61, 23, 3, 29, 3, 0], [2, 17, 66, 19, 17, 58, 3]],
         [[0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0, 0]], [1, 1, 0]),
        ([[2, 57, 21, 3], [2, 31, 3, 0]], [[0, 0, 0, 0], [0, 0, 0, 0]], [0, 2]),
    ]
    out = []
    for ids, tt, labels in rows:
        ids = torch.tensor(ids, dtype=torch.long)
        out.append(dict(input_ids=ids, token_type_ids=torch.tensor(tt, dtype=torch.long),
                        attention_mask=(ids != 0).long(), labels=torch.tensor(labels, dtype=torch.long)))
    return out


def main():
    d = os.path.join(FIX, "heads_seqcls")
    cfg = json.load(open(os.path.join(d, "config.json")))
    sd = st.load(os.path.join(d, "model.safetensors"))
    model = BertForSequenceClassificationRef(cfg, len(cfg["id2label"]))
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()}, strict=True)
    model.train()
    names = [n for n, _ in model.named_parameters()]
    no_decay = [n for n in names if n.endswith(".bias") or "LayerNorm" in n]
    groups = [dict(params=[p for n, p in model.named_parameters() if n not in no_decay],
                   weight_decay=HYPER["weight_decay"]),
              dict(params=[p for n, p in model.named_parameters() if n in no_decay], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=HYPER["learning_rate"], betas=(HYPER["adam_beta1"], HYPER["adam_beta2"]),
                            eps=HYPER["adam_epsilon"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: linear_schedule(s, HYPER["warmup_steps"], HYPER["total_steps"]))
    out = {}
    losses, norms, lrs = [], [], []
    for k, b in enumerate(batches()):
        for key, v in b.items():
            out[f"batch{k}.{key}"] = v
        opt.zero_grad()
        logits = model(b["input_ids"], b["token_type_ids"], b["attention_mask"])
        loss = nn.functional.cross_entropy(logits, b["labels"])
        loss.backward()
        if k == 0:
            for n, p in model.named_parameters():
                out["step0.grad." + n] = p.grad.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), HYPER["max_grad_norm"])
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(loss.item())
        norms.append(norm.item())
    assert any(n > HYPER["max_grad_norm"] for n in norms), norms  # clipping is exercised
    assert lrs[0] == 0.0 and lrs[1] > 0.0, lrs
    for n, p in model.named_parameters():
        out["final." + n] = p.detach()
        # every parameter moved (weight decay and updates reach all of them after the first step)
        assert not torch.equal(p.detach(), torch.from_numpy(np.array(sd[n]))), n
    out["loss"] = torch.tensor(losses, dtype=torch.float64).float()
    out["grad_norm"] = torch.tensor(norms).float()
    out["lr"] = torch.tensor(lrs).float()
    os.makedirs(os.path.join(FIX, "finetune"), exist_ok=True)
    arrays = {}
    for k, v in out.items():
        a = v.detach().numpy()
        arrays[k] = np.ascontiguousarray(a.astype(np.float32 if a.dtype.kind == "f" else np.int64))
    st.save(arrays, os.path.join(FIX, "finetune", "steps.safetensors"))
    with open(os.path.join(FIX, "finetune", "hyper.json"), "w") as f:
        json.dump(HYPER, f, indent=2)
        f.write("\n")
    print("losses", losses, "norms", norms, "lrs", lrs)


if __name__ == "__main__":
    main()
