#!/usr/bin/env bash
# Multi30k English -> French from scratch with the shipped recipe, then beam-5 translation of test_2016_flickr and
# sacreBLEU-style corpus BLEU (detokenised, cased), with wall times.
#   bench/multi30k.sh [--short] [OUT_DIR]
#   bench/multi30k.sh --decode MODEL_DIR
#   --short: instead, training tokens/s of tfm and of an equivalent PyTorch model (torch.nn.Transformer, same
#            dimensions and batches, Debian python3-torch, 2 threads), measured in one run.
#   --decode MODEL_DIR: only decoding, of a trained folder: test_2016_flickr (1,000 sentences) greedy and beam 5
#            (length penalty 0.6) in fp32, bf16, int8 and int8q (int8 with --quantize-output-projection), one after
#            the other in this invocation; wall and CPU time of each whole 'tfm translate' process (load included),
#            sentences/s, corpus BLEU and its difference to fp32.
#   PRECISION=bf16: tfm trains with "precision": "bf16" (bf16 GEMM inputs, fp32 master weights); PyTorch stays fp32.
#   SET="key=value ...": recipe overrides for the full run (`tfm train --set`), e.g. the 30-minute budget of
#            issue 24: SET="epochs=40 time_limit_minutes=30" (training stops at the first epoch end past 30 min).
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/ensure_openblas.sh  # the PyTorch peer on OpenBLAS, one BLAS thread under its threads (bench/torch_blas.py)
TFM=${TFM:-build/tfm}
DATA=${TFM_DATA_DIR:-$(cd .. && pwd)/shared/data}
export TFM_DATA_DIR=$DATA
THREADS=${THREADS:-2}
PRECISION=${PRECISION:-fp32}
[ -x "$TFM" ] || { echo "build first: make build" >&2; exit 1; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $THREADS; tfm precision $PRECISION"

if [ "${1:-}" = "--decode" ]; then
  MODEL=${2:?usage: bench/multi30k.sh --decode MODEL_DIR}
  [ -f "$MODEL/config.json" ] || { echo "$MODEL: no config.json (a folder from tfm train)" >&2; exit 1; }
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
  gunzip -c "$DATA/multi30k/test_2016_flickr.en.gz" > "$OUT/test.en"
  gunzip -c "$DATA/multi30k/test_2016_flickr.fr.gz" > "$OUT/test.fr"
  n=$(wc -l < "$OUT/test.en")
  echo "test_2016_flickr en->fr, $n sentences, model $MODEL"
  printf '%-8s %-6s %9s %8s %12s %7s %9s\n' decoding dtype "wall s" "cpu s" sentences/s BLEU "vs fp32"
  TIMEFORMAT='%R %U %S'
  for mode in greedy beam5; do
    args=(); [ $mode = beam5 ] && args=(--beam 5 --length-penalty 0.6)
    for dt in fp32 bf16 int8 int8q; do  # int8q: int8 with --quantize-output-projection
      # bash's time: wall, user and system seconds of the whole process
      q=(); [ $dt = int8q ] && q=(--quantize-output-projection)
      read -r wall user sys < <({ time "$TFM" translate --model "$MODEL" "${args[@]}" --dtype ${dt%q} "${q[@]}" \
        --threads "$THREADS" --quiet < "$OUT/test.en" > "$OUT/hyp.$mode.$dt"; } 2>&1)
      bleu=$("$TFM" bleu --corpus "$OUT/test.fr" "$OUT/hyp.$mode.$dt" | sed -n 's/^BLEU = \([0-9.]*\).*/\1/p')
      [ $dt = fp32 ] && ref=$bleu
      /usr/bin/python3 -c "print('%-8s %-6s %9.2f %8.2f %12.1f %7.2f %+9.2f' % ('$mode', '$dt', $wall, $user + $sys, $n / $wall, $bleu, $bleu - $ref))"
    done
  done
  exit 0
fi

if [ "${1:-}" = "--short" ]; then
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
  ours=$("$TFM" train --config configs/multi30k-en-fr.json --out "$OUT/run" --set stop_after_steps=30 \
         --set valid_limit=8 --set precision="$PRECISION" --threads "$THREADS" --no-progress)
  tps=$(echo "$ours" | sed -n 's/.*s, \([0-9.]*\) target tokens\/s.*/\1/p')
  step_tps=$(echo "$ours" | sed -n 's/.*target tokens\/s (\([0-9.]*\) in the training steps).*/\1/p')
  torch_tps=$(/usr/bin/python3 bench/multi30k_pytorch.py --config configs/multi30k-en-fr.json --spm "$OUT/run/spm.model" \
              --data "$DATA" --steps 30 --threads "$THREADS")
  printf 'training, target tokens/s: tfm %.0f  pytorch %.0f  ratio %.2fx\n' "$tps" "$torch_tps" \
    "$(/usr/bin/python3 -c "print($tps/$torch_tps)")"
  printf 'training steps only (as the PyTorch figure is timed), target tokens/s: tfm %.0f  ratio %.2fx\n' \
    "$step_tps" "$(/usr/bin/python3 -c "print($step_tps/$torch_tps)")"
  echo "(tfm's first figure includes the subword training and startup; both use the same 30 batches' worth of steps;"
  echo " PyTorch's figure leaves out its first 2 steps, tfm's steps-only figure counts all 30)"
  exit 0
fi

OUT=${1:-build/multi30k}
rm -rf "$OUT"
t0=$(date +%s)
sets=(--set precision="$PRECISION")
for kv in ${SET:-}; do sets+=(--set "$kv"); done
"$TFM" train --config configs/multi30k-en-fr.json --out "$OUT" "${sets[@]}" --threads "$THREADS"
t1=$(date +%s)
gunzip -c "$DATA/multi30k/test_2016_flickr.en.gz" > "$OUT/test.en"
gunzip -c "$DATA/multi30k/test_2016_flickr.fr.gz" > "$OUT/test.fr"
"$TFM" translate --model "$OUT" --beam 5 --length-penalty 0.6 --threads "$THREADS" < "$OUT/test.en" > "$OUT/test.hyp.fr"
t2=$(date +%s)
echo "training wall time: $(( (t1 - t0) / 60 )) min $(( (t1 - t0) % 60 )) s"
echo "beam-5 decoding of $(wc -l < "$OUT/test.en") sentences: $((t2 - t1)) s"
echo "test_2016_flickr en->fr: $("$TFM" bleu --corpus "$OUT/test.fr" "$OUT/test.hyp.fr")"
