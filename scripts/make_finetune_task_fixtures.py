#!/usr/bin/env python3
"""Expected values for `tfm finetune --task token-classify` and `--task mlm` (issue 25): optimizer steps of
BertForTokenClassification and BertForMaskedLM fine-tuning as the Hugging Face Trainer runs them, with gradient
accumulation, computed by PyTorch autograd.

The heads are written from transformers' modeling_bert.py:
  - BertForTokenClassification: BertModel(add_pooling_layer=False); logits = classifier(dropout(sequence_output));
    loss = CrossEntropyLoss()(logits.view(-1, num_labels), labels.view(-1)) (ignore_index -100, mean over the
    labelled tokens).
  - BertForMaskedLM: BertModel(add_pooling_layer=False); BertOnlyMLMHead = BertLMPredictionHead:
    transform (dense, ACT2FN[hidden_act], LayerNorm) then decoder = Linear(H, vocab, bias=False) whose weight is
    tied to bert.embeddings.word_embeddings.weight, plus the bias cls.predictions.bias; loss as above.
The body is BertModelRef from ../shared/reference/torch (equal to transformers' BertModel); its pooler is not
used (not in the optimizer, not written). Dropout is 0 (torch's RNG cannot be matched; the C++ test runs with 0).

The Trainer's step (trainer.py training_step / inner loop): each micro-batch's loss divided by
gradient_accumulation_steps and backpropagated, gradients summed over the micro-batches of a step, then
clip_grad_norm_, torch.optim.AdamW with the two parameter groups (no decay on biases and LayerNorm weights) and
get_linear_schedule_with_warmup's LambdaLR. The steps here: [1 micro-batch], [2 micro-batches], [1 micro-batch].

Writes tests/fixtures/finetune/{token,mlm}_steps.safetensors: step{k}.micro{j}.{input_ids,token_type_ids,
attention_mask,labels}, micro_loss[M] (every micro-batch's unscaled loss, in order), grad_norm[K], lr[K],
step0.grad.<name> (every parameter's gradient in the first step, before clipping), final.<name> (every parameter
after the K steps); and {token,mlm}_hyper.json.
Run: /usr/bin/python3 scripts/make_finetune_task_fixtures.py
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
import torch.nn.functional as F  # noqa: E402

import reference_modules as rm  # noqa: E402
import st  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

HYPER = dict(learning_rate=3e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
             max_grad_norm=0.7, warmup_steps=1, total_steps=4)
IGN = -100


def linear_schedule(step, warmup, total):
    # transformers.optimization._get_linear_schedule_with_warmup_lr_lambda
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


class BertForTokenClassificationRef(nn.Module):
    def __init__(self, cfg, num_labels):
        super().__init__()
        self.bert = rm.BertModelRef(types.SimpleNamespace(**cfg))
        self.classifier = nn.Linear(cfg["hidden_size"], num_labels)
        self.num_labels = num_labels

    def forward(self, input_ids, token_type_ids, attention_mask, labels):
        seq, _ = self.bert(input_ids, token_type_ids, attention_mask)
        logits = self.classifier(seq)  # dropout p = 0
        return F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1), ignore_index=IGN)


class Ns(nn.Module):
    pass


class BertForMaskedLMRef(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, V = cfg["hidden_size"], cfg["vocab_size"]
        self.bert = rm.BertModelRef(types.SimpleNamespace(**cfg))
        self.cls = Ns()
        self.cls.predictions = Ns()
        p = self.cls.predictions
        p.transform = Ns()
        p.transform.dense = nn.Linear(H, H)
        p.transform.LayerNorm = nn.LayerNorm(H, eps=cfg["layer_norm_eps"])
        p.bias = nn.Parameter(torch.zeros(V))
        self.V = V

    def forward(self, input_ids, token_type_ids, attention_mask, labels):
        seq, _ = self.bert(input_ids, token_type_ids, attention_mask)
        t = self.cls.predictions.transform
        h = t.LayerNorm(self.bert.act(t.dense(seq)))
        # decoder tied to the input embeddings (tie_word_embeddings), bias = cls.predictions.bias
        scores = F.linear(h, self.bert.embeddings.word_embeddings.weight, self.cls.predictions.bias)
        return F.cross_entropy(scores.view(-1, self.V), labels.view(-1), ignore_index=IGN)


def batch(ids, labels, tt=None):
    ids = torch.tensor(ids, dtype=torch.long)
    tt = torch.zeros_like(ids) if tt is None else torch.tensor(tt, dtype=torch.long)
    return dict(input_ids=ids, token_type_ids=tt, attention_mask=(ids != 0).long(),
                labels=torch.tensor(labels, dtype=torch.long))


def token_steps():
    # Words of heads_tokcls/vocab.txt: [CLS] 2, [SEP] 3, "paris" 61, "london" 38, "##ie" 47, "people" 32, ...
    # Labels O 0, B-LOC 1, I-LOC 2, B-PER 3, I-PER 4 on first sub-tokens; -100 on [CLS], [SEP], "##..." and padding.
    return [
        [batch([[2, 32, 40, 18, 61, 3, 0], [2, 35, 47, 19, 16, 38, 3], [2, 50, 45, 3, 0, 0, 0]],
               [[IGN, 0, 0, 0, 1, IGN, IGN], [IGN, 3, IGN, 0, 0, 1, IGN], [IGN, 0, 1, IGN, IGN, IGN, IGN]])],
        [batch([[2, 44, 45, 61, 3], [2, 52, 19, 3, 0]], [[IGN, 1, 2, 2, IGN], [IGN, 3, 0, IGN, IGN]]),
         batch([[2, 38, 55, 19, 24, 37, 3]], [[IGN, 1, IGN, 0, 0, 0, IGN]])],
        [batch([[2, 48, 21, 61, 3], [2, 59, 17, 44, 3]], [[IGN, 3, 0, 1, IGN], [IGN, 0, 0, 1, IGN]])],
    ]


def mlm_steps():
    # [MASK] 4. Labels: the original id at masked positions (mostly [MASK] in the input, one a random id, one kept).
    return [
        [batch([[2, 15, 4, 19, 37, 3, 0], [2, 32, 40, 18, 4, 3, 0], [2, 4, 45, 20, 17, 58, 3]],
               [[IGN, IGN, 64, IGN, IGN, IGN, IGN], [IGN, IGN, IGN, IGN, 61, IGN, IGN],
                [IGN, 44, IGN, IGN, 17, IGN, IGN]])],
        [batch([[2, 15, 59, 4, 3], [2, 4, 19, 70, 3]], [[IGN, IGN, IGN, 19, IGN], [IGN, 38, IGN, 37, IGN]]),
         batch([[2, 15, 4, 19, 4, 3]], [[IGN, IGN, 64, IGN, 44, IGN]])],
        [batch([[2, 4, 21, 61, 3], [2, 59, 17, 4, 3]], [[IGN, 48, IGN, IGN, IGN], [IGN, IGN, IGN, 44, IGN]])],
    ]


def trainer_steps(params, loss_of, steps):
    """The Trainer's optimizer steps over `params` [(name, tensor)], loss_of(batch) a micro-batch's loss. Returns
    the fixture's tensors (the batches, step0.grad.<name>), the micro-batch losses, gradient norms and rates."""
    no_decay = [n for n, _ in params if n.endswith(".bias") or "LayerNorm" in n]
    groups = [dict(params=[p for n, p in params if n not in no_decay], weight_decay=HYPER["weight_decay"]),
              dict(params=[p for n, p in params if n in no_decay], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=HYPER["learning_rate"], betas=(HYPER["adam_beta1"], HYPER["adam_beta2"]),
                            eps=HYPER["adam_epsilon"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: linear_schedule(s, HYPER["warmup_steps"], HYPER["total_steps"]))
    out, losses, norms, lrs = {}, [], [], []
    for k, micro in enumerate(steps):
        opt.zero_grad()
        for j, b in enumerate(micro):
            for key, v in b.items():
                out[f"step{k}.micro{j}.{key}"] = v
            loss = loss_of(b)
            (loss / len(micro)).backward()  # Trainer.training_step: loss / gradient_accumulation_steps
            losses.append(loss.item())
        if k == 0:
            for n, p in params:
                out["step0.grad." + n] = p.grad.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], HYPER["max_grad_norm"])
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        norms.append(norm.item())
    assert any(n > HYPER["max_grad_norm"] for n in norms), norms  # clipping is exercised
    return out, losses, norms, lrs


