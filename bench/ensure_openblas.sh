#!/usr/bin/env bash
# Installs Debian's OpenBLAS (libopenblas0-pthread) when missing, so the PyTorch peer of every benchmark takes its
# GEMMs from OpenBLAS instead of the reference BLAS (see bench/torch_blas.py). Quiet when it is already there.
set -euo pipefail
pkg=libopenblas0-pthread
dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "ensure_openblas: installing $pkg (PyTorch's BLAS for the benchmarks)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$pkg" >&2
