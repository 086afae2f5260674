"""The Python module's interface checks: the same option checks as the CLI, messages in the module's
own words, and values that can be read. Expected values come from the CLI, the fixtures and the documented errors."""
import json
import os

import pytest

import tfm
from conftest import DATA, FIXTURES, run_cli

D2L = os.path.join(FIXTURES, "d2l_trained")
TINY = dict(data_dir=DATA, train_limit=100, valid_limit=8, vocab_size=300, num_hiddens=16, num_layers=1,
            num_heads=2, ffn_num_hiddens=32, max_len=40, num_steps=10, max_tokens=600, epochs=1, warmup_steps=5)


@pytest.fixture(scope="module")
def tr():
    return tfm.Translator(D2L, threads=1)


def test_length_penalty_without_beam_is_refused_as_by_the_cli(tr):
    # `tfm translate --length-penalty 0.6` without --beam is refused; so is the same call here.
    assert run_cli("translate", "--model", D2L, "--length-penalty", "0.6", "go .", check=False).returncode != 0
    with pytest.raises(ValueError, match="length_penalty applies to beam search"):
        tr.translate_batch(["go ."], length_penalty=0.6)
    assert tr.translate_batch(["go ."], beam_size=2, length_penalty=0.6) == ["va !"]


def test_disable_unk_never_generates_unk_and_equals_the_cli(tr):
    sentences = ["go .", "who are you ?", "help !", "jump .", "i'm 19 ."]
    plain = tr.translate_batch(sentences)
    assert any("<unk>" in t for t in plain)
    for beam in (1, 4):
        got = tr.translate_batch(sentences, beam_size=beam, disable_unk=True)
        assert not any("<unk>" in t for t in got), got
        cli = run_cli("translate", "--quiet", "--model", D2L, "--threads", "1", "--beam", str(beam), "--suppress-unk",
                      *sentences).stdout.split("\n")[:-1]
        assert got == cli
    # Greedy: a translation that had no <unk> never chose it, so it is unchanged.
    for p, s in zip(plain, tr.translate_batch(sentences, disable_unk=True)):
        if "<unk>" not in p:
            assert p == s


def test_lone_surrogate_names_the_text(bert_dir):
    enc = tfm.Encoder(bert_dir)
    with pytest.raises(ValueError, match=r"texts\[1\] cannot be encoded as UTF-8"):
        enc.embed(["the cat", "bad \ud800 text"])
    with pytest.raises(ValueError, match="item 1 is a int"):
        enc.embed(["the cat", 3])


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    if not os.path.isdir(os.path.join(DATA, "multi30k")):
        pytest.skip(f"{DATA}/multi30k not found (set TFM_DATA_DIR)")
    p = tmp_path_factory.mktemp("cfg") / "tiny.json"
    p.write_text(json.dumps(TINY))
    return str(p)


def test_train_messages_speak_python(config, tmp_path):
    # An unknown override key is the override's fault, not the config file's.
    with pytest.raises(ValueError, match="override 'no_such_key': unknown recipe key") as e:
        tfm.train(config, str(tmp_path / "a"), overrides={"no_such_key": 1})
    assert config not in str(e.value)
    # A bad override value is a ValueError (the documented type for bad arguments); a bad file stays RuntimeError.
    with pytest.raises(ValueError, match="'lr' must be positive"):
        tfm.train(config, str(tmp_path / "b"), overrides={"lr": -1})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**TINY, "lr": -1}))
    with pytest.raises(RuntimeError, match="'lr' must be positive"):
        tfm.train(str(bad), str(tmp_path / "c"))
    # A folder that holds a run: resume=True, not "--resume".
    out = str(tmp_path / "run")
    summary = tfm.train(config, out, threads=1, overrides={"stop_after_steps": 2})
    with pytest.raises(RuntimeError, match=r"resume=True") as e:
        tfm.train(config, out, threads=1)
    assert "--out" not in str(e.value)  # the folder is named in every interface's words
    # TrainSummary reads as its values.
    r = repr(summary)
    assert r.startswith("TrainSummary(") and "steps=2" in r and "stopped_early=True" in r, r


def test_int8_folder_reports_and_honours_its_dtype(tmp_path):
    # A `tfm convert --dtype int8` folder: by default it computes in int8 (and says so); dtype="fp32" dequantises
    # it, so the output differs from int8's and Encoder.dtype is "fp32".
    import numpy as np
    bert = os.path.join(FIXTURES, "bert")
    out = str(tmp_path / "int8")
    run_cli("convert", "--model", bert, "--dtype", "int8", "--out", out)
    ids = np.array([[2, 15, 16, 3]], dtype=np.int64)
    mask = np.ones_like(ids)
    default, int8, fp32 = tfm.Encoder(out), tfm.Encoder(out, dtype="int8"), tfm.Encoder(out, dtype="fp32")
    assert (default.dtype, int8.dtype, fp32.dtype) == ("int8", "int8", "fp32")
    assert tfm.Encoder(bert).dtype == "fp32"
    a, b, c = (e.forward(ids, mask) for e in (default, int8, fp32))
    assert np.array_equal(a, b)
    # Without native int8 products (no VNNI) the int8 weights multiply in fp32: the dequantised fp32 run's result.
    assert np.array_equal(b, c) != tfm.native_dtype("int8")
    assert tfm.native_dtype("fp32") and tfm.native_dtype("float32")
    with pytest.raises(ValueError, match="int4"):
        tfm.native_dtype("int4")
