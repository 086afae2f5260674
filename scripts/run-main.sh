#!/usr/bin/env bash
# The main job behind `make run`: the encoder demo, then (when built) English -> French training and translation.
set -euo pipefail
TFM=${1:-build/tfm}
DATA=${TFM_DATA_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared/data}
if [ ! -d "$DATA/bert-base-uncased" ]; then
  echo "run-main: data folder '$DATA' has no bert-base-uncased/ (set TFM_DATA_DIR)" >&2
  exit 1
fi
echo "== encoder: bert-base-uncased tokenizer and config, random weights (no pretrained weights at hand)"
"$TFM" encode --model "$DATA/bert-base-uncased" --init random --seed 0 --no-special-tokens \
  --text "time flies like an arrow"
