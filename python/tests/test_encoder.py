"""tfm.Encoder against the PyTorch golden outputs (tests/fixtures/bert, transformer_encoder) and `tfm encode`."""
import os
import threading
import time

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, load_safetensors, run_cli

ATOL = RTOL = 1e-4  # tests/fixtures/README.md: forward activations


def golden(name):
    return load_safetensors(os.path.join(FIXTURES, name, "io.safetensors"))


def real_only(hidden, mask):
    """PyTorch's last_hidden_state with padded positions 0, as forward returns it (the layers run on the real
    tokens only)."""
    return hidden * (np.asarray(mask) != 0)[..., None]


def test_bert_forward_matches_pytorch():
    io = golden("bert")
    enc = tfm.Encoder(os.path.join(FIXTURES, "bert"))
    assert (enc.model_type, enc.hidden_size, enc.dtype) == ("bert", 32, "fp32")
    out = enc.forward(io["input_ids"], attention_mask=io["attention_mask"], token_type_ids=io["token_type_ids"])
    assert out.dtype == np.float32 and out.shape == (3, 6, 32)
    np.testing.assert_allclose(out, real_only(io["last_hidden_state"], io["attention_mask"]), atol=ATOL, rtol=RTOL)
    # Keyword order and defaults: no mask/types = all ones / zeros (row 0 has no padding and types 0,0,0,1,1,1,
    # so only the full call equals the golden there; a row with types all 0 must differ).
    nomask = enc.forward(io["input_ids"][:1], token_type_ids=io["token_type_ids"][:1])
    np.testing.assert_allclose(nomask[0], io["last_hidden_state"][0], atol=ATOL, rtol=RTOL)
    assert not np.allclose(enc.forward(io["input_ids"][:1])[0], io["last_hidden_state"][0], atol=1e-3)


def test_transformer_encoder_forward_matches_pytorch():
    io = golden("transformer_encoder")
    enc = tfm.Encoder(os.path.join(FIXTURES, "transformer_encoder"), threads=1)
    assert enc.model_type == "transformer_encoder" and not enc.has_tokenizer
    np.testing.assert_allclose(enc.forward(io["input_ids"], io["attention_mask"]),
                               real_only(io["last_hidden_state"], io["attention_mask"]), atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(enc.forward(io["input_ids"]), io["last_hidden_state_nomask"], atol=ATOL, rtol=RTOL)


def test_mixed_batch_zero_padding_and_all_positions():
    io = golden("bert")
    enc = tfm.Encoder(os.path.join(FIXTURES, "bert"), threads=1)
    mask = io["attention_mask"]
    assert (mask == 0).any()  # rows of unequal length
    args = (io["input_ids"], mask, io["token_type_ids"])
    fast = enc.forward(*args)
    full = enc.forward(*args, all_positions=True)
    # all_positions: Hugging Face's every-position result, padded positions included (not 0 there).
    np.testing.assert_allclose(full, io["last_hidden_state"], atol=ATOL, rtol=RTOL)
    assert np.all(np.abs(full[mask == 0]).max(axis=-1) > 0)
    # Default: the same real positions, exactly 0 at padded ones.
    np.testing.assert_allclose(fast[mask == 1], full[mask == 1], atol=ATOL, rtol=RTOL)
    assert np.all(fast[mask == 0] == 0)
    d = enc.forward(*args, return_dict=True)
    np.testing.assert_array_equal(d["last_hidden_state"], fast)
    h = enc.forward(*args, output_hidden_states=True)
    np.testing.assert_allclose(h["last_hidden_state"], io["last_hidden_state"], atol=ATOL, rtol=RTOL)
    np.testing.assert_array_equal(h["hidden_states"][-1], h["last_hidden_state"])


def test_inputs_of_other_integer_types_and_layouts():
    io = golden("bert")
    enc = tfm.Encoder(os.path.join(FIXTURES, "bert"))
    ref = real_only(io["last_hidden_state"], io["attention_mask"])
    # int32, Fortran order, a non-contiguous slice, bool mask, nested lists: converted, same result.
    ids32 = np.asfortranarray(io["input_ids"].astype(np.int32))
    out = enc.forward(ids32, io["attention_mask"].astype(bool), io["token_type_ids"].tolist())
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL)
    wide = np.zeros((3, 12), np.int64)
    wide[:, ::2] = io["input_ids"]
    out = enc.forward(wide[:, ::2], io["attention_mask"], io["token_type_ids"])
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=RTOL)


