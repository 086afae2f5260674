#!/usr/bin/env bash
# The main job behind `make run`: train the d2l encoder-decoder English -> French on the first 600 fra-eng pairs,
# translate four sentences with their BLEU, then the encoder demo (bert-base-uncased tokenizer and config).
set -euo pipefail
TFM=${1:-build/tfm}
DATA=${TFM_DATA_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared/data}
OUT=${TFM_RUN_DIR:-build/run}
# The reference-sized model is tiny: one thread is nearly as fast as two on an idle machine and far faster on a
# busy one (every OpenMP barrier then waits for a scheduler tick).
THREADS=${TFM_THREADS:-1}
for need in fra-eng/fra.txt bert-base-uncased/vocab.txt; do
  if [ ! -f "$DATA/$need" ]; then
    echo "run-main: '$DATA/$need' not found (set TFM_DATA_DIR to the shared data folder)" >&2
    exit 1
  fi
done

echo "== tfm train: transformer_seq2seq on $DATA/fra-eng/fra.txt (600 examples, d2l defaults)"
"$TFM" train --data "$DATA/fra-eng/fra.txt" --out "$OUT/fra-eng" --overwrite --threads "$THREADS"
echo
echo "== tfm translate"
src=("go ." "i lost ." "he's calm ." "i'm home .")
ref=("va !" "j'ai perdu ." "il est calme ." "je suis chez moi .")
mapfile -t hyp < <("$TFM" translate --model "$OUT/fra-eng" --threads "$THREADS" "${src[@]}")
for i in "${!src[@]}"; do
  echo "${src[$i]} => ${hyp[$i]}, bleu $("$TFM" bleu --k 2 "${hyp[$i]}" "${ref[$i]}")"
done
echo
echo "== tfm encode: bert-base-uncased tokenizer and config, random weights (no pretrained weights at hand)"
"$TFM" encode --model "$DATA/bert-base-uncased" --init random --seed 0 --no-special-tokens \
  --text "time flies like an arrow"
