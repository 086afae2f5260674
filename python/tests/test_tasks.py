"""tfm.Classifier (top_k, (text, text_pair) items, zero_shot) and tfm.TokenClassifier (aggregation_strategy,
ignore_labels) against the PyTorch references of the Hugging Face pipelines in tests/fixtures/tasks/expected.json
(scripts/make_task_fixtures.py)."""
import json
import os

import pytest

import tfm
from conftest import FIXTURES

EXPECTED = json.load(open(os.path.join(FIXTURES, "tasks", "expected.json"), encoding="utf-8"))


def near(got, want, tol, where=""):
    if isinstance(want, float):
        assert abs(got - want) <= tol, (where, got, want)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            near(g, w, tol, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (where, got, want)
        for k in want:
            near(got[k], want[k], tol, f"{where}.{k}")
    else:
        assert got == want, (where, got, want)


def test_classify_top_k_and_pairs():
    c = tfm.Classifier(os.path.join(FIXTURES, "heads_seqcls"), threads=1)
    rows = EXPECTED["classify"]["pairs"]
    tuples = [(r["text"], r["text_pair"]) for r in rows]
    near(c.classify(tuples), [r["default"] for r in rows], 1e-4)
    near(c.classify([{"text": a, "text_pair": b} for a, b in tuples], top_k=2), [r["top_k_2"] for r in rows], 1e-4)
    near(c.classify(tuples, top_k="all", function="sigmoid"), [r["sigmoid_all"] for r in rows], 1e-4)
    singles = EXPECTED["classify"]["texts"]
    near(c.classify([r["text"] for r in singles], top_k=1), [r["top_k_1"] for r in singles], 1e-4)
    with pytest.raises(ValueError, match="top_k"):
        c.classify(["a"], top_k=0)
    with pytest.raises(ValueError, match="text_pair"):
        c.classify([("a", "b", "c")])


@pytest.mark.parametrize("folder", ["nli_contradiction_first", "nli_entailment_first"])
def test_zero_shot_both_label_orders(folder):
    z = EXPECTED["zero_shot"]
    c = tfm.Classifier(os.path.join(FIXTURES, "tasks", folder), threads=1)
    for want in z["results"][folder]:
        labels = [z["single_label"]] if want.get("single") else z["labels"]
        got = c.zero_shot(want["result"]["sequence"], labels, hypothesis_template=want["template"],
                          multi_label=want["multi_label"])
        near(got, want["result"], 1e-5, want["template"])
    got = c.zero_shot(z["sequences"], z["candidate_labels"])  # a list, labels as one comma-separated str
    assert [g["sequence"] for g in got] == z["sequences"]
    with pytest.raises(ValueError, match="has no {}"):
        c.zero_shot("x", ["a"], hypothesis_template="nothing")


def test_token_classification_aggregation():
    n = EXPECTED["ner"]
    t = tfm.TokenClassifier(os.path.join(FIXTURES, "heads_tokcls"), threads=1)
    for strategy in ("none", "simple", "first", "average", "max"):
        near(t.tag(n["texts"], aggregation_strategy=strategy), n["results"][strategy], 1e-4, strategy)
    near(t.tag(n["texts"], aggregation_strategy="simple", ignore_labels=["O", "PER"]),
         n["ignore_labels"]["o_per"]["simple"], 1e-4)
    with pytest.raises(ValueError, match="aggregation strategy 'mean'"):
        t.tag(["x"], aggregation_strategy="mean")