def test_output_owns_its_buffer_without_copies():
    io = golden("bert")
    enc = tfm.Encoder(os.path.join(FIXTURES, "bert"))
    a = enc.forward(io["input_ids"], io["attention_mask"], io["token_type_ids"])
    b = enc.forward(io["input_ids"], io["attention_mask"], io["token_type_ids"])
    assert a.flags.c_contiguous and a.flags.writeable and not a.flags.owndata  # a view of the library's buffer
    assert a.ctypes.data != b.ctypes.data
    a[:] = 0  # writing one result does not touch the other or the model
    np.testing.assert_allclose(b, real_only(io["last_hidden_state"], io["attention_mask"]), atol=ATOL, rtol=RTOL)
    del enc  # the array outlives the encoder
    assert np.isfinite(b).all()


def mean_pool(hidden, mask):
    m = mask[..., None].astype(np.float64)
    return (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)


def test_embed_equals_mean_pooled_cli_output(bert_dir, tmp_path):
    texts = ["the cat sat on the mat", "hello world !", "a dog"]
    enc = tfm.Encoder(bert_dir, threads=1)
    npy = str(tmp_path / "h.npy")
    cmd = ["encode", "--model", bert_dir, "--threads", "1", "--output", npy]
    for t in texts:
        cmd += ["--text", t]
    run_cli(*cmd)
    hidden = np.load(npy)
    batch = enc.tokenizer(texts)
    np.testing.assert_allclose(enc.forward(**batch), hidden, atol=1e-6, rtol=1e-6)
    expected = mean_pool(hidden, batch["attention_mask"])
    emb = enc.embed(texts)
    assert emb.shape == (3, 32) and emb.dtype == np.float32
    np.testing.assert_allclose(emb, expected, atol=1e-5, rtol=1e-5)
    unit = enc.embed(texts, normalize=True)
    np.testing.assert_allclose(unit, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(enc.embed(texts, pooling="cls"), hidden[:, 0], atol=1e-6)
    # A plain folder takes sentence-transformers' other modes too (max over real tokens; modes concatenated).
    m = batch["attention_mask"][:, :, None].astype(bool)
    mx = np.where(m, hidden, -np.inf).max(axis=1)
    np.testing.assert_allclose(enc.embed(texts, pooling="max"), mx, atol=1e-6)
    np.testing.assert_allclose(enc.embed(texts, pooling="cls+max"), np.concatenate([hidden[:, 0], mx], 1), atol=1e-6)
    # Batching does not change a text's vector (padding is masked).
    np.testing.assert_allclose(enc.embed(texts, batch_size=1), emb, atol=1e-5)


def test_concurrent_threads_give_the_single_thread_results():
    """Six threads share one Encoder; every result must equal the single-thread one bit for bit. It failed about
    once in 30 rounds under load: the encoders' oneDNN matmuls used the library-owned scratchpad, which threads
    running the same primitive at once shared (now each call passes its own, src/ops/gemm.cpp). Several rounds
    with fresh encoders (the primitives are created anew) make a regression show up here."""
    io = golden("bert")
    args = (io["input_ids"], io["attention_mask"], io["token_type_ids"])
    for _round in range(8):
        enc = tfm.Encoder(os.path.join(FIXTURES, "bert"), threads=2)
        expected = enc.forward(*args)
        errors, results = [], []
        barrier = threading.Barrier(6)

        def work():
            try:
                barrier.wait()
                for _ in range(40):
                    results.append(enc.forward(*args))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(results) == 240
        for r in results:
            np.testing.assert_array_equal(r, expected)  # same machine, same threads: bit-identical
        np.testing.assert_allclose(expected, real_only(io["last_hidden_state"], io["attention_mask"]), atol=ATOL,
                                   rtol=RTOL)


def test_gil_is_released_during_forward():
    """A Python thread keeps running through most of one long forward() call (with the GIL held it could run only
    in the few milliseconds before the call enters C++)."""
    enc = tfm.Encoder(os.path.join(FIXTURES, "bert"), threads=1)
    rng = np.random.default_rng(0)
    n = 512
    while True:  # an input that takes long enough (>= 0.1 s) for the check to mean something
        ids = rng.integers(1, 60, size=(n, 20))
        t0 = time.perf_counter()
        enc.forward(ids)
        if time.perf_counter() - t0 >= 0.1 or n >= 1 << 16:
            break
        n *= 2
    stamps, stop = [], threading.Event()

    def ticker():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.01)
    t0 = time.perf_counter()
    enc.forward(ids)
    t1 = time.perf_counter()
    stop.set()
    t.join()
    inside = [s for s in stamps if t0 < s < t1]
    assert inside and max(inside) - min(inside) > 0.5 * (t1 - t0), (len(inside), t1 - t0)


