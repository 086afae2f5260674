#!/usr/bin/env python3
"""Top-1 retrieval accuracy of two aligned embedding files (what the README's bilingual demo reports).

    retrieval_accuracy.py QUERIES.npy CANDIDATES.npy

Row i of QUERIES.npy (float32 [N, D], as `tfm embed --output` writes it) should retrieve row i of CANDIDATES.npy
among all N candidates by cosine similarity. Prints "top-1 accuracy A (C of N), MRR M": A is the fraction of
queries whose own candidate scores strictly highest (a tie counts against it), M the mean of 1 / rank. Uses numpy
when it is installed, else plain Python (a few seconds for 1,000 x 1,000). Exits 2 with one line on bad input.
"""
import math
import struct
import sys


def read_npy(path):
    """[[float]] rows of a C-order float32 2-D .npy file (format 1.0 / 2.0)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    if major == 1:
        (hlen,) = struct.unpack("<H", data[8:10])
        start = 10
    else:
        (hlen,) = struct.unpack("<I", data[8:12])
        start = 12
    header = data[start:start + hlen].decode("latin1")
    if "'<f4'" not in header or "'fortran_order': False" not in header:
        raise ValueError(f"{path}: expected little-endian float32 in C order, header {header.strip()}")
    shape_text = header[header.index("(") + 1:header.index(")")]
    shape = [int(s) for s in shape_text.split(",") if s.strip()]
    if len(shape) != 2:
        raise ValueError(f"{path}: expected a 2-D array, got shape {tuple(shape)}")
    n, d = shape
    body = data[start + hlen:]
    if len(body) != 4 * n * d:
        raise ValueError(f"{path}: {len(body)} bytes of data for shape ({n}, {d})")
    flat = struct.unpack(f"<{n * d}f", body)
    return [list(flat[i * d:(i + 1) * d]) for i in range(n)]


def unit(rows):
    out = []
    for r in rows:
        norm = math.sqrt(sum(x * x for x in r)) or 1.0
        out.append([x / norm for x in r])
    return out


def ranks_plain(q, c):
    import operator
    ranks = []
    for i, qi in enumerate(q):
        scores = [sum(map(operator.mul, qi, cj)) for cj in c]
        own = scores[i]
        ranks.append(1 + sum(1 for s in scores if s > own))
    return ranks


def ranks_numpy(np, q, c):
    q = np.asarray(q, dtype=np.float32)
    c = np.asarray(c, dtype=np.float32)
    s = q @ c.T
    own = np.diag(s)[:, None]
    return (1 + (s > own).sum(axis=1)).tolist()


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        q, c = unit(read_npy(sys.argv[1])), unit(read_npy(sys.argv[2]))
    except (OSError, ValueError) as e:
        print(f"retrieval_accuracy: error: {e}", file=sys.stderr)
        return 2
    if len(q) != len(c) or not q or len(q[0]) != len(c[0]):
        print(f"retrieval_accuracy: error: {len(q)} queries and {len(c)} candidates must be aligned, same width",
              file=sys.stderr)
        return 2
    try:
        import numpy as np
        ranks = ranks_numpy(np, q, c)
    except ImportError:
        ranks = ranks_plain(q, c)
    n = len(ranks)
    top1 = sum(1 for r in ranks if r == 1)
    print(f"top-1 accuracy {top1 / n:.4f} ({top1} of {n}), MRR {sum(1.0 / r for r in ranks) / n:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
