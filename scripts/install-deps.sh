#!/usr/bin/env bash
# Installs the Debian 12 packages transformer.cpp builds and tests with. Quiet and quick when all are present.
set -euo pipefail
# One package a line, grouped by what needs it (keeps concurrent edits mergeable).
PKGS=(
  cmake g++ make pkg-config ccache
  libdnnl-dev                     # GEMM (oneDNN)
  nlohmann-json3-dev libcli11-dev libutf8proc-dev zlib1g-dev libsentencepiece-dev
  libcurl4-openssl-dev libssl-dev
  libonig-dev                     # tokenizer.json regexes (Split, ByteLevel, Whitespace)
  libgtest-dev libgmock-dev libbenchmark-dev
  libcairo2-dev fonts-dejavu-core # plots
  libcpp-httplib-dev              # tfm serve
  pybind11-dev python3-dev python3-numpy python3-pytest  # Python bindings
  python3-pip python3-setuptools python3-wheel python3-build python3-venv  # pip install . / python3 -m build
  libopenmpi-dev openmpi-bin     # data-parallel training (mpirun)
  chromium                        # browser test of the web page
  iproute2                        # ss: the serve test reads the listening socket's backlog
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
