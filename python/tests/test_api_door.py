"""The API the CLI and the server go through, from Python: Tokenizer.encode (offsets), Translator.encode_source /
attention, TokenClassifier, MaskFiller, convert and train_d2l, against Hugging Face / PyTorch / d2l fixtures."""
import json
import os
import struct

import numpy as np
import pytest

import tfm
from conftest import BERT_BASE, DATA, FIXTURES


def _json(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.skipif(not os.path.isdir(BERT_BASE), reason="needs ../shared/data/bert-base-uncased")
def test_encode_offsets_match_hugging_face():
    fx = _json(os.path.join(FIXTURES, "tokenizer", "bert_base_uncased_offsets.json"))
    tok = tfm.Tokenizer(BERT_BASE)
    for case in fx["cases"]:
        e = tok.encode(case["text"])
        assert e["tokens"] == case["tokens"]
        assert e["input_ids"] == case["ids"]
        assert e["special_tokens_mask"] == case["special"]
        # Hugging Face's offset_mapping, (0, 0) for special tokens included.
        want = [tuple(o) for o in case["offsets"]]
        assert [tuple(o) for o in e["offsets"]] == want, case["text"]


def test_encode_pair_and_errors():
    tok = tfm.Tokenizer(os.path.join(FIXTURES, "heads_seqcls"))
    e = tok.encode("a b", pair="c")
    assert e["tokens"][0] == "[CLS]" and e["tokens"].count("[SEP]") == 2
    assert e["token_type_ids"][-1] == 1 and e["token_type_ids"][0] == 0
    # Pairs have offsets too (HF offset_mapping), the second text counting from its own start: by hand, "a b" has
    # a [0, 1) and b [2, 3), "c" has c [0, 1).
    assert [tuple(o) for o in e["offsets"]] == [(0, 0), (0, 1), (2, 3), (0, 0), (0, 1), (0, 0)]
    with pytest.raises(ValueError, match="max_length"):
        tok.encode("a b", max_length=1)


def test_translator_encode_source_and_attention_follow_d2l():
    fx = _json(os.path.join(FIXTURES, "d2l_trained", "predictions.json"))
    tr = tfm.Translator(os.path.join(FIXTURES, "d2l_trained"))
    assert tr.max_source_tokens == tr.num_steps
    with open(os.path.join(FIXTURES, "d2l_trained", "src_vocab.txt")) as f:
        unk = [line.rstrip("\n") for line in f].index("<unk>")
    for p in fx["predictions"]:
        src = tr.encode_source(p["src"])
        assert src["ids"] == p["src_ids"]  # d2l's vocabulary ids with <eos>
        assert len(src["unknown_words"]) == p["src_ids"].count(unk)
        a = tr.attention(src["ids"])
        assert a["text"] == p["pred"]
        assert a["source_tokens"][-1] == "<eos>" and len(a["source_tokens"]) == len(src["ids"])
        T = len(p["pred_ids"]) + 1  # every token plus the <eos> step
        assert a["target_tokens"][:-1] == p["pred"].split(" ") and a["target_tokens"][-1] == "<eos>"
        for m in a["encoder_self"]:
            assert m.shape[1:] == (len(src["ids"]), len(src["ids"]))
            np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)  # softmax rows over the valid keys
        for m in a["cross"]:
            assert m.shape[1:] == (T, len(src["ids"]))
            np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-5)
    long = tr.encode_source(" ".join(["go"] * 20) + " zzzunknown .")
    assert len(long["ids"]) == tr.num_steps and long["full_length"] == 23
    assert long["unknown_words"] == ["zzzunknown"]
    with pytest.raises(ValueError, match="empty"):
        tr.encode_source("   ")


def test_token_classifier_matches_the_pipeline():
    d = os.path.join(FIXTURES, "heads_tokcls")
    fx = _json(os.path.join(d, "expected.json"))
    got = tfm.TokenClassifier(d).tag(fx["texts"])
    for g, want in zip(got, fx["entities"]):
        assert [(x["entity"], x["index"], x["word"], x["start"], x["end"]) for x in g] == \
            [(x["entity"], x["index"], x["word"], x["start"], x["end"]) for x in want]
        np.testing.assert_allclose([x["score"] for x in g], [x["score"] for x in want], rtol=1e-4, atol=1e-5)


def test_mask_filler_matches_the_pipeline():
    d = os.path.join(FIXTURES, "heads_mlm")
    fx = _json(os.path.join(d, "expected.json"))
    got = tfm.MaskFiller(d).fill(fx["texts"], top_k=len(fx["results"][0]))
    for g, want in zip(got, fx["results"]):
        assert len(g) == 1  # one [MASK] per text
        assert [c["token"] for c in g[0]] == [c["token"] for c in want]
        assert [c["sequence"] for c in g[0]] == [c["sequence"] for c in want]
        np.testing.assert_allclose([c["score"] for c in g[0]], [c["score"] for c in want], rtol=1e-4, atol=1e-6)
    with pytest.raises(RuntimeError, match="no masked"):
        tfm.MaskFiller(os.path.join(FIXTURES, "heads_seqcls"))
    # a text without [MASK] is refused (it gave [[]]), as by `tfm fill-mask` and the fill-mask pipeline
    with pytest.raises(ValueError, match=r"^input 1 has no \[MASK\] token$"):
        tfm.MaskFiller(d).fill(["the cat sat on the [MASK]", "the cat"])
    with pytest.raises(ValueError, match=r"^input 0 has no \[MASK\] token$"):
        tfm.MaskFiller(d).fill_mask("the cat")


def _safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def test_convert_writes_int8_linear_weights(tmp_path):
    src = os.path.join(FIXTURES, "bert")
    s = tfm.convert(src, tmp_path / "int8", "int8")
    h = _safetensors_header(s.weights_path)
    assert h["__metadata__"]["tfm_dtype"] == "int8"
    q = "encoder.layer.0.attention.self.query.weight"
    assert h[q]["dtype"] == "I8" and h[q + "_scale"]["dtype"] == "F32"
    assert h["embeddings.word_embeddings.weight"]["dtype"] == "F32"
    assert s.converted == sum(1 for k, v in h.items() if k != "__metadata__" and v["dtype"] == "I8")
    assert s.bytes == os.path.getsize(s.weights_path) < s.source_bytes
    with pytest.raises(RuntimeError, match="not an empty folder"):
        tfm.convert(src, tmp_path / "int8", "bf16")
    with pytest.raises(ValueError, match="dtype"):
        tfm.convert(src, tmp_path / "x", "fp8")


@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "fra-eng", "fra.txt")), reason="needs fra-eng")
def test_train_d2l_writes_a_translator_folder(tmp_path):
    out = tmp_path / "m"
    s = tfm.train_d2l(os.path.join(DATA, "fra-eng", "fra.txt"), out, num_examples=40, epochs=2, threads=1)
    assert s.epochs_run == 2 and np.isfinite(s.loss) and s.loss > 0
    for f in ("config.json", "model.safetensors", "src_vocab.txt", "tgt_vocab.txt", "train_log.csv"):
        assert (out / f).exists(), f
    assert len(tfm.Translator(out).translate_batch(["go ."])) == 1
    with pytest.raises(ValueError):
        tfm.train_d2l(os.path.join(DATA, "fra-eng", "fra.txt"), out, num_examples=40, epochs=1)  # not empty
