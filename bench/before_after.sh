#!/usr/bin/env bash
# Two builds side by side in one run (a refactor's "speed is not worse" check): the encoder forward of a random
# BERT-base (bench_encoder, fp32 / bf16 / int8) and d2l training (`tfm train`, the make-run defaults), the two
# binaries alternating so that a change in machine load hits both. Prints each figure and new/old.
#
#   bench/before_after.sh OLD_DIR NEW_DIR [THREADS]
#
# OLD_DIR and NEW_DIR hold `tfm` and `bench_encoder` (a build folder, or copies of the two binaries).
# Environment: SHAPES (default 1x128,8x128), REPS (10), ROUNDS (2: old, new, old, new), START_RUNS (10: whole-process
# `tfm encode` runs per side). Run on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/before_after.sh OLD_DIR NEW_DIR [THREADS]}
NEW=${2:?usage: bench/before_after.sh OLD_DIR NEW_DIR [THREADS]}
THREADS=${3:-2}
SHAPES=${SHAPES:-1x128,8x128}
REPS=${REPS:-10}
ROUNDS=${ROUNDS:-2}
DATA=${TFM_DATA_DIR:-../shared/data}
for d in "$OLD" "$NEW"; do
  for b in tfm bench_encoder; do [ -x "$d/$b" ] || { echo "before_after: $d/$b: not an executable" >&2; exit 1; }; done
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 bench/bert_pytorch.py make-weights "$tmp/bert" >&2

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads, $(date -u +%FT%TZ)"
echo "| what | old | new | new/old |"
echo "|---|---:|---:|---:|"
for dt in fp32 bf16 int8; do
  for r in $(seq "$ROUNDS"); do
    for side in old new; do
      dir=$OLD; [ $side = new ] && dir=$NEW
      "$dir/bench_encoder" "$tmp/bert" --threads "$THREADS" --reps "$REPS" --shapes "$SHAPES" --dtype "$dt" \
        | grep '"kind": *"encoder"' | sed "s/^/$side /" >> "$tmp/enc_$dt.txt"
    done
  done
  IFS=, read -ra shapes <<< "$SHAPES"
  for s in "${shapes[@]}"; do
    B=${s%x*}; L=${s#*x}
    for side in old new; do
      grep "^$side " "$tmp/enc_$dt.txt" | grep -E "\"B\": *$B," | grep -E "\"L\": *$L," |
        sed -E 's/.*"median_ms": *([0-9.eE+-]+).*/\1/' | median > "$tmp/$side.v"
    done
    o=$(cat "$tmp/old.v"); n=$(cat "$tmp/new.v")
    echo "| encoder $dt [$B, $L] median ms | $o | $n | $(awk -v o="$o" -v n="$n" 'BEGIN {printf "%.3f", n / o}') |"
  done
done
# Whole-process `tfm encode` of one sentence (load + tokenize + one forward), START_RUNS times each, alternating.
cp "$DATA/bert-base-uncased/vocab.txt" "$DATA/bert-base-uncased/tokenizer_config.json" "$tmp/bert/"
for r in $(seq "${START_RUNS:-10}"); do
  for side in old new; do
    dir=$OLD; [ $side = new ] && dir=$NEW
    /usr/bin/time -f "$side %e" "$dir/tfm" encode --model "$tmp/bert" --threads "$THREADS" \
      --text "the quick brown fox jumps over the lazy dog" -o "$tmp/start.npy" > /dev/null 2>> "$tmp/start.txt"
  done
done
o=$(grep '^old ' "$tmp/start.txt" | cut -d' ' -f2 | median); n=$(grep '^new ' "$tmp/start.txt" | cut -d' ' -f2 | median)
echo "| whole-process tfm encode, one sentence, fp32, median s | $o | $n | $(awk -v o="$o" -v n="$n" 'BEGIN {printf "%.3f", n / o}') |"
for r in $(seq "$ROUNDS"); do
  for side in old new; do
    dir=$OLD; [ $side = new ] && dir=$NEW
    rm -rf "$tmp/run"
    "$dir/tfm" train --data "$DATA/fra-eng/fra.txt" --out "$tmp/run" --threads 1 --no-progress 2>&1 |
      sed -nE 's/.* ([0-9.]+) tokens\/s.*/\1/p' | sed "s/^/$side /" >> "$tmp/train.txt"
  done
done
o=$(grep '^old ' "$tmp/train.txt" | cut -d' ' -f2 | median); n=$(grep '^new ' "$tmp/train.txt" | cut -d' ' -f2 | median)
echo "| d2l training (make-run defaults, 1 thread) tokens/s | $o | $n | $(awk -v o="$o" -v n="$n" 'BEGIN {printf "%.3f", n / o}') |"
