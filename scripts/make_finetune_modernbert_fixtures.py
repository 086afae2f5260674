#!/usr/bin/env python3
"""Golden fixtures for fine-tuning ModernBERT (issue 25): tests/fixtures/finetune_modernbert.

    /usr/bin/python3 scripts/make_finetune_modernbert_fixtures.py

The reference is make_modernbert_fixtures.py's ModernBertRef (modeling_modernbert.py's ModernBertModel, eager
attention, written from the Hugging Face source), run with torch autograd: every weight a leaf tensor, dropout 0
(embedding_dropout, attention_dropout, mlp_dropout; training mode then computes what eval mode does), the loss
sum(last_hidden_state * upstream) for a fixed random upstream gradient, so that each weight's .grad is the
gradient a training step sees. A tiny random ModernBertModel with the real names: 3 layers with
global_attn_every_n_layers 2 (layers 0 and 2 global, layer 1 sliding), local_attention 4 (2 keys each side) and
sequences of 10 tokens, so the band matters; row 0 of the batch has 2 pads (<= 2: every pad query still sees a
real key in its window).

Writes tests/fixtures/finetune_modernbert/:
  config.json        model_type modernbert
  model.safetensors  ModernBertModel state dict under "model." (the prefix of the ModernBertFor* checkpoints)
  expected.safetensors input_ids [2, 10] int64, attention_mask [2, 10] int64, upstream [2, 10, H],
                       last_hidden_state [2, 10, H], and "grad.<name>" for every weight (unprefixed name)

and the task steps (tfm finetune on ModernBERT): optimizer steps of ModernBertForSequenceClassification
(classifier_pooling "cls" and "mean"), ModernBertForTokenClassification and ModernBertForMaskedLM as the Hugging
Face Trainer runs them, and of a sentence-transformers model around ModernBertModel (mean pooling, Normalize,
MultipleNegativesRankingLoss), on the same tiny body with heads. The heads are written from modeling_modernbert.py
(dropout p = 0: torch's RNG cannot be matched):
  - ModernBertPredictionHead: head(x) = norm(act(dense(x))), dense without bias (classifier_bias false), norm
    without bias (norm_bias false), eps norm_eps, act classifier_activation (gelu);
  - ForSequenceClassification: "cls" h[:, 0], "mean" (h * mask).sum(1) / mask.sum(1); head; drop; classifier
    (with bias); CrossEntropyLoss;
  - ForTokenClassification: classifier(drop(head(h))) per token; CrossEntropyLoss (ignore_index -100);
  - ForMaskedLM: decoder(head(h)), decoder.weight tied to model.embeddings.tok_embeddings.weight, decoder.bias
    (decoder_bias); CrossEntropyLoss over the labelled tokens (what sparse_prediction also computes);
  - embed: make_finetune_embed_fixtures.py's mnrl (scale 20) on F.normalize(mean pooling) of each column run on
    its own (padded with 0 to its own longest row), the body's parameters under their bare ModernBertModel names.
The Trainer is make_finetune_task_fixtures.py's trainer_steps (AdamW with get_decay_parameter_names' groups: no
decay on the norms, ModernBERT has no biases here; clip_grad_norm_; linear warmup; loss / accumulation steps), the
steps [1 micro-batch], [2 micro-batches], [1 micro-batch].

Writes tests/fixtures/finetune_modernbert/tasks/{config.json, model.safetensors} (the body under "model." and the
heads: head.dense, head.norm, classifier [3, H] and bias, decoder.bias), and in tests/fixtures/finetune_modernbert/
<name>_steps.safetensors + <name>_hyper.json (make_finetune_task_fixtures.save_steps' keys) for <name> in seqcls,
seqcls_mean, tokcls, mlm, embed (embed's batches: step{k}.micro{j}.col{c}).
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import torch.nn.functional as F  # noqa: E402

import make_finetune_embed_fixtures as fe  # noqa: E402  (mnrl, pad)
import make_finetune_task_fixtures as ft  # noqa: E402  (trainer_steps, save_steps)
import make_modernbert_fixtures as mb  # noqa: E402
from make_modernbert_fixtures import st  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "finetune_modernbert")
torch.manual_seed(2525)

CONFIG = dict(mb.CONFIG, architectures=["ModernBertModel"], vocab_size=40, hidden_size=32, intermediate_size=48,
              num_hidden_layers=3, num_attention_heads=4, global_attn_every_n_layers=2, local_attention=4,
              pad_token_id=0, bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2)


def npy(t):
    return np.ascontiguousarray(t.detach().numpy())


def main():
    c = mb.Cfg(CONFIG)
    sd = mb.random_weights(c)
    for v in sd.values():
        v.requires_grad_(True)
    B, L = 2, 10
    input_ids = torch.randint(3, c.vocab_size, (B, L))
    input_ids[:, 0] = c.cls_token_id
    input_ids[0, L - 3] = c.sep_token_id
    input_ids[0, L - 2:] = c.pad_token_id
    input_ids[1, L - 1] = c.sep_token_id
    attention_mask = (input_ids != c.pad_token_id).long()
    assert L > c.local_attention and (L - attention_mask.sum(1)).max() <= c.local_attention // 2
    ref = mb.ModernBertRef(c, sd)
    h = ref.forward(input_ids, attention_mask)
    upstream = torch.randn(B, L, c.hidden_size)
    (h * upstream).sum().backward()
    # The band matters: a window covering the input gives a different output.
    with torch.no_grad():
        wide = mb.ModernBertRef(mb.Cfg(dict(CONFIG, local_attention=4 * L)), sd).forward(input_ids, attention_mask)
        assert (wide - h).abs().max().item() > 1e-2
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w", encoding="utf-8") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    st.save({"model." + k: npy(v) for k, v in sd.items()}, os.path.join(OUT, "model.safetensors"))
    exp = {"input_ids": npy(input_ids), "attention_mask": npy(attention_mask), "upstream": npy(upstream),
           "last_hidden_state": npy(h)}
    for k, v in sd.items():
        exp["grad." + k] = npy(v.grad)
    st.save(exp, os.path.join(OUT, "expected.safetensors"))
    print(f"wrote {os.path.relpath(OUT, ROOT)}: {len(sd)} gradients")
    tasks({k: v.detach().clone() for k, v in sd.items()})


# ------------------------------------------------------------------------------------------------ the tasks

IGN = -100
NUM_LABELS = 3
MASK = 3  # the [MASK] id of the task batches (other tokens are 4 .. vocab_size - 1)
TASK_CONFIG = dict(CONFIG, architectures=["ModernBertForSequenceClassification"],
                   id2label={str(i): f"L{i}" for i in range(NUM_LABELS)},
                   label2id={f"L{i}": i for i in range(NUM_LABELS)})


def task_body(cfg, P, ids, mask):
    base = {k[len("model."):]: v for k, v in P.items() if k.startswith("model.")}
    return mb.ModernBertRef(mb.Cfg(cfg), base).forward(ids, mask)


def prediction_head(cfg, P, x):
    c = mb.Cfg(cfg)
    assert not c.classifier_bias and not c.norm_bias and c.classifier_activation == "gelu"
    return mb.head(c, P, x)


def classifier(P, x):
    return F.linear(x, P["classifier.weight"], P["classifier.bias"])  # after drop, p = 0


def seqcls(cfg, P, b):
    h, mask = task_body(cfg, P, b["input_ids"], b["attention_mask"]), b["attention_mask"]
    if cfg["classifier_pooling"] == "cls":
        x = h[:, 0]
    else:
        x = (h * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True)
    return F.cross_entropy(classifier(P, prediction_head(cfg, P, x)), b["labels"])


def tokcls(cfg, P, b):
    logits = classifier(P, prediction_head(cfg, P, task_body(cfg, P, b["input_ids"], b["attention_mask"])))
    return F.cross_entropy(logits.view(-1, NUM_LABELS), b["labels"].view(-1), ignore_index=IGN)


def mlm(cfg, P, b):
    h = prediction_head(cfg, P, task_body(cfg, P, b["input_ids"], b["attention_mask"]))
    scores = F.linear(h, P["model.embeddings.tok_embeddings.weight"], P["decoder.bias"])
    return F.cross_entropy(scores.view(-1, scores.shape[-1]), b["labels"].view(-1), ignore_index=IGN)


def rows(B, L, pads, V):
    """B rows of [CLS] ids .. [SEP] then pads[b] [PAD]s (every pad query keeps a real key in its window)."""
    ids = torch.randint(4, V, (B, L))
    ids[:, 0] = 1
    for b in range(B):
        n = L - pads[b]
        ids[b, n - 1] = 2
        ids[b, n:] = 0
    return ids


def task_batch(ids, labels):
    return dict(input_ids=ids, token_type_ids=torch.zeros_like(ids), attention_mask=(ids != 0).long(), labels=labels)


def seq_batch(B, L, pads, V):
    return task_batch(rows(B, L, pads, V), torch.randint(0, NUM_LABELS, (B,)))


def token_batch(B, L, pads, V):
    ids = rows(B, L, pads, V)
    labels = torch.randint(0, NUM_LABELS, (B, L))
    labels[(ids == 0) | (ids == 1) | (ids == 2)] = IGN
    labels[torch.rand(B, L) < 0.2] = IGN  # continuation sub-tokens
    return task_batch(ids, labels)


def mlm_batch(B, L, pads, V):
    ids = rows(B, L, pads, V)
    chosen = (torch.rand(B, L) < 0.3) & (ids > 3)
    chosen[0, 2] = True
    labels = torch.where(chosen, ids, torch.full_like(ids, IGN))
    masked = ids.clone()
    masked[chosen] = MASK
    r, c = chosen.nonzero()[0]
    masked[r, c] = 5  # one chosen position replaced by another id, as the 10% of random replacements
    return task_batch(masked, labels)


def three_steps(make, V):
    return [[make(3, 10, [2, 0, 1], V)], [make(2, 9, [0, 2], V), make(1, 10, [0], V)], [make(2, 10, [1, 0], V)]]


def run_task(name, cfg, P, loss_fn, steps):
    P = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    params = list(P.items())
    out, losses, norms, lrs = ft.trainer_steps(params, lambda b: loss_fn(cfg, P, b), steps)
    for n, p in params:
        out["final." + n] = p.detach()
    ft.save_steps(out, losses, norms, lrs, OUT, name, dict(parameters=len(params)))


def st_embeddings(cfg, body, ids):
    """SentenceTransformer(ModernBertModel -> Pooling(mean) -> Normalize) on one column."""
    mask = (ids != 0).long()
    h = mb.ModernBertRef(mb.Cfg(cfg), body).forward(ids, mask)
    m = mask.unsqueeze(-1).to(h.dtype).expand(h.size())
    return F.normalize(torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9), p=2, dim=1)


def embed_steps(V):
    def texts(B, lens):
        return [[1] + torch.randint(4, V, (n - 2,)).tolist() + [2] for n in lens[:B]]
    step = lambda B: {f"col{c}": fe.pad(texts(B, [10, 8, 9, 7][c:] + [6, 9, 10])) for c in range(3)}  # noqa: E731
    return [[step(3)], [step(2), step(3)], [step(3)]]


def tasks(body):
    torch.manual_seed(2526)
    c = mb.Cfg(TASK_CONFIG)
    H, V = c.hidden_size, c.vocab_size
    heads = {"head.dense.weight": torch.randn(H, H) / math.sqrt(H), "head.norm.weight": 1 + 0.1 * torch.randn(H),
             "classifier.weight": 0.5 * torch.randn(NUM_LABELS, H), "classifier.bias": 0.1 * torch.randn(NUM_LABELS),
             "decoder.bias": 0.1 * torch.randn(V)}
    folder = os.path.join(OUT, "tasks")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(TASK_CONFIG, f, indent=2)
        f.write("\n")
    P = dict({"model." + k: v for k, v in body.items()}, **heads)
    st.save({k: npy(v) for k, v in P.items()}, os.path.join(folder, "model.safetensors"))
    cls = {k: v for k, v in P.items() if k != "decoder.bias"}
    run_task("seqcls", TASK_CONFIG, cls, seqcls, three_steps(seq_batch, V))
    run_task("seqcls_mean", dict(TASK_CONFIG, classifier_pooling="mean"), cls, seqcls, three_steps(seq_batch, V))
    run_task("tokcls", TASK_CONFIG, cls, tokcls, three_steps(token_batch, V))
    lm = {k: v for k, v in P.items() if not k.startswith("classifier.")}
    run_task("mlm", TASK_CONFIG, lm, mlm, three_steps(mlm_batch, V))
    # embed: the bare body (a sentence-transformers Transformer module's ModernBertModel names).
    B = {k: v.clone().requires_grad_(True) for k, v in body.items()}
    params = list(B.items())

    def loss(b):
        cols = [b[f"col{i}"] for i in range(3)]
        return fe.mnrl([st_embeddings(TASK_CONFIG, B, t) for t in cols], 20.0)
    out, losses, norms, lrs = ft.trainer_steps(params, loss, embed_steps(V))
    for n, p in params:
        out["final." + n] = p.detach()
    ft.save_steps(out, losses, norms, lrs, OUT, "embed", dict(parameters=len(params), scale=20.0))


if __name__ == "__main__":
    main()
