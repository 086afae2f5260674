"""tfm.Classifier against the PyTorch BertForSequenceClassification outputs of tests/fixtures/heads_seqcls
(scripts/make_heads_fixtures.py) and `tfm classify`."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors, run_cli

SEQCLS = os.path.join(FIXTURES, "heads_seqcls")
SENTENCES = open(os.path.join(FIXTURES, "st_mean", "sentences.txt")).read().split("\n")[:-1]
LABELS = ["negative", "neutral", "positive"]


def test_classify_matches_pytorch_and_cli():
    e = load_safetensors(os.path.join(SEQCLS, "expected.safetensors"))
    c = tfm.Classifier(SEQCLS, threads=1)
    assert c.labels == LABELS and c.num_labels == 3
    np.testing.assert_allclose(c.logits(SENTENCES, batch_size=3), e["logits"], atol=1e-4)
    got = c.classify(SENTENCES)
    for row, want in zip(got, e["scores"]):
        k = int(np.argmax(want))
        assert row["label"] == LABELS[k] and abs(row["score"] - want[k]) < 1e-4
    cli = [json.loads(l) for l in run_cli("classify", "--model", SEQCLS, *SENTENCES).stdout.splitlines()]
    assert [r["label"] for r in got] == [r["label"] for r in cli]
    np.testing.assert_allclose([r["score"] for r in got], [r["score"] for r in cli], atol=1e-6)
    all3 = c.classify(["hello"], all_scores=True)[0]
    assert [d["score"] for d in all3] == sorted((d["score"] for d in all3), reverse=True)
    np.testing.assert_allclose([d["score"] for d in all3], [e["scores"][3][LABELS.index(d["label"])] for d in all3],
                               atol=1e-4)
    raw = c.classify(["hello"], function="none", all_scores=True)[0]
    np.testing.assert_allclose(sorted(d["score"] for d in raw), sorted(e["logits"][3]), atol=1e-4)


def test_classifier_errors(tmp_path):
    with pytest.raises(RuntimeError, match="no sequence classification head"):
        tfm.Classifier(os.path.join(FIXTURES, "heads_mlm"))
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        tfm.Classifier(str(tmp_path / "nope"))
    c = tfm.Classifier(SEQCLS)
    with pytest.raises(ValueError, match="function 'tanh' is not supported"):
        c.classify(["hello"], function="tanh")
    with pytest.raises(ValueError, match="texts is empty"):
        c.classify([])
    with pytest.raises(ValueError, match="text 1 is empty"):
        c.classify(["a", " "])


def test_mpnet_classifier_matches_pytorch():
    # MPNetForSequenceClassification (scripts/make_mpnet_fixtures.py): classifier.dense + tanh + out_proj on <s>.
    folder = os.path.join(FIXTURES, "mpnet_seqcls")
    e = load_safetensors(os.path.join(folder, "expected.safetensors"))
    texts = open(os.path.join(FIXTURES, "mpnet", "sentences.txt"), encoding="utf-8").read().split("\n")[:-1]
    c = tfm.Classifier(folder, threads=1)
    np.testing.assert_allclose(c.logits(texts, batch_size=3), e["logits"], atol=1e-4)
