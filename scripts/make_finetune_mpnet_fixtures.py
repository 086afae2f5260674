#!/usr/bin/env python3
"""Expected values for `tfm finetune` on MPNet (issue 25): optimizer steps of MPNet sequence classification, token
classification, masked-LM and sentence-embedding (MultipleNegativesRankingLoss) fine-tuning as the Hugging Face
Trainer / SentenceTransformerTrainer run them, computed by PyTorch autograd.

The body is make_mpnet_fixtures.py's MPNetRef (modeling_mpnet.py's MPNetModel, cross-checked there against
RobertaRef with the relative bias zeroed), run here with autograd: every float tensor a leaf, so that
encoder.relative_attention_bias.weight gets its gradient through MPNetEncoder.compute_position_bias's embedding
lookup of the relative-position buckets, shared by every layer. The heads as modeling_mpnet.py writes them
(dropout p = 0: torch's RNG cannot be matched; the C++ tests run without dropout):
  - MPNetForSequenceClassification: MPNetClassificationHead(features): x = features[:, 0, :]; dropout; dense;
    tanh; dropout; out_proj (RobertaClassificationHead's computation; classifier.dense / classifier.out_proj).
    loss = CrossEntropyLoss.
  - MPNetForTokenClassification: classifier(dropout(sequence_output)); CrossEntropyLoss (ignore_index -100).
  - MPNetForMaskedLM: MPNetLMHead: dense, gelu, layer_norm (layer_norm_eps), decoder whose weight is
    mpnet.embeddings.word_embeddings.weight (tied) and whose bias is lm_head.bias.
The starting checkpoints are tests/fixtures/family_heads/mpnet_{seqcls,tokcls,mlm} (make_mpnet_fixtures.py), the
batches, optimizer and schedule make_finetune_family_fixtures.py's (the Trainer's AdamW with two parameter groups,
clip_grad_norm_, get_linear_schedule_with_warmup; steps [1 micro-batch], [2 micro-batches], [1 micro-batch]).
Token ids: <s> 0, <pad> 1, </s> 2, <mask> 2509 (tests/fixtures/mpnet/tokenizer.json).

Sentence embeddings: tests/fixtures/mpnet (all-mpnet-base-v2's layout: MPNetModel at the root -> Pooling(mean) ->
Normalize), as sentence-transformers runs it: each column its own forward, padded with <pad> 1 (attention_mask
ids != 1); models.Pooling mean = sum(h * mask) / clamp(sum(mask), 1e-9); models.Normalize = F.normalize;
losses.MultipleNegativesRankingLoss (make_finetune_embed_fixtures.py's mnrl: cos_sim * 20, cross-entropy against
arange(B)). The pooler is not trained (sentence-transformers pools last_hidden_state; its grad stays None).

Writes tests/fixtures/finetune_family/mpnet_{seqcls,tokcls,mlm}_{steps.safetensors,hyper.json} (the keys of
make_finetune_family_fixtures.py), and tests/fixtures/finetune_mpnet/:
  embed_steps.safetensors, embed_hyper.json  the same keys for the embedding steps, a batch being
      step{k}.micro{j}.col{c} [B, L_c] (each column padded on its own): pairs, triplets + pairs, pairs
  e2e_steps.safetensors, e2e_hyper.json      the CLI run below: micro_loss, grad_norm, lr [4] and final.<name> after
      4 epochs of one batch of e2e_train.jsonl, and embeddings [4, 32]: the trained model's sentence embeddings of
      tests/fixtures/mpnet/sentences.txt
  e2e_train.jsonl  anchor, positive: the four sentences of tests/fixtures/mpnet/sentences.txt, in two pairs; their
      ids are the Hugging Face tokenizer's (tokenizer_cases.json), which `tfm finetune` must reproduce.
Run: /usr/bin/python3 scripts/make_finetune_mpnet_fixtures.py
"""
import functools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_finetune_embed_fixtures as emb  # noqa: E402  (mnrl)
import make_finetune_family_fixtures as fam  # noqa: E402  (batches, heads, run)
import make_finetune_task_fixtures as ft  # noqa: E402  (trainer_steps, save_steps)
import make_mpnet_fixtures as mp  # noqa: E402  (MPNetRef)
import st  # noqa: E402

OUT = os.path.join(fam.FIX, "finetune_mpnet")
S, PAD, E, MASK = 0, 1, 2, 2509  # <s>, <pad>, </s>, <mask>


def mpnet_body(cfg, params, ids, mask, prefix="mpnet."):
    sd = fam.base(params, prefix)
    H = cfg["hidden_size"]
    if "pooler.dense.weight" not in sd:  # the For* models have none (add_pooling_layer=False): zeros, not trained
        sd["pooler.dense.weight"], sd["pooler.dense.bias"] = torch.zeros(H, H), torch.zeros(H)
    h, _ = mp.MPNetRef(mp.Cfg(cfg), sd).forward(ids, mask)
    return h


