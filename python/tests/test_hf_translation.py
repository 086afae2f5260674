"""tfm.Translator on Hugging Face translation folders (Marian, M2M100, NLLB: tests/fixtures/{marian,m2m100,nllb} from
scripts/make_marian_fixtures.py): the reference generate's outputs and n-best scores, and the CLI's equality."""
import json
import os

import pytest

import tfm
from conftest import FIXTURES, run_cli

FOLDERS = ["marian", "m2m100", "nllb"]


def expected(name):
    return json.load(open(os.path.join(FIXTURES, name, "expected.json"), encoding="utf-8"))


@pytest.mark.parametrize("name", FOLDERS)
def test_defaults_greedy_and_nbest_equal_the_reference(name):
    ex = expected(name)
    tr = tfm.Translator(os.path.join(FIXTURES, name), threads=1)
    assert tr.model_type in ("marian", "m2m_100") and tr.subword
    sources = [c["source"] for c in ex["cases"]]
    assert tr.translate_batch(sources) == [c["runs"][1]["text"] for c in ex["cases"]]
    assert tr.translate_batch(sources, beam_size=1) == [c["runs"][0]["text"] for c in ex["cases"]]
    k = ex["generation_config"]["num_beams"]
    nbest = tr.translate_batch(sources, num_hypotheses=k, return_scores=True)
    for c, got in zip(ex["cases"], nbest):
        run = c["runs"][1]
        assert len(got) == len(run["scores"])
        for (text, score), want in zip(got, run["scores"]):
            assert score == pytest.approx(want, abs=1e-4)
        assert got[0][0] == run["text"]
    run = ex["cases"][0]["runs"][2]  # beam 3, length_penalty 0.6
    text, score = tr.translate_batch([ex["cases"][0]["source"]], beam_size=3, length_penalty=0.6,
                                     return_scores=True)[0]
    assert text == run["text"] and score == pytest.approx(run["scores"][0], abs=1e-4)


def test_cli_equals_python():
    ex = expected("m2m100")
    sources = [c["source"] for c in ex["cases"]]
    out = run_cli("translate", "--model", os.path.join(FIXTURES, "m2m100"), "--target-lang", "fr", "--threads", "1",
                  *sources).stdout
    assert out.splitlines() == [c["runs"][1]["text"] for c in ex["cases"]]


def test_errors():
    tr = tfm.Translator(os.path.join(FIXTURES, "nllb"), threads=1)
    with pytest.raises(ValueError, match="unknown language 'xx'"):
        tr.translate_batch(["Run!"], target_lang="xx")
    # NLLB takes the ISO 639-1 code of its languages too (LibreTranslate clients send "fr").
    assert tr.translate_batch(["Run!"], target_lang="fr") == tr.translate_batch(["Run!"], target_lang="fra_Latn")
    assert "fr" in tr.languages and "ace_Arab" in tr.languages
    with pytest.raises(ValueError, match="num_hypotheses must be from 1 to beam_size"):
        tr.translate_batch(["Run!"], beam_size=2, num_hypotheses=3)
    d2l = tfm.Translator(os.path.join(FIXTURES, "d2l_trained"), threads=1)
    with pytest.raises(ValueError, match="apply to Hugging Face translation folders"):
        d2l.translate_batch(["go ."], target_lang="fr")


def test_trained_marian_greedy_beam_and_french():
    """tests/fixtures/marian_trained (scripts/make_marian_trained_fixture.py): trained on fra-eng."""
    ex = expected("marian_trained")
    tr = tfm.Translator(os.path.join(FIXTURES, "marian_trained"), threads=1)
    sources = [c["source"] for c in ex["cases"]]
    assert tr.translate_batch(sources, beam_size=1) == [c["runs"][0]["text"] for c in ex["cases"]]
    got = tr.translate_batch(sources, return_scores=True)
    for c, (text, score) in zip(ex["cases"], got):
        assert text == c["runs"][1]["text"]
        assert score >= c["runs"][1]["scores"][0] - 1e-4
    french = tr.translate_batch([f["source"] for f in ex["french"]], beam_size=1)
    for f, text in zip(ex["french"], french):
        assert text == f["greedy"] and text in f["translations"]
    assert tr.languages == []


def test_sampling_on_a_hugging_face_folder_is_seeded():
    ex = expected("marian_trained")
    tr = tfm.Translator(os.path.join(FIXTURES, "marian_trained"), threads=1)
    src = [c["source"] for c in ex["cases"]]
    kw = dict(sampling_topk=0, sampling_temperature=1.5, seed=5)
    a = tr.translate_batch(src, **kw)
    assert a == tr.translate_batch(src, **kw)
    assert a != tr.translate_batch(src, sampling_topk=0, sampling_temperature=1.5, seed=6)
    # the same samples as the CLI's --sampling-* flags
    out = run_cli("translate", "--model", os.path.join(FIXTURES, "marian_trained"), "--threads", "1",
                  "--sampling-topk", "0", "--sampling-temperature", "1.5", "--seed", "5", *src).stdout
    assert out.splitlines() == a
    assert tr.translate_batch(src, sampling_topk=5, sampling_topp=0.9, seed=1) == \
        tr.translate_batch(src, sampling_topk=5, sampling_topp=0.9, seed=1)
    with pytest.raises(ValueError, match="needs beam_size 1"):
        tr.translate_batch(src, sampling_topk=5, beam_size=2)
    assert tr.translate_batch(src, early_stopping="never", beam_size=2, no_repeat_ngram_size=2,
                              repetition_penalty=1.2, min_length=3, bad_words_ids=[[5]], forced_eos=False)
