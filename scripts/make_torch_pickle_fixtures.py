#!/usr/bin/python3
"""Writes tests/fixtures/torch_pickle/ for tests/test_torch_pickle.cpp and the fuzz_torch_pickle seeds:

  dtypes.bin          torch.save of a state dict with F32 / F16 / BF16 / F64 / I64 / I32 tensors, a transposed
                      view and a row slice sharing one storage, an nn.Parameter and OrderedDict _metadata (BUILD);
                      expected.json holds every tensor's shape, dtype and values as torch gives them
  dtypes_deflate.bin  the same archive with its entries deflated (torch writes stored entries; zip tools may not)
  legacy.bin          torch.save(..., _use_new_zipfile_serialization=False): the pre-1.6 format, refused
                      (its storage keys change from run to run; everything else is reproducible byte for byte)
  bert_bin/           pytorch_model.bin of tests/fixtures/bert/model.safetensors (a BertModel state dict)
  bert_bin_sharded/   the same in two pytorch_model-0000N-of-00002.bin shards + pytorch_model.bin.index.json
  bert_st_sharded/    the same in two safetensors shards + model.safetensors.index.json
  st_multi_bin/       2_Dense/pytorch_model.bin of tests/fixtures/st_multi (the sentence-transformers layout;
                      the test copies the rest of st_multi around it)
  evil_*.bin          crafted archives that must be refused (see the table below)

Run from the repo root with Debian's PyTorch:  /usr/bin/python3 scripts/make_torch_pickle_fixtures.py
"""
import collections
import io
import json
import os
import pickle
import shutil
import sys
import zipfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.environ.get("TFM_REFERENCE_DIR", os.path.join(ROOT, "..", "shared", "reference")), "torch"))
import st  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "torch_pickle")
SEEDS = os.path.join(ROOT, "tests", "fixtures", "fuzz_regressions", "fuzz_torch_pickle")


def dtypes_state_dict():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25 - 1.0
    sd = collections.OrderedDict()
    sd["f32"] = base
    sd["f32_t"] = base.t()            # non-contiguous: stride (1, 4), same storage
    sd["f32_row"] = base[1]           # storage offset 4, same storage
    sd["f16"] = torch.tensor([0.5, -2.0, 65504.0, 6.1e-5, 1e-7], dtype=torch.float16)
    sd["bf16"] = torch.tensor([[1.0, -3.140625], [1e30, 7.0]], dtype=torch.bfloat16)
    sd["f64"] = torch.tensor([1.5, -0.1], dtype=torch.float64)
    sd["i64"] = torch.tensor([0, -1, 2**40, 7], dtype=torch.int64)
    sd["i32"] = torch.tensor([3, -4], dtype=torch.int32)
    sd["param"] = torch.nn.Parameter(torch.tensor([[2.0, 4.0]]))  # pickled through _rebuild_parameter
    sd["scalar"] = torch.tensor(3.5)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])  # what Module.state_dict() attaches
    return sd


def describe(t):
    t = t.detach()
    name = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
            torch.int64: "I64", torch.int32: "I32"}[t.dtype]
    vals = t.reshape(-1).tolist() if t.dtype in (torch.int64, torch.int32) else t.float().reshape(-1).tolist()
    return {"dtype": name, "shape": list(t.shape), "values": vals}


def entry(name, method=zipfile.ZIP_STORED):
    """A zip entry with a fixed timestamp, so the fixtures are reproducible byte for byte."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = method
    return info


def rezip(src, dst, method):
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", method) as zo:
        for info in zi.infolist():
            zo.writestr(entry(info.filename, method), zi.read(info.filename))


def archive(path, pkl, data=None):
    """A zip laid out as torch.save does: archive/data.pkl, archive/data/<key>, archive/version."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(entry("archive/data.pkl"), pkl)
        for key, b in (data or {}).items():
            z.writestr(entry("archive/data/" + key), b)
        z.writestr(entry("archive/version"), "3\n")


class Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def tensor_pickle(key, numel, offset, size, stride, storage="FloatStorage"):
    """data.pkl of {'w': tensor} written by hand, the bytes torch.save writes but with chosen numbers."""
    p = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00wq\x02"
    p += b"ctorch._utils\n_rebuild_tensor_v2\nq\x03((X\x07\x00\x00\x00storageq\x04ctorch\n" + storage.encode()
    p += b"\nq\x05X" + len(key).to_bytes(4, "little") + key.encode() + b"X\x03\x00\x00\x00cpu"
    p += b"\x8a\x08" + numel.to_bytes(8, "little", signed=True) + b"tq\x06Q"
    p += b"\x8a\x08" + offset.to_bytes(8, "little", signed=True)
    p += b"(" + b"".join(b"\x8a\x08" + s.to_bytes(8, "little") for s in size) + b"t"
    p += b"(" + b"".join(b"\x8a\x08" + s.to_bytes(8, "little") for s in stride) + b"t"
    p += b"\x89h\x00)Rtq\x07Rq\x08u."
    return p


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    os.makedirs(SEEDS, exist_ok=True)

    sd = dtypes_state_dict()
    torch.save(sd, os.path.join(OUT, "dtypes.bin"))
    back = torch.load(os.path.join(OUT, "dtypes.bin"))
    assert back["f32_t"].stride() == (1, 4) and back["f32_row"].storage_offset() == 4
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({k: describe(v) for k, v in back.items()}, f, indent=1)
    rezip(os.path.join(OUT, "dtypes.bin"), os.path.join(OUT, "dtypes_deflate.bin"), zipfile.ZIP_DEFLATED)
    torch.save({"w": torch.ones(2)}, os.path.join(OUT, "legacy.bin"), _use_new_zipfile_serialization=False)

    # The tiny BERT of tests/fixtures/bert in the forms checkpoints ship.
    bert = collections.OrderedDict((k, torch.from_numpy(v.copy()))
                                   for k, v in st.load(os.path.join(ROOT, "tests", "fixtures", "bert", "model.safetensors")).items())
    names = sorted(bert)
    half = {n: ("1" if i < len(names) // 2 else "2") for i, n in enumerate(names)}
    for sub in ("bert_bin", "bert_bin_sharded", "bert_st_sharded"):
        os.makedirs(os.path.join(OUT, sub))
        shutil.copy(os.path.join(ROOT, "tests", "fixtures", "bert", "config.json"), os.path.join(OUT, sub))
    torch.save(bert, os.path.join(OUT, "bert_bin", "pytorch_model.bin"))
    for kind, ext, index in (("bin", "bin", "pytorch_model.bin.index.json"), ("st", "safetensors", "model.safetensors.index.json")):
        stem = "pytorch_model" if kind == "bin" else "model"
        wm = {n: f"{stem}-0000{half[n]}-of-00002.{ext}" for n in names}
        for part in ("1", "2"):
            shard = collections.OrderedDict((n, bert[n]) for n in names if half[n] == part)
            path = os.path.join(OUT, f"bert_{kind}_sharded", f"{stem}-0000{part}-of-00002.{ext}")
            if kind == "bin":
                torch.save(shard, path)
            else:
                st.save({n: t.numpy() for n, t in shard.items()}, path)
        with open(os.path.join(OUT, f"bert_{kind}_sharded", index), "w") as f:
            json.dump({"metadata": {"total_size": sum(t.numel() * 4 for t in bert.values())}, "weight_map": wm}, f, indent=1)

    # A sentence-transformers folder whose modules ship pytorch_model.bin.
    for sub in ("2_Dense",):
        src = os.path.join(ROOT, "tests", "fixtures", "st_multi", sub, "model.safetensors")
        os.makedirs(os.path.join(OUT, "st_multi_bin", sub), exist_ok=True)
        sd = collections.OrderedDict((k, torch.from_numpy(v.copy())) for k, v in sorted(st.load(src).items()))
        torch.save(sd, os.path.join(OUT, "st_multi_bin", sub, "pytorch_model.bin"))

    # Crafted archives. Each must be refused with the message fragment the test checks.
    four = (b"\x00\x00\x80\x3f" * 4)
    evil = {
        # __reduce__ to os.system: pickle writes the global as posix.system on Linux
        "evil_posix_system.bin": pickle.dumps(Reduce(os.system, ("echo pwned",)), protocol=2),
        "evil_eval.bin": pickle.dumps(Reduce(eval, ("1+1",)), protocol=2),  # GLOBAL '__builtin__ eval'
        "evil_eval_p4.bin": pickle.dumps(Reduce(eval, ("1+1",)), protocol=4),  # STACK_GLOBAL 'builtins' 'eval'

        "evil_unknown_global.bin": pickle.dumps(collections.OrderedDict(w=collections.Counter()), protocol=2),
        # INST opcode (protocol 0 instance creation)
        "evil_inst_opcode.bin": b"(ios\nsystem\nX\x04\x00\x00\x00echo.",
        "evil_huge_size.bin": tensor_pickle("0", 2**61, 0, [2**20, 2**20], [2**20, 1]),
        "evil_offset_past.bin": tensor_pickle("0", 4, 3, [2], [1]),
        "evil_storage_bigger.bin": tensor_pickle("0", 1000, 0, [4], [1]),
        "evil_missing_entry.bin": tensor_pickle("7", 4, 0, [4], [1]),
    }
    for name, pkl in evil.items():
        archive(os.path.join(OUT, name), pkl, {"0": four})
    # A well-formed hand-written archive: the same bytes as above with consistent numbers.
    archive(os.path.join(OUT, "handmade_ok.bin"), tensor_pickle("0", 4, 1, [3], [1]), {"0": four})
    with open(os.path.join(OUT, "dtypes.bin"), "rb") as f:
        whole = f.read()
    with open(os.path.join(OUT, "evil_truncated.bin"), "wb") as f:
        f.write(whole[: len(whole) // 2])

    # Fuzz seeds (replayed by tests/test_fuzz_regressions.cpp).
    shutil.copy(os.path.join(OUT, "handmade_ok.bin"), os.path.join(SEEDS, "handmade_ok.bin"))
    shutil.copy(os.path.join(OUT, "evil_posix_system.bin"), os.path.join(SEEDS, "evil_posix_system.bin"))
    shutil.copy(os.path.join(OUT, "evil_offset_past.bin"), os.path.join(SEEDS, "evil_offset_past.bin"))


if __name__ == "__main__":
    main()
