"""tfm.quantize_embeddings and Encoder.encode(precision=) against sentence-transformers' quantize_embeddings as
re-implemented in numpy by scripts/make_quantization_fixtures.py (tests/fixtures/tasks/quantization)."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES

Q = os.path.join(FIXTURES, "tasks", "quantization")
ST_MEAN = os.path.join(FIXTURES, "st_mean")
EXP = json.load(open(os.path.join(Q, "expected.json")))
SENTENCES = open(os.path.join(ST_MEAN, "sentences.txt")).read().split("\n")[:-1]
DTYPES = {"int8": np.int8, "uint8": np.uint8, "binary": np.int8, "ubinary": np.uint8}


def within_one_level(got, want):
    d = (got.astype(int) - np.asarray(want)) % 256
    return bool(((d <= 1) | (d >= 255)).all())


def test_quantize_embeddings_equals_the_reference():
    odd = np.array(EXP["odd_dim"]["embeddings"], dtype=np.float32)
    for p in ("int8", "uint8", "binary", "ubinary"):
        got = tfm.quantize_embeddings(odd, p)
        assert got.dtype == DTYPES[p]
        np.testing.assert_array_equal(got, np.array(EXP["odd_dim"][p]))
    ref = np.load(os.path.join(Q, "st_corpus.npy"))
    calib = np.load(os.path.join(Q, "calibration.npy"))
    np.testing.assert_array_equal(tfm.quantize_embeddings(ref, "int8", calibration_embeddings=calib),
                                  np.array(EXP["quantize"]["int8_calibrated"]))
    ranges = np.vstack((calib.min(0), calib.max(0)))
    np.testing.assert_array_equal(tfm.quantize_embeddings(ref, "uint8", ranges=ranges),
                                  np.array(EXP["quantize"]["uint8_calibrated"]))
    np.testing.assert_array_equal(tfm.quantize_embeddings(ref, "float32"), ref)
    with pytest.raises(ValueError, match="precision 'int4' is not one of"):
        tfm.quantize_embeddings(ref, "int4")
    with pytest.raises(ValueError, match="must be float rather than int8"):
        tfm.quantize_embeddings(tfm.quantize_embeddings(ref, "int8"), "int8")
    with pytest.raises(ValueError, match=r"ranges must be \[2, 32\]"):
        tfm.quantize_embeddings(ref, "int8", ranges=ranges[:, :4])


def test_encode_precision_as_sentence_transformers():
    enc = tfm.Encoder(ST_MEAN, threads=1)
    for p in ("binary", "ubinary"):
        got = enc.encode(SENTENCES, precision=p)
        assert got.dtype == DTYPES[p] and got.shape == (8, 4)
        np.testing.assert_array_equal(got, np.array(EXP["quantize"][p]))
    got = enc.embed(SENTENCES, precision="int8")
    assert got.dtype == np.int8 and got.shape == (8, 32)
    assert within_one_level(got, EXP["quantize"]["int8"])
    calib = np.load(os.path.join(Q, "calibration.npy"))
    got = enc.encode(SENTENCES, precision="uint8", calibration_embeddings=calib)
    assert got.dtype == np.uint8 and within_one_level(got, EXP["quantize"]["uint8_calibrated"])
    with pytest.raises(ValueError, match="precision 'half'"):
        enc.encode(SENTENCES, precision="half")
