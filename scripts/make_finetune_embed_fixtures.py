#!/usr/bin/env python3
"""Expected values for `tfm finetune --task embed` (issue 25): steps of sentence-transformers training as
SentenceTransformerTrainer runs them, computed by PyTorch autograd.

The model is tests/fixtures/st_mean (Transformer (BertModel) -> Pooling(mean) -> Normalize). The body is
BertModelRef from ../shared/reference/torch (equal to transformers' BertModel, checked by the BERT fixtures); the
rest follows the sentence-transformers source:
  * SentenceTransformer.forward: each column of a batch is its own forward (padded to its own longest text);
    models.Pooling (mean: sum(h * mask) / clamp(sum(mask), 1e-9); cls: h[:, 0]), models.Normalize
    (F.normalize(p=2, dim=1)). The BertModel pooler is computed but unused, so it gets no gradient.
  * losses.MultipleNegativesRankingLoss: scores = util.cos_sim(reps[0], torch.cat(reps[1:])) * 20 (cos_sim
    normalises both sides with F.normalize), loss = nn.CrossEntropyLoss()(scores, arange(B)).
  * losses.CosineSimilarityLoss: nn.MSELoss()(torch.cosine_similarity(u, v), labels).
The optimizer and schedule are the Hugging Face Trainer's (SentenceTransformerTrainer subclasses it):
torch.optim.AdamW with two parameter groups (no weight decay on biases and LayerNorm weights), the LambdaLR of
get_linear_schedule_with_warmup, clip_grad_norm_ before each step. torch skips parameters whose grad is None in
clip_grad_norm_ and AdamW, so the pooler is left as it was. Dropout is 0 (torch's RNG cannot be matched).

Writes tests/fixtures/finetune_embed/steps.safetensors with, for each run R (mnrl: mean + Normalize, pairs then
triplets; cosine: CosineSimilarityLoss; cls: cls pooling without Normalize; accum: two steps of two
micro-batches each (gradient accumulation); e2e: the CLI's run below):
  R.batch{k}.col{c} [B, L_c] token ids (each column padded on its own, [PAD] = 0), R.batch{k}.scores [B],
  R.loss [K], R.grad_norm [K], R.lr [K], R.step0.grad.<name> (first step, before clipping), R.final.<name>
  (every trained parameter after the K steps); accum has R.batch{k}.micro{j}.col{c}, loss, lr and final; e2e has only loss, lr and final (the CLI test reads the first two
  from train_log.csv); e2e.embeddings [S, 32]: the trained model's embeddings of
  e2e_sentences.txt. Also hyper.json, and e2e_train.csv (anchor, positive, negative texts) that the CLI test trains
  on for three epochs of one batch (MultipleNegativesRankingLoss does not depend on the order of the rows in a
  batch, so our shuffling does not matter).
Run: /usr/bin/python3 scripts/make_finetune_embed_fixtures.py
"""
import csv
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REF = os.path.normpath(os.path.join(ROOT, "..", "shared", "reference", "torch"))
sys.path.insert(0, REF)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import reference_modules as rm  # noqa: E402
import st  # noqa: E402
from make_embed_fixtures import Tok, load_vocab  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "finetune_embed")
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

HYPER = dict(learning_rate=2e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
             max_grad_norm=0.5, warmup_steps=2, total_steps=5, scale=20.0)
# The CLI run: --lr 1e-3 --weight-decay 0.01 --warmup-steps 1 --epochs 3 --batch-size 4 (3 steps), clipping 1.0.
E2E = dict(learning_rate=1e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
           max_grad_norm=1.0, warmup_steps=1, total_steps=3, scale=20.0)


def linear_schedule(step, warmup, total):
    # transformers.optimization._get_linear_schedule_with_warmup_lr_lambda
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


