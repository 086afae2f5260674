"""Shared paths and helpers of the tfm pytest suite (run by ctest as `python_tests`, or by hand:
PYTHONPATH=build/python /usr/bin/python3 -m pytest python/tests)."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
DATA = os.environ.get("TFM_DATA_DIR") or os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))
TFM_BINARY = os.environ.get("TFM_BINARY") or os.path.join(ROOT, "build", "tfm")
BERT_BASE = os.path.join(DATA, "bert-base-uncased")

# A 60-token WordPiece vocabulary for the golden BERT model of tests/fixtures/bert (vocab_size 60), which ships
# without a tokenizer.
SMALL_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "dog", "sat", "on", "mat", "hello",
               "world", "time", "flies", "like", "an", "arrow", "i", "have", "dream", "is", "was", "good", "bad",
               "day", "night", "red", "blue", "big", "small", "run", "##s", "##ing", "##ed", ".", ",", "!", "?",
               "and", "or", "not", "this", "that", "it", "he", "she", "we", "they", "you", "my", "your", "house",
               "tree", "car", "book", "read", "write", "sun"]
assert len(SMALL_VOCAB) == 60


def load_safetensors(path):
    """Tensors of a safetensors file (F32 / I64) as numpy arrays, read with the format's spec, not our code."""
    dtypes = {"F32": np.float32, "I64": np.int64}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        out[name] = np.frombuffer(data[s:e], dtype=dtypes[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def run_cli(*args, check=True):
    """Runs the tfm command line tool; returns CompletedProcess (text)."""
    r = subprocess.run([TFM_BINARY, *args], capture_output=True, text=True, env={**os.environ, "TFM_DATA_DIR": DATA})
    if check and r.returncode != 0:
        raise AssertionError(f"tfm {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory):
    """tests/fixtures/bert (golden PyTorch BertModel) plus SMALL_VOCAB as vocab.txt."""
    d = tmp_path_factory.mktemp("bert")
    for f in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(FIXTURES, "bert", f), d / f)
    (d / "vocab.txt").write_text("\n".join(SMALL_VOCAB) + "\n")
    return str(d)


@pytest.fixture(scope="session")
def needs_data():
    if not os.path.isdir(BERT_BASE):
        pytest.skip(f"data folder {DATA} not found (set TFM_DATA_DIR)")