def heads():
    seqcls = functools.partial(fam.roberta_seqcls, body=mpnet_body)  # MPNetClassificationHead
    mlm = functools.partial(fam.roberta_mlm, body=mpnet_body, prefix="mpnet.")  # MPNetLMHead
    fam.run("mpnet_seqcls", "mpnet_seqcls", seqcls, fam.seq_steps(S, E, PAD, 2))
    fam.run("mpnet_tokcls", "mpnet_tokcls", fam.tokcls(mpnet_body), fam.token_steps(S, E, PAD))
    fam.run("mpnet_mlm", "mpnet_mlm", mlm, fam.mlm_steps(S, E, PAD, MASK))


# ------------------------------------------------------------------------------------------------ embeddings

def load_st():
    cfg = json.load(open(os.path.join(fam.FIX, "mpnet", "config.json")))
    sd = st.load(os.path.join(fam.FIX, "mpnet", "model.safetensors"))
    P = {k: torch.from_numpy(np.array(v)).float().clone().requires_grad_(True)
         for k, v in sd.items() if np.array(v).dtype.kind == "f"}
    return cfg, P


def encode(cfg, P, ids):
    """SentenceTransformer.forward on one column: MPNetModel, mean pooling, Normalize."""
    mask = (ids != PAD).long()
    h = mpnet_body(cfg, P, ids, mask, prefix="")
    m = mask.unsqueeze(-1).to(h.dtype).expand(h.size())
    x = torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9)
    return F.normalize(x, p=2, dim=1)


def pad(rows):
    L = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (L - len(r)) for r in rows], dtype=torch.long)


def columns(rows):
    """A batch of (anchor, positive [, negative]) id lists: col{c} each padded on its own."""
    return {f"col{c}": pad([r[c] for r in rows]) for c in range(len(rows[0]))}


def embed_steps(cfg, P, steps):
    params = [(n, p) for n, p in P.items() if not n.startswith("pooler.")]

    def loss_of(b):
        reps = [encode(cfg, P, b[f"col{c}"]) for c in range(len(b))]  # one forward per column
        return emb.mnrl(reps, 20.0)

    out, losses, norms, lrs = ft.trainer_steps(params, loss_of, steps)
    assert all(P[n].grad is None for n in P if n.startswith("pooler.")), "the pooler got a gradient"
    for n, p in params:
        out["final." + n] = p.detach()
    return out, losses, norms, lrs, params


def embeddings():
    def s(*ids):
        return [S, *ids, E]

    pairs = [(s(53, 203, 172, 450), s(53, 203, 450, 17)), (s(838, 318, 557), s(838, 1507, 105, 557, 583)),
             (s(2500, 487, 1935, 1846), s(487, 1942, 830))]
    triplets = [(s(460, 333, 1113), s(333, 1113, 617), s(1154, 610, 115, 1398)),
                (s(198, 53, 2013, 532), s(2013, 532, 17), s(71, 127, 1685))]
    pairs2 = [(s(949, 181, 105), s(949, 181)), (s(368, 198, 53), s(368, 198))]
    cfg, P = load_st()
    out, losses, norms, lrs, params = embed_steps(
        cfg, P, [[columns(pairs)], [columns(triplets), columns(pairs2)], [columns(pairs[:2])]])
    assert P["encoder.relative_attention_bias.weight"].grad is not None
    ft.save_steps(out, losses, norms, lrs, OUT, "embed",
                  dict(parameters=len(params), model="mpnet", frozen=[], scale=20.0))

    # The CLI run: 4 epochs of one batch (anchor, positive) of the four sentences, tokenized by Hugging Face.
    cases = json.load(open(os.path.join(fam.FIX, "mpnet", "tokenizer_cases.json")))["cases"]
    texts = [c["text"] for c in cases]
    with open(os.path.join(fam.FIX, "mpnet", "sentences.txt")) as f:
        assert [line.rstrip("\n") for line in f] == texts
    ids = [c["input_ids"] for c in cases]
    cfg, P = load_st()
    out, losses, norms, lrs, params = embed_steps(cfg, P, [[columns([(ids[0], ids[1]), (ids[2], ids[3])])]] * 4)
    with torch.no_grad():
        e2e = {k: v for k, v in out.items() if k.startswith("final.")}
        e2e["embeddings"] = encode(cfg, P, pad(ids))
    ft.save_steps(e2e, losses, norms, lrs, OUT, "e2e",
                  dict(parameters=len(params), model="mpnet", frozen=[], scale=20.0))
    with open(os.path.join(OUT, "e2e_train.jsonl"), "w") as f:
        for a, p in ((0, 1), (2, 3)):
            f.write(json.dumps(dict(anchor=texts[a], positive=texts[p])) + "\n")


def main():
    heads()
    embeddings()


if __name__ == "__main__":
    main()