def save_steps(out, losses, norms, lrs, out_dir, name, hyper):
    """Writes <out_dir>/<name>_steps.safetensors (`out` with micro_loss, grad_norm, lr) and <name>_hyper.json
    (HYPER and `hyper`)."""
    out["micro_loss"] = torch.tensor(losses)
    out["grad_norm"] = torch.tensor(norms)
    out["lr"] = torch.tensor(lrs)
    arrays = {}
    for k, v in out.items():
        a = v.detach().numpy()
        arrays[k] = np.ascontiguousarray(a.astype(np.float32 if a.dtype.kind == "f" else np.int64))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}_steps.safetensors")
    st.save(arrays, path)
    assert os.path.getsize(path) < 2 << 20, path
    with open(os.path.join(out_dir, f"{name}_hyper.json"), "w") as f:
        json.dump(dict(HYPER, **hyper), f, indent=2)
        f.write("\n")
    print(name, "losses", losses, "norms", norms, "lrs", lrs)


def run(model, sd, steps, name):
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()}, strict=False)
    model.train()
    params = [(n, p) for n, p in model.named_parameters() if not n.startswith("bert.pooler.")]
    missing = {n for n, _ in params} - set(sd) - ({"bert." + k for k in sd})
    assert not missing, missing
    out, losses, norms, lrs = trainer_steps(
        params, lambda b: model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["labels"]), steps)
    for n, p in params:
        out["final." + n] = p.detach()
    save_steps(out, losses, norms, lrs, os.path.join(FIX, "finetune"), name, dict(parameters=len(params)))


def main():
    os.makedirs(os.path.join(FIX, "finetune"), exist_ok=True)
    d = os.path.join(FIX, "heads_tokcls")
    cfg = json.load(open(os.path.join(d, "config.json")))
    run(BertForTokenClassificationRef(cfg, len(cfg["id2label"])), st.load(os.path.join(d, "model.safetensors")),
        token_steps(), "token")
    d = os.path.join(FIX, "heads_mlm")
    cfg = json.load(open(os.path.join(d, "config.json")))
    run(BertForMaskedLMRef(cfg), st.load(os.path.join(d, "model.safetensors")), mlm_steps(), "mlm")


if __name__ == "__main__":
    main()
