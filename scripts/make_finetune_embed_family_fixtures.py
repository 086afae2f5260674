#!/usr/bin/env python3
"""Expected values for `tfm finetune --task embed` on sentence-transformers folders around RoBERTa and DistilBERT
bodies (issue 25): MultipleNegativesRankingLoss steps as SentenceTransformerTrainer runs them, computed by PyTorch
autograd (make_finetune_embed_fixtures.py does BERT, make_finetune_mpnet_fixtures.py MPNet).

The folders are written here from the tiny random checkpoints of tests/fixtures/family_heads (roberta_seqcls,
distilbert_seqcls: their bodies, the heads left out) in the layout sentence-transformers saves (modules.json:
Transformer at the root -> Pooling(mean) -> Normalize; model.safetensors with RobertaModel's / DistilBertModel's
names, "embeddings.*", "encoder.layer.N.*" / "transformer.layer.N.*", no pooler, as in a RobertaForSequenceClassification
body; config.json architectures ["RobertaModel"] / ["DistilBertModel"]; the tokenizer files). The bodies are
make_finetune_family_fixtures.py's (RobertaRef of make_roberta_fixtures.py: position ids from padding_idx = pad
1, as create_position_ids_from_input_ids; distil_body of make_family_head_fixtures.py), with autograd. As
sentence-transformers runs it: each column its own forward, padded with the tokenizer's pad id (RoBERTa <pad> 1,
DistilBERT [PAD] 0; attention_mask ids != pad); models.Pooling mean = sum(h * mask) / clamp(sum(mask), 1e-9);
models.Normalize = F.normalize; losses.MultipleNegativesRankingLoss (make_finetune_embed_fixtures.py's mnrl:
cos_sim * 20, cross-entropy against arange(B)). Dropout 0 (torch's RNG cannot be matched). The optimizer and
schedule are make_finetune_task_fixtures.py's trainer_steps (the Trainer's AdamW with two parameter groups,
clip_grad_norm_, get_linear_schedule_with_warmup with warmup; steps [pairs], [triplets, pairs] accumulated, [pairs]).

Writes tests/fixtures/finetune_embed_family/:
  roberta/, distilbert/             the sentence-transformers folders
  <name>_steps.safetensors          step{k}.micro{j}.col{c} [B, L_c] (each column padded on its own), micro_loss,
                                    grad_norm, lr, step0.grad.<name>, final.<name> (the folder's tensor names)
  <name>_hyper.json                 the hyperparameters, "parameters" (trained tensors), "pad_id", "scale"
Run: /usr/bin/python3 scripts/make_finetune_embed_family_fixtures.py
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_finetune_embed_fixtures as emb  # noqa: E402  (mnrl)
import make_finetune_family_fixtures as fam  # noqa: E402  (roberta_body, distil_body)
import make_finetune_task_fixtures as ft  # noqa: E402  (trainer_steps, save_steps)
import st  # noqa: E402

OUT = os.path.join(fam.FIX, "finetune_embed_family")
SCALE = 20.0

# name: (family_heads source, body prefix in it, the body function, architecture, <s>/[CLS], </s>/[SEP], pad)
FAMILIES = {
    "roberta": ("roberta_seqcls", "roberta.", fam.roberta_body, "RobertaModel", 3256, 3258, 1),
    "distilbert": ("distilbert_seqcls", "distilbert.", fam.distil_body, "DistilBertModel", 2, 3, 0),
}


def write_folder(name):
    """The sentence-transformers folder around the family_heads checkpoint's body. Returns (config, tensors)."""
    src_name, prefix, _, arch, _, _, _ = FAMILIES[name]
    src = os.path.join(fam.FIX, "family_heads", src_name)
    dst = os.path.join(OUT, name)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(os.path.join(dst, "1_Pooling"))
    os.makedirs(os.path.join(dst, "2_Normalize"))
    open(os.path.join(dst, "2_Normalize", ".keep"), "w").close()
    cfg = json.load(open(os.path.join(src, "config.json")))
    for k in ("id2label", "label2id"):
        cfg.pop(k, None)
    cfg["architectures"] = [arch]
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, fn), os.path.join(dst, fn))
    body = {k[len(prefix):]: np.array(v) for k, v in st.load(os.path.join(src, "model.safetensors")).items()
            if k.startswith(prefix) and np.array(v).dtype.kind == "f"}
    st.save({k: np.ascontiguousarray(v) for k, v in body.items()}, os.path.join(dst, "model.safetensors"))
    H = cfg.get("hidden_size", cfg.get("dim"))
    modules = [dict(idx=0, name="0", path="", type="sentence_transformers.models.Transformer"),
               dict(idx=1, name="1", path="1_Pooling", type="sentence_transformers.models.Pooling"),
               dict(idx=2, name="2", path="2_Normalize", type="sentence_transformers.models.Normalize")]
    pooling = dict(word_embedding_dimension=H, pooling_mode_cls_token=False, pooling_mode_max_tokens=False,
                   pooling_mode_mean_tokens=True, pooling_mode_mean_sqrt_len_tokens=False,
                   pooling_mode_weightedmean_tokens=False, pooling_mode_lasttoken=False, include_prompt=True)
    for fn, obj in (("modules.json", modules), ("1_Pooling/config.json", pooling),
                    ("sentence_bert_config.json", dict(max_seq_length=32, do_lower_case=False))):
        with open(os.path.join(dst, fn), "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
    P = {k: torch.from_numpy(v).float().clone().requires_grad_(True) for k, v in body.items()}
    return cfg, P


def run(name):
    _, prefix, body_fn, _, S, E, PAD = FAMILIES[name]
    cfg, P = write_folder(name)

    def encode(ids):
        """SentenceTransformer.forward on one column: the body, mean pooling, Normalize."""
        mask = (ids != PAD).long()
        h = body_fn(cfg, {prefix + k: v for k, v in P.items()}, ids, mask)
        m = mask.unsqueeze(-1).to(h.dtype).expand(h.size())
        x = torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9)
        return F.normalize(x, p=2, dim=1)

    def s(*ids):
        return [S, *ids, E]

    def columns(rows):
        out = {}
        for c in range(len(rows[0])):
            L = max(len(r[c]) for r in rows)
            out[f"col{c}"] = torch.tensor([r[c] + [PAD] * (L - len(r[c])) for r in rows], dtype=torch.long)
        return out

    pairs = [(s(53, 203, 172, 450), s(53, 203, 450, 17)), (s(838, 318, 557), s(838, 1507, 105, 557, 583)),
             (s(2400, 487, 1935, 1846), s(487, 1942, 830))]
    triplets = [(s(460, 333, 1113), s(333, 1113, 617), s(1154, 610, 115, 1398)),
                (s(198, 53, 2013, 532), s(2013, 532, 17), s(71, 127, 1685))]
    pairs2 = [(s(949, 181, 105), s(949, 181)), (s(368, 198, 53), s(368, 198))]
    steps = [[columns(pairs)], [columns(triplets), columns(pairs2)], [columns(pairs[:2])]]
    params = list(P.items())

    def loss_of(b):
        return emb.mnrl([encode(b[f"col{c}"]) for c in range(len(b))], SCALE)  # one forward per column

    out, losses, norms, lrs = ft.trainer_steps(params, loss_of, steps)
    for n, p in params:
        assert p.grad is not None, n
        out["final." + n] = p.detach()
    ft.save_steps(out, losses, norms, lrs, OUT, name,
                  dict(parameters=len(params), model=name, frozen=[], scale=SCALE, pad_id=PAD))


def main():
    for name in FAMILIES:
        run(name)


if __name__ == "__main__":
    main()
