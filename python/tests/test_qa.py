"""tfm.QuestionAnswerer against the PyTorch / numpy reference of transformers' question-answering pipeline in
tests/fixtures/qa/expected.json (scripts/make_qa_fixtures.py): BERT, RoBERTa and DistilBERT question-answering
folders, contexts longer than one window, the null answer, accents and emoji."""
import json
import os

import pytest

import tfm
from conftest import FIXTURES

QA = os.path.join(FIXTURES, "qa")
EXPECTED = json.load(open(os.path.join(QA, "expected.json"), encoding="utf-8"))
CASES = json.load(open(os.path.join(QA, "encodings.json"), encoding="utf-8"))["cases"]
KWARGS = {"top_k": "top_k", "doc_stride": "doc_stride", "max_seq_length": "max_seq_len",
          "max_answer_length": "max_answer_len", "handle_impossible_answer": "handle_impossible_answer"}


def same(got, want, where):
    assert isinstance(got, list) == isinstance(want, list), (where, got, want)
    if isinstance(want, list):
        assert len(got) == len(want), (where, got, want)
        for g, w in zip(got, want):
            same(g, w, where)
        return
    assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"]), (where, got, want)
    assert abs(got["score"] - want["score"]) <= 1e-5 + 1e-3 * abs(want["score"]), (where, got, want)


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_question_answering_matches_the_pipeline(family):
    qa = tfm.QuestionAnswerer(os.path.join(QA, family), threads=1)
    for case, row in zip(CASES, EXPECTED["results"][family]):
        kw = {KWARGS[k]: v for k, v in case["options"].items()}
        same(qa(case["question"], case["context"], **kw), row["result"], f"{family} {case['name']}")


def test_question_answering_bad_input():
    qa = tfm.QuestionAnswerer(os.path.join(QA, "bert"), threads=1)
    with pytest.raises(ValueError, match="question cannot be empty"):
        qa("", "some context")
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        qa("q", "c", top_k=0)
