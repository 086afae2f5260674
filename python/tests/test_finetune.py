"""tfm.finetune against `tfm finetune` (the same folder bit for bit), its progress callback and errors."""
import json

import pytest

import tfm
from conftest import FIXTURES as FIX, run_cli

TRAIN = "text,label\n" + "".join(
    f"{s} is {w},{lab}\n" for s in ["the cat", "the dog", "the man", "people", "london", "the car"]
    for w, lab in [("good", "pos"), ("bad", "neg")])


def test_finetune_equals_cli_and_reports_progress(tmp_path):
    (tmp_path / "train.csv").write_text(TRAIN)
    model = f"{FIX}/heads_seqcls"
    events = []
    s = tfm.finetune(model, str(tmp_path / "train.csv"), str(tmp_path / "api"), epochs=2, batch_size=4, lr=1e-3,
                     seed=7, threads=1, progress=events.append)
    assert s.labels == ["neg", "pos"] and s.steps == 6 and s.best_epoch == 2
    assert "FinetuneSummary(steps=6" in repr(s)
    assert [e.step for e in events if not e.epoch_end] == [1, 2, 3, 4, 5, 6]
    assert [e.epoch for e in events if e.epoch_end] == [1, 2]
    run_cli("finetune", "--model", model, "--train", str(tmp_path / "train.csv"), "--out", str(tmp_path / "cli"),
            "--epochs", "2", "--batch-size", "4", "--lr", "1e-3", "--seed", "7", "--threads", "1", "--no-progress")
    for f in ["model.safetensors", "config.json", "train_log.csv"]:
        assert (tmp_path / "api" / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f
    cfg = json.loads((tmp_path / "api" / "config.json").read_text())
    assert cfg["architectures"] == ["BertForSequenceClassification"]
    assert cfg["id2label"] == {"0": "neg", "1": "pos"} and cfg["label2id"] == {"neg": 0, "pos": 1}
    clf = tfm.Classifier(str(tmp_path / "api"))
    assert clf.labels == ["neg", "pos"]


def test_finetune_errors_are_value_errors(tmp_path):
    (tmp_path / "train.csv").write_text(TRAIN)
    model = f"{FIX}/heads_seqcls"
    with pytest.raises(ValueError, match="has no training state"):
        tfm.finetune(model, str(tmp_path / "train.csv"), str(tmp_path / "o"), task="embed", resume=True)
    with pytest.raises(ValueError, match=r"^group_texts=True concatenates .*; it is for task='mlm' only$"):
        tfm.finetune(model, str(tmp_path / "train.csv"), str(tmp_path / "o"), group_texts=True)
    with pytest.raises(ValueError, match="label 'pos' is not in the label set"):
        tfm.finetune(model, str(tmp_path / "train.csv"), str(tmp_path / "o"), labels=["neg", "x"])
    with pytest.raises(FileNotFoundError):
        tfm.finetune(model, str(tmp_path / "missing.csv"), str(tmp_path / "o"))
    with pytest.raises(TypeError):
        tfm.finetune(model, str(tmp_path / "train.csv"), str(tmp_path / "o"), progress=3)
    assert not (tmp_path / "o").exists()
    # the messages name tfm.finetune's arguments, not `tfm finetune`'s flags
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValueError) as e:
        tfm.finetune(model, str(tmp_path / "train.csv"), str(tmp_path / "full"))
    assert str(e.value) == (f"out_dir '{tmp_path / 'full'}' already exists and is not an empty folder; choose a new "
                            "folder, pass overwrite=True to replace it, or resume=True to continue a stopped run")
    with pytest.raises(ValueError, match=r"^resume=True: .* has no training state"):
        tfm.finetune(model, str(tmp_path / "train.csv"), str(tmp_path / "full"), resume=True)
    with pytest.raises(ValueError, match=r"^problem_type is for task='classify', not 'mlm'$"):
        tfm.finetune(model, str(tmp_path / "train.csv"), str(tmp_path / "o"), task="mlm", problem_type="regression")


