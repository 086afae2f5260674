"""A missing model folder (or file) is FileNotFoundError from every entry point, as open() reports a missing path,
with the library's one-line message naming the path."""
import os

import pytest

import tfm
from conftest import FIXTURES

MISSING = "/nonexistent/tfm-model-folder"


@pytest.mark.parametrize("make", [
    lambda: tfm.Tokenizer(MISSING),
    lambda: tfm.Encoder(MISSING),
    lambda: tfm.Classifier(MISSING),
    lambda: tfm.TokenClassifier(MISSING),
    lambda: tfm.MaskFiller(MISSING),
    lambda: tfm.Translator(MISSING),
], ids=["Tokenizer", "Encoder", "Classifier", "TokenClassifier", "MaskFiller", "Translator"])
def test_constructors(make):
    with pytest.raises(FileNotFoundError, match="tfm-model-folder"):
        make()


def test_functions(tmp_path):
    with pytest.raises(FileNotFoundError, match="tfm-model-folder"):
        tfm.convert(MISSING, str(tmp_path / "out"), "bf16")
    train = tmp_path / "train.csv"
    train.write_text("text,label\na,x\nb,y\n")
    with pytest.raises(FileNotFoundError, match="tfm-model-folder"):
        tfm.finetune(MISSING, str(train), str(tmp_path / "ft"))
    with pytest.raises(FileNotFoundError, match="no-train.csv"):
        tfm.finetune(os.path.join(FIXTURES, "heads_seqcls"), str(tmp_path / "no-train.csv"), str(tmp_path / "ft2"))
    with pytest.raises(FileNotFoundError, match="no-config.json"):
        tfm.train(str(tmp_path / "no-config.json"), str(tmp_path / "run"))
    with pytest.raises(FileNotFoundError, match="no-corpus.txt"):
        tfm.train_d2l(str(tmp_path / "no-corpus.txt"), str(tmp_path / "d2l"))


def test_summary_objects_have_reprs(tmp_path):
    s = tfm.convert(os.path.join(FIXTURES, "bert"), str(tmp_path / "bf16"), "bf16")
    assert repr(s).startswith("ConvertSummary(converted=") and "unchanged=0" in repr(s), repr(s)
    train = tmp_path / "train.csv"
    train.write_text("text,label\nthe cat is good,pos\nthe dog is bad,neg\n")
    seen = []
    f = tfm.finetune(os.path.join(FIXTURES, "heads_seqcls"), str(train), str(tmp_path / "ft"), epochs=1,
                     batch_size=2, threads=1, progress=lambda p: seen.append(repr(p)))
    assert seen and seen[-1].startswith("FinetuneProgress(epoch=1/1, step=1/1"), seen
    assert repr(f).startswith("FinetuneSummary(steps=1"), repr(f)
    for cls in (tfm.TrainProgress, tfm.D2lTrainSummary, tfm.TrainSummary, tfm.bleu.CorpusScore):
        assert cls.__repr__ is not object.__repr__, cls
