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
# The four words above can differ between CPUs (200 epochs on 600 pairs amplify last-bit differences of their
# GEMM kernels); the corpus BLEU over every training pair (d2l reads lines 0..600) and the final loss barely move.
# d2l's preprocess_nmt: U+202F/U+00A0 -> ' ', lowercase, a space before , . ! ? not preceded by one.
preprocess() {
  LC_ALL=C.UTF-8 sed -e 's/\xe2\x80\xaf/ /g; s/\xc2\xa0/ /g' -e 's/.*/\L&/' -e ':a' -e 's/\([^ ]\)\([,.!?]\)/\1 \2/' -e 'ta'
}
head -n 601 "$DATA/fra-eng/fra.txt" | cut -f1 | preprocess > "$OUT/train_src.txt"
head -n 601 "$DATA/fra-eng/fra.txt" | cut -f2 | preprocess > "$OUT/train_ref.txt"
# --quiet: words outside the 600 pairs' vocabulary (line 601) would print a warning each
"$TFM" translate --model "$OUT/fra-eng" --threads "$THREADS" --quiet < "$OUT/train_src.txt" > "$OUT/train_hyp.txt"
echo "all $(wc -l < "$OUT/train_src.txt") training pairs: $("$TFM" bleu --corpus "$OUT/train_ref.txt" "$OUT/train_hyp.txt" | cut -d' ' -f1-3)"
echo
echo "== tfm encode: bert-base-uncased tokenizer and config, random weights (no pretrained weights at hand)"
"$TFM" encode --model "$DATA/bert-base-uncased" --init random --seed 0 --no-special-tokens \
  --text "time flies like an arrow"
