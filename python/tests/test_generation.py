"""tfm.Translator's generation options (CTranslate2 names) and score_batch against
tests/fixtures/generation/decoding.json (scripts/make_generation_fixtures.py: the PyTorch reference model with the
Hugging Face processors)."""
import json
import math
import os

import pytest

import tfm
from conftest import FIXTURES

D2L = os.path.join(FIXTURES, "d2l_trained")
FX = json.load(open(os.path.join(FIXTURES, "generation", "decoding.json")))
TGT = [line.rstrip("\n") for line in open(os.path.join(D2L, "tgt_vocab.txt"), encoding="utf-8")]


@pytest.fixture(scope="module")
def tr():
    return tfm.Translator(D2L, threads=1)


def words(ids):
    return " ".join(TGT[i] for i in ids)


@pytest.mark.parametrize("case", range(len(FX["greedy"])))
def test_processors_greedy(tr, case):
    c = FX["greedy"][case]
    kw = {k: v for k, v in c["options"].items()}
    got = tr.translate_batch([s["src"] for s in c["sentences"]], **kw)
    assert got == [words(s["pred_ids"]) for s in c["sentences"]]


def test_processors_beam(tr):
    for c in FX["beam"]:
        for s in c["sentences"]:
            [(text, score)] = tr.translate_batch([s["src"]], beam_size=c["beam_size"], return_scores=True,
                                                 **c["options"])
            assert text == words(s["pred_ids"])
            assert math.isclose(score, s["logp"], abs_tol=1e-4)


def test_target_prefix(tr):
    src = [c["src"] for c in FX["prefix"]]
    prefix = [" ".join(c["prefix"]) for c in FX["prefix"]]
    assert tr.translate_batch(src, target_prefix=prefix) == [words(c["greedy_ids"]) for c in FX["prefix"]]
    assert tr.translate_batch(src, beam_size=3, target_prefix=prefix) == [words(c["beam_ids"]) for c in FX["prefix"]]
    with pytest.raises(ValueError, match="target_prefix has 1 entries"):
        tr.translate_batch(src, target_prefix=["je"])
    # a str is the prefix of every sentence (not a list of its characters), as /translate's field
    assert tr.translate_batch(src, target_prefix=prefix[0]) == tr.translate_batch(src, target_prefix=[prefix[0]] * len(src))
    assert tr.translate_batch(src[:1], target_prefix=prefix[0]) == tr.translate_batch(src[:1], target_prefix=prefix[:1])
    with pytest.raises(TypeError, match="target_prefix must be None, a str or a list of str, not int"):
        tr.translate_batch(src, target_prefix=3)


def test_score_batch(tr):
    cases = [c for c in FX["score"] if c["tgt"]]
    got = tr.score_batch([c["src"] for c in cases], [c["tgt"] for c in cases])
    for g, c in zip(got, cases):
        assert g["tokens"][-1] == "<eos>"
        assert len(g["log_probs"]) == len(c["log_probs"])
        assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(g["log_probs"], c["log_probs"]))
        assert math.isclose(g["cumulated_score"], sum(c["log_probs"]), abs_tol=1e-3)
    with pytest.raises(ValueError, match="1 sources but 2 targets"):
        tr.score_batch(["go ."], ["va !", "va !"])


def test_sampling_is_seeded(tr):
    src = [s["src"] for c in FX["greedy"] for s in c["sentences"]]
    a = tr.translate_batch(src, sampling_topk=0, sampling_temperature=1.5, seed=11)
    assert a == tr.translate_batch(src, sampling_topk=0, sampling_temperature=1.5, seed=11)
    assert a != tr.translate_batch(src, sampling_topk=0, sampling_temperature=1.5, seed=12)
    with pytest.raises(ValueError, match="needs beam_size 1"):
        tr.translate_batch(src, sampling_topk=5, beam_size=2)
    # num_hypotheses with sampling: that many samples, best first; repeats draw independently unless
    # seed_per_sentence.
    kw = dict(sampling_topk=0, sampling_temperature=3.0, seed=4)
    n = tr.translate_batch(["i am a teacher ."], num_hypotheses=4, return_scores=True, **kw)
    assert len(n[0]) == 4
    assert [s for _, s in n[0]] == sorted((s for _, s in n[0]), reverse=True)
    assert len(set(tr.translate_batch(["i am a teacher ."] * 4, **kw))) > 1
    assert len(set(tr.translate_batch(["i am a teacher ."] * 4, seed_per_sentence=True, **kw))) == 1
    with pytest.raises(ValueError, match="repetition_penalty must be a finite number > 0"):
        tr.translate_batch(src, repetition_penalty=0.0)
