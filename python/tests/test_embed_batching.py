"""Encoder.embed batches texts as `tfm embed` does (the library's length buckets under batch_tokens and
batch_size, the same defaults), so the same texts with the same limits give the CLI's numbers bit for bit."""
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, run_cli

ST_MEAN = os.path.join(FIXTURES, "st_mean")


def _texts():
    with open(os.path.join(ST_MEAN, "sentences.txt"), encoding="utf-8") as f:
        base = [line.rstrip("\n") for line in f]
    return base + [s + " " + s for s in reversed(base)]


def test_defaults_are_the_cli_defaults():
    enc = tfm.Encoder(ST_MEAN, threads=1)
    texts = _texts()
    assert np.array_equal(enc.embed(texts), enc.embed(texts, batch_size=128, batch_tokens=16384))


@pytest.mark.parametrize("batch_tokens,batch_size", [(40, 128), (16384, 3), (16384, 128)])
def test_embed_equals_the_cli_bit_for_bit(tmp_path, batch_tokens, batch_size):
    texts = _texts()
    src = tmp_path / "in.txt"
    src.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.npy"
    run_cli("embed", "--model", ST_MEAN, "--input", str(src), "-o", str(out), "--batch-tokens", str(batch_tokens),
            "--batch-size", str(batch_size), "--threads", "1", "-q")
    cli = np.load(out)
    enc = tfm.Encoder(ST_MEAN, threads=1)
    got = enc.embed(texts, batch_tokens=batch_tokens, batch_size=batch_size)
    assert got.shape == cli.shape
    assert np.array_equal(got, cli)


def test_bad_batch_limits_and_dimensions():
    enc = tfm.Encoder(ST_MEAN, threads=1)
    with pytest.raises(ValueError, match="batch_tokens must be >= 1"):
        enc.embed(["a"], batch_tokens=0)
    with pytest.raises(ValueError, match="dimensions must be >= 1 and at most the embedding size 32, got 0"):
        enc.embed(["a"], dimensions=0)