def test_errors(bert_dir, tmp_path):
    d = os.path.join(FIXTURES, "bert")
    with pytest.raises(ValueError, match=r"unknown dtype 'fp16' \(expected fp32, bf16 or int8\)"):
        tfm.Encoder(d, dtype="fp16")
    with pytest.raises(ValueError, match="threads must be >= 0"):
        tfm.Encoder(d, threads=-1)
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        tfm.Encoder(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="config.json: no such file"):
        tfm.Encoder(str(tmp_path))
    (tmp_path / "config.json").write_text(open(os.path.join(d, "config.json")).read())
    with pytest.raises(FileNotFoundError, match="model.safetensors: no such file"):
        tfm.Encoder(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises(RuntimeError, match="missing tensor"):
        tfm.Encoder(str(tmp_path))
    enc = tfm.Encoder(d)
    with pytest.raises(ValueError, match=r"input_ids\[0, 1\] = 60 is outside the vocabulary \[0, 60\)"):
        enc.forward(np.array([[1, 60]]))
    with pytest.raises(ValueError, match="integer array, got dtype float64"):
        enc.forward(np.ones((1, 3)))
    with pytest.raises(ValueError, match="2-d"):
        enc.forward(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"attention_mask has shape \[1, 2\] but input_ids has \[1, 3\]"):
        enc.forward(np.array([[1, 2, 3]]), np.array([[1, 1]]))
    with pytest.raises(ValueError, match="expected 0 or 1"):
        enc.forward(np.array([[1, 2, 3]]), np.array([[1, 2, 1]]))
    with pytest.raises(ValueError, match="longer than max_position_embeddings"):
        enc.forward(np.ones((1, 21), np.int64))
    with pytest.raises(ValueError, match=r"batch, length >= 1"):
        enc.forward(np.ones((0, 3), np.int64))
    # uint64 ids above the int64 maximum are refused with their own value (not wrapped to negative ones)
    with pytest.raises(ValueError, match=r"input_ids\[0, 1\] = 9223372036854775808 is larger than the int64 maximum"):
        enc.forward(np.array([[1, 2**63]], dtype=np.uint64))
    with pytest.raises(ValueError, match=r"token_type_ids\[0, 0\] = 18446744073709551615 is larger"):
        enc.forward(np.array([[1, 2]]), token_type_ids=np.array([[2**64 - 1, 0]], dtype=np.uint64))
    # Both after the first forward: that one multiplies by the weights where they lie, later ones by the packed
    # copy (PackedLinear::lazy), which may round differently (3.6e-7 on an AVX-512 CPU).
    enc.forward(np.array([[1, 2]]))
    np.testing.assert_array_equal(enc.forward(np.array([[1, 2]], dtype=np.uint64)), enc.forward(np.array([[1, 2]])))
    with pytest.raises(RuntimeError, match="no tokenizer"):
        enc.embed(["hello"])
    good = tfm.Encoder(bert_dir)
    with pytest.raises(ValueError, match="unknown pooling mode 'median'"):
        good.embed(["hello"], pooling="median")
    with pytest.raises(ValueError, match="more than max_position_embeddings"):
        good.embed(["the cat " * 20])
    assert good.embed(["the cat " * 20], max_length=20).shape == (1, 32)
    with pytest.raises(ValueError, match="invalid UTF-8 at byte offset 1"):
        good.embed([b"a\xff"])
    with pytest.raises(ValueError):
        good.embed(["\udcff"])  # a lone surrogate cannot become UTF-8
    # "" is embedded (its special tokens alone), as SentenceTransformer.encode does; the docstring says so
    empty = good.embed([""])
    assert empty.shape == (1, 32) and np.isfinite(empty).all()
    assert "empty text '' is embedded" in tfm.Encoder.embed.__doc__


def test_mpnet_folder_loads_and_matches_pytorch():
    # all-mpnet-base-v2's layout (scripts/make_mpnet_fixtures.py): config MPNetForMaskedLM, base-model weights,
    # sentence-transformers modules; forward = modeling_mpnet.py's last_hidden_state, embed = mean + Normalize.
    folder = os.path.join(FIXTURES, "mpnet")
    io = load_safetensors(os.path.join(folder, "expected.safetensors"))
    enc = tfm.Encoder(folder, threads=1)
    assert (enc.model_type, enc.hidden_size) == ("mpnet", 32)
    out = enc.forward(io["input_ids"], attention_mask=io["attention_mask"])
    np.testing.assert_allclose(out, real_only(io["last_hidden_state"], io["attention_mask"]), atol=ATOL, rtol=RTOL)
    sentences = open(os.path.join(folder, "sentences.txt"), encoding="utf-8").read().split("\n")[:-1]
    assert enc.is_sentence_transformer
    np.testing.assert_allclose(enc.embed(sentences), io["embeddings"], atol=1e-5)