class SentenceTransformerRef(nn.Module):
    """Transformer -> Pooling -> [Normalize]; `bert` holds BertModel's parameters under their own names."""

    def __init__(self, cfg, pooling, normalize):
        super().__init__()
        self.bert = rm.BertModelRef(types.SimpleNamespace(**cfg))
        self.pooling, self.normalize = pooling, normalize

    def forward(self, ids):
        mask = (ids != 0).long()
        h, _ = self.bert(ids, torch.zeros_like(ids), mask)
        if self.pooling == "mean":
            m = mask.unsqueeze(-1).to(h.dtype).expand(h.size())
            x = torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9)
        else:
            x = h[:, 0]
        if self.normalize:
            x = F.normalize(x, p=2, dim=1)
        return x


def cos_sim(a, b):  # sentence_transformers.util.cos_sim
    return torch.mm(F.normalize(a, p=2, dim=1), F.normalize(b, p=2, dim=1).transpose(0, 1))


def mnrl(reps, scale):
    scores = cos_sim(reps[0], torch.cat(reps[1:])) * scale
    return nn.CrossEntropyLoss()(scores, torch.tensor(range(len(scores)), dtype=torch.long))


def cosine_loss(reps, labels):
    return nn.MSELoss()(torch.cosine_similarity(reps[0], reps[1]), labels.view(-1))


def pad(rows):
    L = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (L - len(r)) for r in rows], dtype=torch.long)


def run(name, sd, cfg, pooling, normalize, loss, batches, hyper, out, detail=True):
    model = SentenceTransformerRef(cfg, pooling, normalize)
    model.bert.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in sd.items()}, strict=True)
    model.train()
    params = list(model.bert.named_parameters())
    no_decay = [n for n, _ in params if n.endswith(".bias") or "LayerNorm" in n]
    groups = [dict(params=[p for n, p in params if n not in no_decay], weight_decay=hyper["weight_decay"]),
              dict(params=[p for n, p in params if n in no_decay], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=hyper["learning_rate"], betas=(hyper["adam_beta1"], hyper["adam_beta2"]),
                            eps=hyper["adam_epsilon"])
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: linear_schedule(s, hyper["warmup_steps"], hyper["total_steps"]))
    losses, norms, lrs = [], [], []
    for k, step in enumerate(batches):
        # A step is one batch, or a list of micro-batches (gradient accumulation: the Trainer's training_step
        # divides each micro-batch's loss by their number and backpropagates it; the gradients add up).
        micro = step if isinstance(step, list) else [step]
        opt.zero_grad()
        total = 0.0
        for j, (cols, scores) in enumerate(micro):
            ids = [pad(c) for c in cols]
            key = f"{name}.batch{k}" if len(micro) == 1 and not isinstance(step, list) else f"{name}.batch{k}.micro{j}"
            if detail or isinstance(step, list):
                for c, t in enumerate(ids):
                    out[f"{key}.col{c}"] = t
                if scores is not None:
                    out[f"{key}.scores"] = torch.tensor(scores)
            reps = [model(t) for t in ids]  # one forward per column, as SentenceTransformer does
            value = mnrl(reps, hyper["scale"]) if loss == "mnrl" else cosine_loss(reps, torch.tensor(scores))
            (value / len(micro)).backward()
            total += value.item() / len(micro)
        assert all(p.grad is None for n, p in params if n.startswith("pooler.")), "the pooler got a gradient"
        if k == 0 and detail:
            for n, p in params:
                if p.grad is not None:
                    out[f"{name}.step0.grad.{n}"] = p.grad.detach().clone()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), hyper["max_grad_norm"])
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(total)
        norms.append(norm.item())
    for n, p in params:
        moved = not torch.equal(p.detach(), torch.from_numpy(np.array(sd[n])))
        assert moved != n.startswith("pooler."), n  # every trained parameter moved, the pooler did not
        if not n.startswith("pooler."):
            out[f"{name}.final.{n}"] = p.detach().clone()
    out[f"{name}.loss"] = torch.tensor(losses)
    out[f"{name}.lr"] = torch.tensor(lrs)
    if detail:
        out[f"{name}.grad_norm"] = torch.tensor(norms)
    print(name, "losses", losses, "norms", norms, "lrs", lrs)
    return model, norms


