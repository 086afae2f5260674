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
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        tr.translate_batch(["Run!"], target_lang="fr")
    with pytest.raises(ValueError, match="num_hypotheses must be from 1 to beam_size"):
        tr.translate_batch(["Run!"], beam_size=2, num_hypotheses=3)
    d2l = tfm.Translator(os.path.join(FIXTURES, "d2l_trained"), threads=1)
    with pytest.raises(ValueError, match="apply to Hugging Face translation folders"):
        d2l.translate_batch(["go ."], target_lang="fr")
