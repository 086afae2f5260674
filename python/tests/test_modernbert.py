"""tfm.Encoder on a ModernBERT folder against the PyTorch reference of modeling_modernbert.py
(tests/fixtures/modernbert, scripts/make_modernbert_fixtures.py)."""
import os

import numpy as np

import tfm
from conftest import FIXTURES, load_safetensors

ATOL = RTOL = 1e-4  # tests/fixtures/README.md: forward activations
DIR = os.path.join(FIXTURES, "modernbert")
TEXTS = ["A man in a blue shirt is standing on a ladder.", "Two young, White males are outside near many bushes."]


def test_modernbert_forward_and_embed_match_pytorch():
    io = load_safetensors(os.path.join(DIR, "expected.safetensors"))
    enc = tfm.Encoder(DIR)
    assert (enc.model_type, enc.hidden_size, enc.dtype) == ("modernbert", 64, "fp32")
    np.testing.assert_allclose(enc.forward(io["input_ids_single"]), io["last_hidden_state_single"],
                               atol=ATOL, rtol=RTOL)
    out = enc.forward(io["input_ids"], attention_mask=io["attention_mask"], all_positions=True)  # padded rows as PyTorch
    np.testing.assert_allclose(out, io["last_hidden_state"], atol=ATOL, rtol=RTOL)
    # embed: the mean over real tokens of the reference's hidden states (the tokenizer pads with its own <pad>).
    m = io["attention_mask"][..., None].astype(np.float64)
    want = (io["last_hidden_state"] * m).sum(1) / m.sum(1)
    np.testing.assert_allclose(enc.embed(TEXTS, pooling="mean"), want, atol=ATOL, rtol=RTOL)
