"""tfm.Encoder on the NomicBERT sentence-transformers folder against the PyTorch reference of
modeling_hf_nomic_bert.py (tests/fixtures/nomic_bert, scripts/make_nomic_bert_fixtures.py): forward, and embed with
the folder's prompts (SentenceTransformer.encode(prompt_name=...))."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors

DIR = os.path.join(FIXTURES, "nomic_bert")


def test_nomic_bert_forward_and_prompted_embed_match_pytorch():
    io = load_safetensors(os.path.join(DIR, "expected.safetensors"))
    with open(os.path.join(DIR, "encodings.json"), encoding="utf-8") as f:
        texts = json.load(f)["texts"]
    enc = tfm.Encoder(DIR)
    assert (enc.model_type, enc.hidden_size) == ("nomic_bert", 32)
    np.testing.assert_allclose(enc.forward(io["none_input_ids_0"]), io["none_last_hidden_state_0"], atol=1e-4,
                               rtol=1e-4)
    for prompt in ("query", "document"):
        want = np.stack([io[f"{prompt}_embedding_{i}"] for i in range(len(texts))])
        np.testing.assert_allclose(enc.embed(texts, prompt_name=prompt), want, atol=1e-4, rtol=1e-4)
    with pytest.raises(Exception, match="passage"):
        enc.embed(texts, prompt_name="passage")
