"""tfm.Encoder.embed on sentence-transformers folders (modules.json) against SentenceTransformer.encode()'s
outputs saved by scripts/make_embed_fixtures.py (tests/fixtures/st_mean, st_multi)."""
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors

ST_MEAN, ST_MULTI = os.path.join(FIXTURES, "st_mean"), os.path.join(FIXTURES, "st_multi")
SENTENCES = open(os.path.join(ST_MEAN, "sentences.txt")).read().split("\n")[:-1]
ATOL = 1e-5  # tests/test_embed.cpp


def test_mean_normalize_folder_matches_sentence_transformers():
    e = load_safetensors(os.path.join(ST_MEAN, "expected.safetensors"))
    enc = tfm.Encoder(ST_MEAN, threads=1)
    assert enc.is_sentence_transformer and enc.embedding_dim == 32
    got = enc.embed(SENTENCES)
    assert got.shape == (8, 32) and got.dtype == np.float32
    np.testing.assert_allclose(got, e["embeddings"], atol=ATOL)
    np.testing.assert_allclose(enc.embed(SENTENCES, batch_size=3), e["embeddings"], atol=ATOL)
    np.testing.assert_allclose(enc.embed(SENTENCES, normalize=True), e["embeddings"], atol=ATOL)
    # pooling replaces the Pooling module's mode; the folder's Normalize still applies.
    cls = e["pool_cls"] / np.linalg.norm(e["pool_cls"], axis=1, keepdims=True)
    np.testing.assert_allclose(enc.embed(SENTENCES, pooling="cls"), cls, atol=ATOL)
    mx = e["pool_max"] / np.linalg.norm(e["pool_max"], axis=1, keepdims=True)
    np.testing.assert_allclose(enc.embed(SENTENCES, pooling="max"), mx, atol=ATOL)
    # normalize=False leaves the folder's Normalize module out (text-embeddings-inference's "normalize": false).
    np.testing.assert_allclose(enc.embed(SENTENCES, normalize=False), e["pooled"], atol=ATOL)


def test_multi_pooling_dense_folder_matches_sentence_transformers():
    # All pooling modes, Dense(192 -> 16, tanh), Normalize, default prompt "query: ", max_seq_length 16.
    e = load_safetensors(os.path.join(ST_MULTI, "expected.safetensors"))
    enc = tfm.Encoder(ST_MULTI, threads=1)
    assert enc.embedding_dim == 16 and enc.hidden_size == 32
    np.testing.assert_allclose(enc.embed(SENTENCES), e["embeddings_query"], atol=ATOL)
    np.testing.assert_allclose(enc.embed(SENTENCES[::-1], batch_size=2), e["embeddings_query"][::-1], atol=ATOL)


def test_plain_folder_keeps_mean_pooling(bert_dir):
    enc = tfm.Encoder(bert_dir)
    assert not enc.is_sentence_transformer and enc.embedding_dim == 32
    with pytest.raises(ValueError, match="texts is empty"):
        enc.embed([])
    with pytest.raises(ValueError, match="unknown pooling mode 'nope'"):
        tfm.Encoder(ST_MEAN).embed(["a"], pooling="nope")