def test_finetune_token_classify_and_mlm(tmp_path):
    ner = "".join(f'{{"tokens": ["the", "{p}", "is", "in", "{l}"], "tags": ["O", "B-PER", "O", "O", "B-LOC"]}}\n'
                  for p in ["man", "friends"] for l in ["paris", "london", "france"])
    (tmp_path / "ner.jsonl").write_text(ner)
    events = []
    s = tfm.finetune(f"{FIX}/heads_tokcls", str(tmp_path / "ner.jsonl"), str(tmp_path / "ner"),
                     task="token-classify", eval=str(tmp_path / "ner.jsonl"), epochs=2, batch_size=2,
                     gradient_accumulation_steps=2, lr=1e-3, threads=1, progress=events.append)
    assert s.steps == 4 and s.labels == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert list(s.best_eval_metrics) == ["eval_loss", "eval_accuracy", "eval_precision", "eval_recall", "eval_f1"]
    assert [list(e.eval_metrics) for e in events if e.epoch_end][0][-1] == "eval_f1"
    assert tfm.TokenClassifier(str(tmp_path / "ner")).labels == s.labels
    (tmp_path / "text.csv").write_text("text\n" + "the cat sat on the mat\n" * 4)
    m = tfm.finetune(f"{FIX}/heads_mlm", str(tmp_path / "text.csv"), str(tmp_path / "mlm"), task="mlm",
                     eval=str(tmp_path / "text.csv"), epochs=1, batch_size=2, threads=1)
    assert set(m.best_eval_metrics) == {"eval_loss", "eval_perplexity"}
    assert tfm.MaskFiller(str(tmp_path / "mlm")).fill(["the cat sat on the [MASK]"])
def test_finetune_embed_writes_a_folder_tfm_embeds_with(tmp_path):
    # task="embed": a sentence-transformers folder in, MultipleNegativesRankingLoss, a sentence-transformers folder
    # out; the eval anchors equal their positives, so each retrieves its own (accuracy@1 and MRR 1).
    pairs = [("the cat sat on the mat.", "a cat is on the mat"), ("paris is the capital of france.", "paris"),
             ("two men are playing football", "men playing football"), ("what time is it?", "the time")]
    (tmp_path / "train.csv").write_text("anchor,positive\n" + "".join(f"{a},{p}\n" for a, p in pairs))
    (tmp_path / "eval.csv").write_text("anchor,positive\n" + "".join(f"{a},{a}\n" for a, _ in pairs))
    events = []
    s = tfm.finetune(f"{FIX}/st_mean", str(tmp_path / "train.csv"), str(tmp_path / "st"), task="embed",
                     eval=str(tmp_path / "eval.csv"), epochs=2, batch_size=2, lr=1e-3, threads=1,
                     progress=events.append)
    assert s.loss == "MultipleNegativesRankingLoss" and s.steps == 4 and s.labels == []
    assert s.best_eval_accuracy == 1.0 and s.best_eval_mrr == 1.0
    assert [e.eval_mrr for e in events if e.epoch_end] == [1.0, 1.0]
    for f in ["modules.json", "1_Pooling/config.json", "model.safetensors", "vocab.txt", "train_log.csv"]:
        assert (tmp_path / "st" / f).exists(), f
    out = run_cli("embed", "--model", str(tmp_path / "st"), "--input", str(tmp_path / "eval.csv"), "--quiet")
    assert len(out.stdout.strip().splitlines()) == 5  # the header line is embedded too


def test_finetune_regression(tmp_path):
    """problem_type='regression' (or a float label column): one output trained with MSELoss, the folder saved with
    problem_type regression and id2label {0: LABEL_0}; the Classifier gives the raw score (no sigmoid)."""
    rows = "".join(f"{s} is {w},{v}\n" for s in ["the cat", "the dog", "the man", "people", "london", "the car"]
                   for w, v in [("good", 4), ("bad", 1)])
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    s = tfm.finetune(f"{FIX}/heads_seqcls", str(tmp_path / "train.csv"), str(tmp_path / "reg"), epochs=10,
                     batch_size=4, lr=1e-2, seed=3, threads=1, eval=str(tmp_path / "train.csv"),
                     problem_type="regression")
    assert s.loss == "MSELoss" and s.labels == ["LABEL_0"]
    assert list(s.best_eval_metrics) == ["eval_loss", "eval_pearson", "eval_spearmanr"]
    assert s.best_eval_spearman == s.best_eval_metrics["eval_spearmanr"]
    cfg = json.loads((tmp_path / "reg" / "config.json").read_text())
    assert cfg["problem_type"] == "regression" and cfg["id2label"] == {"0": "LABEL_0"}
    clf = tfm.Classifier(str(tmp_path / "reg"))
    texts = ["the cat is good", "the cat is bad"]
    good, bad = (row["score"] for row in clf.classify(texts))
    assert good > 1.5 and good > bad  # a score on the labels' scale, not a probability
    raw = [row["score"] for row in clf.classify(texts, function="none")]
    assert [good, bad] == raw  # the pipeline applies no function for problem_type regression
    (tmp_path / "bad.csv").write_text("text,label\nthe cat is good,4\nthe cat is bad,low\n")
    with pytest.raises(ValueError, match="label 'low' in column 'label' is not a number"):
        tfm.finetune(f"{FIX}/heads_seqcls", str(tmp_path / "bad.csv"), str(tmp_path / "o"), problem_type="regression")
