"""Makes the PyTorch side of every benchmark a fair peer, and says which BLAS it ran.

Debian's python3-torch takes its fp32 GEMMs from libblas.so.3, which is the reference BLAS (~4 GFLOP/s) unless
libopenblas0-pthread is installed (bench/ensure_openblas.sh installs it). OpenBLAS threads nested under torch's own
intra-op threads make torch about 3x slower on 2 cores, so OpenBLAS runs one thread under each torch thread
(OPENBLAS_NUM_THREADS=1, what PyTorch's own OpenBLAS builds do), and OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset
so OpenBLAS picks the kernels of the CPU it runs on.

Use, in a benchmark script:

    import torch_blas
    torch_blas.prepare()          # before the first `import torch` (OpenBLAS reads its environment when it loads)
    import torch
    torch_blas.check()            # prints "pytorch BLAS: ..." to stderr; exits 2 on the reference BLAS

TFM_ALLOW_REFERENCE_BLAS=1 lets check() go on (with a warning) on the reference BLAS.
"""
import os
import sys

_UNSET = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def prepare():
    """Sets OpenBLAS's environment for this process; must run before torch (and numpy) load libblas."""
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    for k in _UNSET:
        os.environ.pop(k, None)


def loaded_blas():
    """The BLAS shared objects mapped into this process (resolved paths), from /proc/self/maps."""
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "blas" in os.path.basename(parts[-1]).lower() and parts[-1] not in libs:
                libs.append(parts[-1])
    return libs


def describe(libs):
    """'OpenBLAS (path)', 'reference BLAS (path)' or 'unknown (...)' for the list loaded_blas() gives."""
    for p in libs:
        if "openblas" in p.lower():
            return "OpenBLAS (%s)" % p
    for p in libs:
        if "/blas/" in p or os.path.basename(p).startswith("libblas.so"):
            return "reference BLAS (%s)" % p
    return "unknown (%s)" % (", ".join(libs) or "no BLAS library mapped")


def check():
    """Prints which BLAS torch runs on and the OpenBLAS threads; exits 2 on the reference BLAS.

    Returns the description string (also put into the benchmark's JSON by callers that record it)."""
    import torch  # noqa: F401  (makes sure libtorch and its libblas are loaded)

    desc = describe(loaded_blas())
    msg = "pytorch BLAS: %s, OPENBLAS_NUM_THREADS=%s, torch threads %d" % (
        desc, os.environ.get("OPENBLAS_NUM_THREADS", "unset"), torch.get_num_threads())
    print(msg, file=sys.stderr, flush=True)
    if desc.startswith("reference BLAS"):
        if os.environ.get("TFM_ALLOW_REFERENCE_BLAS") == "1":
            print("pytorch BLAS: WARNING: the reference BLAS makes every PyTorch figure ~50x too slow; "
                  "ratios from this run are not valid", file=sys.stderr, flush=True)
        else:
            sys.exit("pytorch BLAS: torch runs on Debian's reference BLAS (~4 GFLOP/s), which would flatter every "
                     "ratio; run bench/ensure_openblas.sh (installs libopenblas0-pthread) or set "
                     "TFM_ALLOW_REFERENCE_BLAS=1")
    return desc
