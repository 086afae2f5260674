"""tfm.Tokenizer against Hugging Face tokenizers' golden outputs and the CLI."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import BERT_BASE, FIXTURES, run_cli

CASES = json.load(open(os.path.join(FIXTURES, "tokenizer", "bert_base_uncased_cases.json")))


@pytest.fixture(scope="module")
def tok(needs_data):
    return tfm.Tokenizer(BERT_BASE)


def test_single_texts_match_hugging_face(tok):
    checked = 0
    for c in CASES["cases"]:
        kw = dict(add_special_tokens=c.get("add_special_tokens", True), max_length=c.get("max_length") or 0,
                  return_tokens=True)
        out = tok([c["text"]], [c["pair"]], **kw) if c.get("pair") is not None else tok([c["text"]], **kw)
        assert out["input_ids"].dtype == np.int64
        assert out["input_ids"][0].tolist() == c["input_ids"], c["text"]
        assert out["token_type_ids"][0].tolist() == c["token_type_ids"], c["text"]
        assert out["attention_mask"][0].tolist() == [1] * len(c["input_ids"])
        assert out["tokens"][0] == c["tokens"]
        checked += 1
    assert checked > 100


def test_padded_batches_match_hugging_face(tok):
    for b in CASES["batches"]:
        out = tok(b["texts"], add_special_tokens=b["add_special_tokens"], max_length=b.get("max_length", 0),
                  return_tokens=True)
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            assert out[key].shape == np.array(b[key]).shape
            assert out[key].tolist() == b[key], key
        # Our token lists stop at the padding; HF's continue with [PAD].
        assert [t + ["[PAD]"] * (len(b["tokens"][0]) - len(t)) for t in out["tokens"]] == b["tokens"]


def test_equals_cli(tok):
    r = run_cli("tokenize", "--model", BERT_BASE, "I have a dream.", "--pair", "Yes.")
    cli = json.loads(r.stdout)
    out = tok(["I have a dream."], ["Yes."])
    assert out["input_ids"][0].tolist() == cli["input_ids"]
    assert out["token_type_ids"][0].tolist() == cli["token_type_ids"]
    assert tok.tokenize("I have a dream.") == ["i", "have", "a", "dream", "."]


def test_vocabulary_accessors(tok):
    assert tok.vocab_size == 30522
    assert tok.token_to_id("[CLS]") == 101 and tok.id_to_token(101) == "[CLS]"
    assert tok.token_to_id("no-such-token-here") == -1
    with pytest.raises(IndexError):
        tok.id_to_token(30522)


def test_errors(tok, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        tfm.Tokenizer(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="no tokenizer.json or vocab.txt"):
        tfm.Tokenizer(str(tmp_path))
    with pytest.raises(ValueError, match="no texts"):
        tok([])
    with pytest.raises(ValueError, match="single str"):
        tok("not a list")
    with pytest.raises(ValueError, match="2 texts but 1 pairs"):
        tok(["a", "b"], ["c"])
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(RuntimeError, match="tokenizer.json"):
        tfm.Tokenizer(str(tmp_path))


ENGINE = json.load(open(os.path.join(FIXTURES, "tokenizer", "engine_cases.json")))


@pytest.mark.parametrize("kind", ["bpe_bytelevel", "unigram", "wordpiece", "wordlevel"])
def test_engine_kinds_match_hugging_face(kind):
    """encode() / decode() of each trained tokenizer kind give HF's ids, tokens, offsets and text."""
    t = tfm.Tokenizer(os.path.join(FIXTURES, "tokenizer", kind))
    v = next(x for x in ENGINE["tokenizers"] if x["name"] == kind)
    checked = 0
    for c in v["cases"]:
        if "error" in c or "max_length" in c and c["strategy"] != "LongestFirst" or c.get("direction") == "Left":
            continue
        kw = dict(add_special_tokens=c["add_special_tokens"], max_length=c.get("max_length", 0))
        e = t.encode(c["text"], c.get("pair"), **kw)
        assert e["input_ids"] == c["input_ids"], c["text"]
        assert e["tokens"] == c["tokens"], c["text"]
        # HF's offset_mapping gives (0, 0) to special tokens, tfm (-1, -1): no place in the text.
        assert [[0, 0] if o[0] < 0 else list(o) for o in e.get("offsets", [])] == c["offsets"], c["text"]
        assert e["special_tokens_mask"] == c["special_tokens_mask"]
        assert e["token_type_ids"] == c["token_type_ids"]
        assert t.decode(c["input_ids"]) == c["decoded"]
        assert t.decode(c["input_ids"], skip_special_tokens=False) == c["decoded_with_special"]
        checked += 1
    assert checked >= 60
    if kind != "wordlevel":  # no post-processor and no tokenizer_config.json: a pair's type ids decide
        assert t.has_token_type_ids == (kind == "wordpiece")
