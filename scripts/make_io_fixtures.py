#!/usr/bin/python3
"""Writes tests/fixtures/io/: safetensors and .npy files made by the reference writers (reference/torch/st.py and
numpy's np.save), plus expected.json with the values they hold, for tests/test_io.cpp.

Run from the repo root:  /usr/bin/python3 scripts/make_io_fixtures.py
Values are fixed literals (no RNG) so the fixtures are reproducible byte for byte.
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.environ.get("TFM_REFERENCE_DIR", os.path.join(ROOT, "..", "shared", "reference")), "torch"))
import st  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "io")


def describe(a):
    # float32 -> Python float is exact, so the C++ side can compare bit for bit after casting to float.
    vals = a.astype(np.float32 if a.dtype.kind == "f" else np.int64).ravel().tolist()
    return {"dtype": str(a.dtype), "shape": list(a.shape), "values": vals}


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {}

    # F32 + I64. 'a_odd' holds 3 floats (12 bytes) and sorts first, so 'ids' starts 4 bytes past an 8-byte
    # boundary: the reader must copy it rather than make a misaligned int64 view.
    f32_i64 = {
        "a_odd": np.array([0.1, -2.5, 3e-8], dtype=np.float32),
        "ids": np.array([[0, -1, 2**40 + 7], [9223372036854775807, -9223372036854775808, 30522]], dtype=np.int64),
        "weight": (np.arange(12, dtype=np.float32).reshape(3, 4) * np.float32(0.37) - np.float32(1.5)),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }
    path = os.path.join(OUT, "f32_i64.safetensors")
    st.save(f32_i64, path, metadata={"format": "pt", "note": "io fixture"})
    # Expected values are what the reference reader sees in the file.
    expected["f32_i64.safetensors"] = {k: describe(v) for k, v in st.load(path).items()}

    # F16 (converted to F32 by the reader) and I32 (converted to I64). 'a_half' is 3 halves (6 bytes) and sorts
    # first, so 'b_f32' starts at an odd multiple of 2: a misaligned float32 that must be copied.
    half = np.array([1.0, -2.5, 1.0 / 3.0, 65504.0, 6.103515625e-05, 5.960464477539063e-08, -0.0, 0.000123],
                    dtype=np.float16)
    f16 = {
        "a_half": np.array([0.5, -1.25, 1.0e-6], dtype=np.float16),
        "b_f32": np.array([[1.5, -7.25]], dtype=np.float32),
        "half": half.reshape(2, 4),
        "i32": np.array([-2147483648, 2147483647, 5], dtype=np.int32),
    }
    path = os.path.join(OUT, "f16.safetensors")
    st.save(f16, path)
    expected["f16.safetensors"] = {k: describe(v) for k, v in st.load(path).items()}

    a = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) / np.float32(7.0) - np.float32(1.0))
    np.save(os.path.join(OUT, "a.npy"), a)
    expected["a.npy"] = describe(a)
    b = np.array([3, -4, 5000000000], dtype=np.int64)
    np.save(os.path.join(OUT, "b.npy"), b)
    expected["b.npy"] = describe(b)

    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
