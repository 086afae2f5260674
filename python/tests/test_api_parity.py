"""Python parity with the CLI and the server: Encoder.embed(prompt_name=, normalize=, dimensions=),
Encoder.forward(output_hidden_states=True), Classifier.rerank, MaskFiller.fill_mask. Expected values are PyTorch's
(tests/fixtures/serve from scripts/make_serve_fixtures.py, bert/io.safetensors, heads_* from
scripts/make_embed_fixtures.py)."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors

ST_MEAN = os.path.join(FIXTURES, "st_mean")
SENTENCES = open(os.path.join(ST_MEAN, "sentences.txt")).read().split("\n")[:-1]
ATOL = 1e-5


@pytest.fixture(scope="module")
def ref():
    return load_safetensors(os.path.join(FIXTURES, "serve", "expected.safetensors"))


def test_embed_prompt_normalize_dimensions_match_sentence_transformers(ref):
    e = load_safetensors(os.path.join(ST_MEAN, "expected.safetensors"))
    enc = tfm.Encoder(ST_MEAN, threads=1)
    np.testing.assert_allclose(enc.embed(SENTENCES, prompt_name="passage"), ref["st_mean_passage"], atol=ATOL)
    np.testing.assert_allclose(enc.embed(SENTENCES, prompt_name="query"), e["embeddings_query"], atol=ATOL)
    np.testing.assert_allclose(enc.embed(SENTENCES, normalize=False), ref["st_mean_unnormalized"], atol=ATOL)
    got = enc.embed(SENTENCES, dimensions=8)
    assert got.shape == (8, 8)
    np.testing.assert_allclose(got, ref["st_mean_dim8"], atol=ATOL)
    np.testing.assert_allclose(enc.embed(SENTENCES, dimensions=8, normalize=False), ref["st_mean_dim8_raw"], atol=ATOL)
    np.testing.assert_allclose(enc.embed(SENTENCES, dimensions=32), e["embeddings"], atol=ATOL)
    with pytest.raises(ValueError, match="prompt name 'nope' is not in .*prompts: passage, query"):
        enc.embed(SENTENCES, prompt_name="nope")
    with pytest.raises(ValueError, match="dimensions"):
        enc.embed(SENTENCES, dimensions=33)
    with pytest.raises(ValueError, match="dimensions must be >= 1"):
        enc.embed(SENTENCES, dimensions=0)
    with pytest.raises(ValueError, match="prompt_name ''"):
        enc.embed(SENTENCES, prompt_name="")


def test_embed_prompt_name_on_a_plain_folder_is_refused(tmp_path):
    enc = tfm.Encoder(os.path.join(FIXTURES, "heads_mlm"), threads=1)
    with pytest.raises(ValueError, match="not a sentence-transformers folder"):
        enc.embed(["a cat"], prompt_name="query")
    # dimensions works on a plain folder too: the first values of the (normalised) mean pooling.
    full = enc.embed(["a cat"], normalize=False)
    cut = enc.embed(["a cat"], dimensions=4, normalize=True)
    np.testing.assert_allclose(cut, full[:, :4] / np.linalg.norm(full[:, :4]), atol=ATOL)


def test_forward_hidden_states_and_pooler_match_pytorch():
    d = os.path.join(FIXTURES, "bert")
    io = load_safetensors(os.path.join(d, "io.safetensors"))
    enc = tfm.Encoder(d, threads=1)
    out = enc.forward(io["input_ids"], io["attention_mask"], io["token_type_ids"], output_hidden_states=True)
    assert set(out) == {"last_hidden_state", "pooler_output", "hidden_states"}
    assert isinstance(out["hidden_states"], tuple) and len(out["hidden_states"]) == io["hidden_states"].shape[0]
    m = io["attention_mask"][..., None].astype(bool)
    for got, want in zip(out["hidden_states"], io["hidden_states"]):
        np.testing.assert_allclose(np.where(m, got, 0), np.where(m, want, 0), atol=1e-4)
    np.testing.assert_allclose(np.where(m, out["last_hidden_state"], 0), np.where(m, io["last_hidden_state"], 0),
                               atol=1e-4)
    np.testing.assert_allclose(out["pooler_output"], io["pooler_output"], atol=1e-4)
    plain = enc.forward(io["input_ids"], io["attention_mask"], io["token_type_ids"], return_dict=True)
    assert plain["hidden_states"] is None
    np.testing.assert_allclose(plain["pooler_output"], io["pooler_output"], atol=1e-4)
    # the default is still the last_hidden_state array
    assert isinstance(enc.forward(io["input_ids"]), np.ndarray)


def test_rerank_matches_pytorch_and_the_cli():
    d = os.path.join(FIXTURES, "heads_cross")
    want = json.load(open(os.path.join(d, "expected.json")))
    c = tfm.Classifier(d, threads=1)
    got = c.rerank(want["query"], want["passages"])
    assert [g["corpus_id"] for g in got] == [w["index"] for w in want["ranking"]]
    np.testing.assert_allclose([g["score"] for g in got], [w["score"] for w in want["ranking"]], atol=1e-5)
    top = c.rerank(want["query"], want["passages"], top_k=2, return_documents=True)
    assert len(top) == 2 and top[0]["text"] == want["passages"][want["ranking"][0]["index"]]
    e = load_safetensors(os.path.join(d, "expected.safetensors"))
    raw = c.rerank(want["query"], want["passages"], raw_scores=True)
    np.testing.assert_allclose(sorted(g["score"] for g in raw), sorted(e["logits"]), atol=1e-5)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        c.rerank(want["query"], want["passages"], top_k=0)
    with pytest.raises(ValueError, match="query is empty"):
        c.rerank(" ", want["passages"])
    with pytest.raises(ValueError, match="passages is empty"):
        c.rerank("q", [])
    with pytest.raises(ValueError, match="single str"):
        c.rerank("q", "one passage")
    with pytest.raises(ValueError, match="max_length"):
        c.rerank("q", ["a"], max_length=2)
    with pytest.raises(RuntimeError, match="3 labels"):
        tfm.Classifier(os.path.join(FIXTURES, "heads_seqcls"), threads=1).rerank("q", ["a"])


def test_fill_mask_matches_pytorch_pipeline():
    d = os.path.join(FIXTURES, "heads_mlm")
    want = json.load(open(os.path.join(d, "expected.json")))
    f = tfm.MaskFiller(d, threads=1)
    one = f.fill_mask(want["texts"][0])  # a str: its candidates, as pipeline("fill-mask")(text)
    assert [c["token"] for c in one] == [w["token"] for w in want["results"][0]]
    np.testing.assert_allclose([c["score"] for c in one], [w["score"] for w in want["results"][0]], atol=1e-5)
    assert one[0]["sequence"] == want["results"][0][0]["sequence"]
    many = f.fill_mask(want["texts"], top_k=2)
    assert len(many) == 3 and all(len(r) == 2 for r in many)
    assert [c["token"] for c in many[1]] == [w["token"] for w in want["results"][1][:2]]
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        f.fill_mask("no mask here")
    with pytest.raises(ValueError, match="top_k"):
        f.fill_mask(want["texts"][0], top_k=0)
