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


if __name__ == "__main__":
    main()
