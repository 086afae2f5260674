"""tfm.Encoder, tfm.Classifier, tfm.TokenClassifier and tfm.MaskFiller on the RoBERTa / XLM-RoBERTa and DistilBERT
folders of tests/fixtures/family_heads, against the PyTorch references and pipeline outputs written by
scripts/make_family_head_fixtures.py (from modeling_roberta.py / modeling_distilbert.py)."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors

FH = os.path.join(FIXTURES, "family_heads")


def folder(name):
    return os.path.join(FH, name)


def expected(name):
    return load_safetensors(os.path.join(folder(name), "expected.safetensors"))


def pipeline(name):
    with open(os.path.join(folder(name), "expected.json"), encoding="utf-8") as f:
        return json.load(f)


def cosine_rows(a, b):
    a, b = a.reshape(-1, a.shape[-1]).astype(np.float64), b.reshape(-1, b.shape[-1]).astype(np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("name", ["roberta_seqcls", "distilbert_seqcls", "camembert_seqcls"])
def test_classifier_loads_every_family(name):
    e, want = expected(name), pipeline(name)
    c = tfm.Classifier(folder(name), threads=1)
    assert c.dtype == "fp32"
    logits = c.logits(want["texts"], batch_size=2)  # one padded batch of two, then one
    np.testing.assert_allclose(logits, e["batch_logits"], atol=1e-4)
    got = c.classify(want["texts"])
    for g, w in zip(got, want["results"]):
        assert g["label"] == w["label"] and abs(g["score"] - w["score"]) < 1e-4
    for dtype, bound in (("bf16", 0.9999), ("int8", 0.999)):
        q = tfm.Classifier(folder(name), dtype=dtype, threads=1)
        assert q.dtype == dtype
        assert cosine_rows(q.logits(want["texts"]), logits).min() >= bound - 1e-3  # logits of 2-3 labels
    with pytest.raises(ValueError, match="dtype"):
        tfm.Classifier(folder(name), dtype="fp16")


def test_xlm_roberta_cross_encoder_loads():
    """XLMRobertaForSequenceClassification with one label (bge-reranker's layout): the folder's tokenizer gives
    the pairs Hugging Face gave, and the classifier scores with a sigmoid."""
    want, e = pipeline("xlmr_cross"), expected("xlmr_cross")
    tok = tfm.Tokenizer(folder("xlmr_cross"))
    for i, p in enumerate(want["passages"]):
        assert list(tok.encode(want["query"], pair=p)["input_ids"]) == e[f"pairs_input_ids_{i}"][0].tolist()
    c = tfm.Classifier(folder("xlmr_cross"))
    assert c.num_labels == 1 and c.labels == ["LABEL_0"]
    logit = c.logits([want["query"]])[0, 0]
    assert abs(c.classify([want["query"]])[0]["score"] - 1 / (1 + np.exp(-logit))) < 1e-6


@pytest.mark.parametrize("name", ["roberta_tokcls", "distilbert_tokcls", "mpnet_tokcls", "modernbert_tokcls",
                                  "electra_tokcls", "deberta_tokcls"])
def test_token_classifier_loads_every_family(name):
    want = pipeline(name)
    t = tfm.TokenClassifier(folder(name), threads=1)
    got = t.tag(want["texts"])
    assert len(got) == len(want["entities"])
    for g_row, w_row in zip(got, want["entities"]):
        assert [(g["entity"], g["index"], g["word"], g["start"], g["end"]) for g in g_row] == \
               [(w["entity"], w["index"], w["word"], w["start"], w["end"]) for w in w_row]
        np.testing.assert_allclose([g["score"] for g in g_row], [w["score"] for w in w_row], atol=1e-4)
    assert tfm.TokenClassifier(folder(name), dtype="int8").dtype == "int8"


@pytest.mark.parametrize("name,mask", [("roberta_mlm", "<mask>"), ("distilbert_mlm", "[MASK]")])
def test_mask_filler_loads_every_family(name, mask):
    want = pipeline(name)
    f = tfm.MaskFiller(folder(name), threads=1)
    assert f.mask_token == mask
    got = f.fill(want["texts"])
    for g, w in zip(got, want["results"]):
        w = w if isinstance(w[0], list) else [w]  # the pipeline gives a bare list for one mask
        assert len(g) == len(w)
        for gm, wm in zip(g, w):
            assert [(c["token"], c["token_str"], c["sequence"]) for c in gm] == \
                   [(c["token"], c["token_str"], c["sequence"]) for c in wm]
            np.testing.assert_allclose([c["score"] for c in gm], [c["score"] for c in wm], atol=1e-4)
    bf = tfm.MaskFiller(folder(name), dtype="bf16")
    assert bf.dtype == "bf16"
    assert bf.fill(want["texts"][:1])[0][0][0]["token"] == got[0][0][0]["token"]


def test_encoder_loads_distilbert_and_headed_folders():
    e = expected("distilbert")
    enc = tfm.Encoder(folder("distilbert"))
    out = enc.forward(e["input_ids"], attention_mask=e["attention_mask"])
    valid = e["attention_mask"].astype(bool)
    np.testing.assert_allclose(out[valid], e["last_hidden_state"][valid], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(enc.forward(e["input_ids_single"]), e["last_hidden_state_single"], atol=1e-4, rtol=1e-4)
    for dtype, bound in (("bf16", 0.9999), ("int8", 0.999)):
        q = tfm.Encoder(folder("distilbert"), dtype=dtype)
        assert q.dtype == dtype
        got = q.forward(e["input_ids"], attention_mask=e["attention_mask"])
        assert cosine_rows(got[valid], e["last_hidden_state"][valid]).min() >= bound
    # A DistilBertForSequenceClassification / RobertaForMaskedLM folder encodes as its base model.
    for name in ("distilbert_seqcls", "roberta_mlm", "xlmr_cross"):
        h = tfm.Encoder(folder(name)).forward(np.array([[5, 6, 7, 8]]))
        assert h.shape == (1, 4, 32) and np.isfinite(h).all()
