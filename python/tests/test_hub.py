"""Hugging Face model ids in the Python API: a cache tree written as huggingface_hub lays it out
(models--org--name/refs, snapshots/<commit>/ symlinks into blobs/<etag>) is found by tfm.Encoder, tfm.Classifier and
tfm.Tokenizer given the id, with HF_HUB_OFFLINE=1 so nothing is fetched."""
import hashlib
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write_hf_tree(cache, repo_id, src, commit=COMMIT):
    """The layout huggingface_hub documents (guides/manage-cache), from the files of fixture folder `src`."""
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)
    for root, _, files in os.walk(src):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), src)
            data = open(os.path.join(root, name), "rb").read()
            lfs = name.endswith(".safetensors")
            etag = hashlib.sha256(data).hexdigest() if lfs else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            with open(os.path.join(repo, "blobs", etag), "wb") as f:
                f.write(data)
            link = os.path.join(repo, "snapshots", commit, rel)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(os.path.relpath(os.path.join(repo, "blobs", etag), os.path.dirname(link)), link)
    return os.path.join(repo, "snapshots", commit)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = str(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_encoder_classifier_tokenizer_take_model_ids(hub_cache):
    write_hf_tree(hub_cache, "org/st-mean", os.path.join(FIXTURES, "st_mean"))
    write_hf_tree(hub_cache, "org/seqcls", os.path.join(FIXTURES, "heads_seqcls"))
    sentences = open(os.path.join(FIXTURES, "st_mean", "sentences.txt")).read().split("\n")[:-1]
    e = load_safetensors(os.path.join(FIXTURES, "st_mean", "expected.safetensors"))
    enc = tfm.Encoder("org/st-mean", threads=1)
    np.testing.assert_allclose(enc.embed(sentences), e["embeddings"], atol=1e-5)  # sentence-transformers' values
    c = load_safetensors(os.path.join(FIXTURES, "heads_seqcls", "expected.safetensors"))
    cls = tfm.Classifier("org/seqcls", threads=1)
    np.testing.assert_allclose(cls.logits(sentences), c["logits"], atol=1e-4)  # PyTorch's values
    assert tfm.Tokenizer("org/st-mean").encode("hello world")["input_ids"] == \
        tfm.Tokenizer(os.path.join(FIXTURES, "st_mean")).encode("hello world")["input_ids"]


def test_missing_id_offline_names_the_cache(hub_cache):
    with pytest.raises(FileNotFoundError, match=r"org/absent: no such model folder, and the Hugging Face cache .*"
                                                r"models--org--absent has no snapshot for revision 'main'"):
        tfm.Encoder("org/absent")
    # A path that does not exist and is not an id keeps the folder message.
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        tfm.Encoder(os.path.join(hub_cache, "nope"))


def test_download_offline_is_refused_with_the_id(hub_cache):
    with pytest.raises(RuntimeError, match="'org/x': cannot download while HF_HUB_OFFLINE is set"):
        tfm.download("org/x")
    with pytest.raises(ValueError, match="not a Hugging Face model id"):
        tfm.download("just-a-name")
