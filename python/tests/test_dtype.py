"""dtype= of tfm.Encoder and tfm.Translator: bf16 / int8 (oneDNN) against the fp32 PyTorch golden outputs."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors

BERT = os.path.join(FIXTURES, "bert")
D2L = os.path.join(FIXTURES, "d2l_trained")


def per_token_cosine(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(-1) / np.sqrt((a * a).sum(-1) * (b * b).sum(-1))


@pytest.mark.parametrize("dtype,min_cos", [("bf16", 0.9999), ("int8", 0.999)])
def test_encoder_dtype_close_to_pytorch_fp32(dtype, min_cos):
    io = load_safetensors(os.path.join(BERT, "io.safetensors"))
    args = (io["input_ids"], io["attention_mask"], io["token_type_ids"])
    enc = tfm.Encoder(BERT, dtype=dtype, threads=1)
    assert enc.dtype == dtype
    out = enc.forward(*args)
    assert out.shape == io["last_hidden_state"].shape and out.dtype == np.float32
    cos = per_token_cosine(out, io["last_hidden_state"])[io["attention_mask"] == 1]
    assert cos.min() >= min_cos, cos.min()
    # The compute type reached the kernels: the output is not fp32's.
    assert not np.array_equal(out, tfm.Encoder(BERT, threads=1).forward(*args))


def test_dtype_aliases_and_errors():
    assert tfm.Encoder(BERT, dtype="bfloat16").dtype == "bf16"
    assert tfm.Encoder(BERT, dtype="float32").dtype == "fp32"
    assert tfm.Encoder(BERT).dtype == "fp32"  # None: as the folder stores it
    for bad in ("fp16", "", "INT8"):
        with pytest.raises(ValueError, match=f"unknown dtype '{bad}' \\(expected fp32, bf16 or int8\\)"):
            tfm.Encoder(BERT, dtype=bad)
        with pytest.raises(ValueError, match=f"unknown dtype '{bad}'"):
            tfm.Translator(D2L, dtype=bad)


@pytest.mark.parametrize("dtype", ["bf16", "int8"])
def test_translator_dtype_keeps_the_d2l_translations(dtype):
    # test_dtypes.cpp: `tfm translate --dtype` gives fp32's output on this fixture; the scores move a little.
    pred = json.load(open(os.path.join(D2L, "predictions.json")))["predictions"]
    src = [p["src"] for p in pred]
    tr, ref = tfm.Translator(D2L, dtype=dtype, threads=1), tfm.Translator(D2L, threads=1)
    assert tr.dtype == dtype and ref.dtype == "fp32"
    assert tr.translate_batch(src) == [p["pred"] for p in pred]
    got = tr.translate_batch(src, beam_size=3, return_scores=True)
    want = ref.translate_batch(src, beam_size=3, return_scores=True)
    assert [t for t, _ in got] == [t for t, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=0.05)
    assert [s for _, s in got] != [s for _, s in want]