def main():
    d = os.path.join(FIX, "st_mean")
    cfg = json.load(open(os.path.join(d, "config.json")))
    sd = st.load(os.path.join(d, "model.safetensors"))
    vocab = load_vocab(os.path.join(d, "vocab.txt"))
    tok = Tok(vocab)

    def ids(text):
        return tok.encode(text)[0]

    out = {}
    # Sentences of st_mean's vocabulary: pairs (a paraphrase each), then triplets with a hard negative.
    pairs = [("the cat sat on the mat.", "a cat is on the mat"),
             ("a dog is running in the park!", "the dog runs in a park"),
             ("paris is the capital of france.", "the capital of france is paris")]
    triplets = [("two men are playing football", "men playing football", "the men have a red car"),
                ("london is the capital of england", "the capital of england", "paris is in france")]
    pairs2 = [("what time is it?", "the time"), ("i have a dream.", "a good dream"),
              ("hello", "hello friends"), ("the blue house", "a blue house in london")]

    def cols(rows):
        return [[ids(r[c]) for r in rows] for c in range(len(rows[0]))]

    _, norms = run("mnrl", sd, cfg, "mean", True, "mnrl",
                   [(cols(pairs), None), (cols(triplets), None), (cols(pairs2), None)], HYPER, out)
    assert any(n > HYPER["max_grad_norm"] for n in norms), norms  # clipping is exercised
    scored = [("the cat sat on the mat.", "a cat is on the mat", 0.9),
              ("a dog is running in the park!", "paris is the capital of france.", 0.1),
              ("two men are playing football", "men playing football", 0.8)]
    scored2 = [("hello", "hello friends", 0.7), ("the blue house", "the red car", 0.2),
               ("i have a dream.", "what time is it?", 0.0)]
    run("cosine", sd, cfg, "mean", True, "cosine",
        [(cols([r[:2] for r in scored]), [r[2] for r in scored]),
         (cols([r[:2] for r in scored2]), [r[2] for r in scored2])], HYPER, out)
    run("cls", sd, cfg, "cls", False, "mnrl", [(cols(pairs2), None), (cols(triplets), None)], HYPER, out)

    # Gradient accumulation (plain, not CachedMultipleNegativesRankingLoss): two steps of two micro-batches each,
    # every micro-batch with its own in-batch negatives.
    run("accum", sd, cfg, "mean", True, "mnrl",
        [[(cols(pairs), None), (cols(pairs2), None)], [(cols(triplets), None), (cols(pairs[:2]), None)]], HYPER, out,
        detail=False)
    # The CLI run: three epochs of one batch of four triplets.
    e2e = [("the cat sat on the mat.", "a cat is on the mat", "the dog is in the house"),
           ("paris is the capital of france.", "the capital of france is paris", "london is in england"),
           ("two men are playing football", "men playing football", "people live in the red house"),
           ("what time is it?", "the time", "a good afternoon")]
    model, _ = run("e2e", sd, cfg, "mean", True, "mnrl", [(cols(e2e), None)] * 3, E2E, out,
                   detail=False)
    sentences = ["the cat sat on the mat.", "men playing football", "hello", "a blue car in paris"]
    model.eval()
    with torch.no_grad():
        out["e2e.embeddings"] = model(pad([ids(s) for s in sentences]))

    os.makedirs(OUT, exist_ok=True)
    arrays = {}
    for k, v in out.items():
        a = v.detach().numpy()
        arrays[k] = np.ascontiguousarray(a.astype(np.float32 if a.dtype.kind == "f" else np.int64))
    st.save(arrays, os.path.join(OUT, "steps.safetensors"))
    with open(os.path.join(OUT, "hyper.json"), "w") as f:
        json.dump(dict(steps=HYPER, e2e=E2E), f, indent=2)
        f.write("\n")
    with open(os.path.join(OUT, "e2e_train.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["anchor", "positive", "negative"])
        w.writerows(e2e)
    with open(os.path.join(OUT, "e2e_sentences.txt"), "w") as f:
        f.write("\n".join(sentences) + "\n")
    print("wrote", OUT, os.path.getsize(os.path.join(OUT, "steps.safetensors")), "bytes")


if __name__ == "__main__":
    main()
