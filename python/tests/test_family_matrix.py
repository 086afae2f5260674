"""Every encoder family through tfm.Encoder and tfm.Classifier in every dtype, the Python side of
tests/test_family_matrix.cpp: the sequence-classifier folders of scripts/make_family_head_fixtures.py (BERT,
RoBERTa, DistilBERT, MPNet, ModernBERT), make_electra_fixtures.py (ELECTRA) and make_deberta_fixtures.py (DeBERTa-v3)
against their PyTorch references. fp32 equals the reference (atol 1e-4);
bf16 / int8 keep a token cosine >= 0.9999 / >= 0.999 and logits within 2% / 8% of the reference logits' norm."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors

FH = os.path.join(FIXTURES, "family_heads")
# (model_type, encodings.json set, folder)
FAMILIES = [("bert", "wordpiece", "bert_seqcls"), ("roberta", "bpe_bytelevel", "roberta_seqcls"),
            ("distilbert", "wordpiece", "distilbert_seqcls"), ("mpnet", "mpnet", "mpnet_seqcls"),
            ("modernbert", "bpe_bytelevel", "modernbert_seqcls"), ("electra", "wordpiece", "electra_seqcls"),
            ("deberta-v2", "deberta_v3", "deberta_seqcls")]
DTYPES = [("fp32", 1.0, 0.0), ("bf16", 0.9999, 0.02), ("int8", 0.999, 0.08)]


def cosine_rows(a, b):
    a, b = a.reshape(-1, a.shape[-1]).astype(np.float64), b.reshape(-1, b.shape[-1]).astype(np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def close(got, want, dtype, bound):
    if dtype == "fp32":
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    else:
        assert cosine_rows(got, want).min() >= bound


@pytest.mark.parametrize("dtype,bound,logit_tol", DTYPES)
@pytest.mark.parametrize("model_type,tokenizer,folder", FAMILIES)
def test_encoder_and_classifier_every_family_every_dtype(model_type, tokenizer, folder, dtype, bound, logit_tol):
    with open(os.path.join(FH, "encodings.json"), encoding="utf-8") as f:
        texts = [e["text"] for e in json.load(f)["tokenizers"][tokenizer]["classify"]]
    d = os.path.join(FH, folder)
    e = load_safetensors(os.path.join(d, "expected.safetensors"))
    hidden = [e[f"classify_hidden_{i}"] for i in range(len(texts))]

    enc = tfm.Encoder(d, dtype=dtype, threads=1)
    assert (enc.model_type, enc.dtype) == (model_type, dtype)
    for i, h in enumerate(hidden):
        close(enc.forward(e[f"classify_input_ids_{i}"]), h, dtype, bound)
    # One padded batch of three lengths (the unpadded forward): sentence-transformers' mean pooling + Normalize.
    means = np.stack([h[0].mean(0) for h in hidden])
    want = means / np.linalg.norm(means, axis=-1, keepdims=True)
    close(enc.embed(texts, pooling="mean", normalize=True), want, dtype, bound)

    c = tfm.Classifier(d, dtype=dtype, threads=1)
    assert c.dtype == dtype
    logits = c.logits(texts)
    want = np.concatenate([e[f"classify_logits_{i}"] for i in range(len(texts))])
    assert logits.shape == want.shape
    if dtype == "fp32":
        np.testing.assert_allclose(logits, want, atol=1e-4, rtol=1e-4)
    else:
        err = np.linalg.norm(logits - want, axis=-1)
        assert (err <= logit_tol * np.maximum(1.0, np.linalg.norm(want, axis=-1)) + 1e-4).all(), (err, want)
