"""tfm.inspect_model: a folder's family, kind and task from the library's family registry, and the one refusal of a
folder of an unsupported kind (the same message as tfm.Encoder / tfm.Translator give)."""
import json
import os
import shutil

import pytest

import tfm
from conftest import FIXTURES


def test_inspect_model_names_family_and_task():
    info = tfm.inspect_model(os.path.join(FIXTURES, "family_heads", "xlmr_cross"))
    assert (info.model_type, info.family, info.translation) == ("xlm-roberta", "roberta", False)
    assert info.architectures == ["XLMRobertaForSequenceClassification"]
    assert info.task == "sequence-classification"
    info = tfm.inspect_model(os.path.join(FIXTURES, "marian"))
    assert (info.model_type, info.family, info.translation, info.task) == ("marian", "marian", True, "translation")


def test_unsupported_folder_is_refused_with_one_message(tmp_path):
    src = os.path.join(FIXTURES, "family_heads", "bert_seqcls")
    d = tmp_path / "gpt2"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    want = f"{d}/config.json: model_type 'gpt2' is not a model this tool runs (supported: "
    for load in (tfm.inspect_model, tfm.Encoder, tfm.Classifier, tfm.Translator):
        with pytest.raises(RuntimeError) as e:
            load(str(d))
        assert str(e.value).startswith(want), (load, str(e.value))
