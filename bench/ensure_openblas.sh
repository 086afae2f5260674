#!/usr/bin/env bash
# Installs the PyTorch peer of every benchmark when missing: Debian's python3-torch (for /usr/bin/python3; the
# fixture scripts in scripts/ use it too) and OpenBLAS (libopenblas0-pthread), so that torch takes its GEMMs from
# OpenBLAS instead of the reference BLAS (see bench/torch_blas.py). Quiet when both are there.
set -euo pipefail
missing=()
for pkg in python3-torch libopenblas0-pthread; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "ensure_openblas: installing ${missing[*]} (the benchmarks' PyTorch peer and its BLAS)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
