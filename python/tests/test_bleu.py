"""tfm.bleu against sacreBLEU's outputs (tests/fixtures/bleu) and `tfm bleu`."""
import json
import os

import pytest

import tfm
import tfm.bleu
from conftest import FIXTURES, run_cli

CASES = json.load(open(os.path.join(FIXTURES, "bleu", "sacrebleu_cases.json")))["corpora"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_equals_sacrebleu(case):
    s = tfm.bleu.corpus(case["hyps"], case["refs"])
    assert s.score == pytest.approx(case["score"], abs=1e-9)
    assert s.bp == pytest.approx(case["bp"], abs=1e-12) and s.ratio == pytest.approx(case["ratio"], abs=1e-12)
    assert (s.hyp_len, s.ref_len) == (case["hyp_len"], case["ref_len"])
    assert list(s.counts) == case["counts"] and list(s.totals) == case["totals"]
    assert list(s.precisions) == pytest.approx(case["precisions"], abs=1e-9)
    assert s.format() == case["format"] == str(s)
    assert float(s) == s.score


def test_corpus_equals_cli(tmp_path):
    case = CASES[-1]
    (tmp_path / "ref.txt").write_text("\n".join(case["refs"]) + "\n")
    (tmp_path / "hyp.txt").write_text("\n".join(case["hyps"]) + "\n")
    cli = run_cli("bleu", "--corpus", str(tmp_path / "ref.txt"), str(tmp_path / "hyp.txt")).stdout.strip()
    assert tfm.bleu.corpus(case["hyps"], case["refs"]).format() == cli


def test_argument_order_is_sacrebleus():
    # sacrebleu.corpus_bleu(hypotheses, [references]): hypotheses first, references bare or as one stream.
    refs, hyps = ["the cat sat on the mat today"], ["the cat sat"]
    assert tfm.bleu.corpus(hyps, refs).bp < 1  # short hypothesis: brevity penalty
    assert tfm.bleu.corpus(refs, hyps).bp == 1
    assert tfm.bleu.corpus(hyps, [refs]).format() == tfm.bleu.corpus(hyps, refs).format()
    assert tfm.bleu.corpus(references=refs, hypotheses=hyps).bp < 1
    with pytest.raises(ValueError, match="2 reference streams"):
        tfm.bleu.corpus(hyps, [refs, refs])


def test_sentence_equals_d2l_and_cli():
    # d2l: exp(0) * p1^(1/2) * p2^(1/4), p1 = 3/4 unigrams, p2 = 1/3 bigrams ("il est")
    assert tfm.bleu.sentence("il est riche .", "il est calme .", k=2) == pytest.approx(0.75 ** 0.5 * (1 / 3) ** 0.25)
    cli = float(run_cli("bleu", "--k", "2", "il est riche .", "il est calme .").stdout)
    assert round(tfm.bleu.sentence("il est riche .", "il est calme ."), 3) == cli


def test_errors():
    with pytest.raises(ValueError, match="corpus_bleu: 1 hypotheses but 2 references"):
        tfm.bleu.corpus(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="empty corpus"):
        tfm.bleu.corpus([], [])
    with pytest.raises(ValueError, match="reference 1 is empty"):
        tfm.bleu.corpus(["a"], [""])
    with pytest.raises(ValueError, match="k"):
        tfm.bleu.sentence("a", "a", k=0)
