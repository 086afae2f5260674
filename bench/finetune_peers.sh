#!/usr/bin/env bash
# Classification fine-tuning speed and memory of `tfm finetune --task classify` against the PyTorch reference
# (bench/finetune_pytorch.py: BertModelRef + classifier, the Trainer's AdamW, clipping and schedule) in one run:
# optimizer steps/s at batch 32, length 128 (no padding), THREADS threads, and each process's peak RSS
# (/usr/bin/time). Sizes: BERT-base (hidden 768, 12 layers, 12 heads, intermediate 3072) and MiniLM (hidden 384,
# 12 layers, 12 heads, intermediate 1536), vocabulary 30,522, random weights (`tfm encode --init random --save`),
# dropout DROPOUT (default 0) on both sides. Goals (issue 25): >= 2x PyTorch fp32, >= 3x with bf16, peak RSS
# <= 0.5x PyTorch's.
#   bench/finetune_peers.sh              # base and minilm (about 10 minutes on 2 cores)
#   SIZE=tiny bench/finetune_peers.sh    # a seconds-long check that the script works (hidden 64, 2 layers)
# Environment: SIZE (comma-separated: base, minilm, tiny), STEPS (timed steps; default 2 at base size, whose step
# takes PyTorch about half a minute on 2 cores, and 5 at the others), THREADS (2), TFM (build/tfm), TFM_DATA_DIR,
# DROPOUT (0): hidden_dropout_prob and attention_probs_dropout_prob of both sides' config (the Hugging Face
# default is 0.1; the masks then cost both sides memory and time), REPEATS (1): rounds of PyTorch then tfm,
# alternating; with more than one, each round's figures are printed and
# the summary line gives the medians (the speed ratio is the median of the rounds' ratios), which a noisy
# machine moves far less than one round. EMULATE_BF16=1 on a CPU without bf16 instructions runs the bf16 case
# anyway, emulated (TFM_EMULATE_BF16=1, README): its memory is measured (an upper bound: the emulation's two fp32
# widening buffers, up to 100 MB at base size, stand in for oneDNN's scratchpad), its speed is not a figure.
# Both sides run STEPS + 1 steps and report steps/s as 1 / the median wall time of the steps after the first
# (PyTorch: bench/finetune_pytorch.py's step_seconds; tfm: its summary line, "s a step after the first (median)"),
# so loading, tokenizing, the first step's one-time work and writing the folder are left out of both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/ensure_openblas.sh  # the PyTorch peer on OpenBLAS, one BLAS thread under its threads (bench/torch_blas.py)
TFM=${TFM:-build/tfm}
DATA=${TFM_DATA_DIR:-$(cd .. && pwd)/shared/data}
THREADS=${THREADS:-2}
STEPS_SET=${STEPS:-}
SIZE=${SIZE:-base,minilm}
REPEATS=${REPEATS:-1}
# DROPOUT as a JSON number (".1" -> 0.1), checked to be in [0, 1).
p=${DROPOUT:-0}
DROPOUT=$(/usr/bin/python3 -c "import sys; p = float(sys.argv[1]); assert 0 <= p < 1; print(p)" "$p" 2> /dev/null) ||
  { echo "DROPOUT must be a number in [0, 1), not '$p'" >&2; exit 1; }
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || { echo "REPEATS must be a positive integer, not '$REPEATS'" >&2; exit 1; }
BATCH=32
LENGTH=128
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[ -x "$TFM" ] || { echo "build first: make build" >&2; exit 1; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $THREADS; batch $BATCH x length" \
  "$LENGTH; timed steps ${STEPS_SET:-2 at base, 5 otherwise}; dropout $DROPOUT"

# Texts of >= LENGTH word pieces: English sentences of fra.txt joined 100 at a time; labels alternate.
# $1 timed steps: many.tsv holds $1 + 1 batches.
make_texts() {
  awk -F'\t' -v n=$((BATCH * ($1 + 1))) '
    { line = line (k++ ? " " : "") $1 } k == 100 { print line "\t" (r++ % 2); line = ""; k = 0; if (r == n) exit }' \
    "$DATA/fra-eng/fra.txt" > "$OUT/texts.tsv"
  [ "$(wc -l < "$OUT/texts.tsv")" -eq $((BATCH * ($1 + 1))) ] || { echo "not enough text in $DATA" >&2; exit 1; }
  make_data $((BATCH * ($1 + 1))) "$OUT/many.tsv"
}
make_data() { { printf 'text\tlabel\n'; head -n "$1" "$OUT/texts.tsv"; } > "$2"; }
PRECISIONS=fp32
EMULATED=0
# bf16 products need AVX512_BF16 or AMX (ops::has_bf16_gemm); elsewhere tfm refuses --precision bf16, so skip it
# (or emulate it for its memory: EMULATE_BF16=1).
if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then PRECISIONS="fp32 bf16"
elif [ "${EMULATE_BF16:-0}" = 1 ]; then
  PRECISIONS="fp32 bf16" EMULATED=1
  echo "bf16: emulated (this CPU has neither AVX512_BF16 nor AMX): its peak RSS is measured, its speed is not"
else echo "bf16: skipped (this CPU has neither AVX512_BF16 nor AMX; tfm refuses --precision bf16 here;" \
  "EMULATE_BF16=1 measures its memory)"; fi

# tfm finetune on $1 (model) with data $2 and precision $3: "step_seconds peak_kb" (the median step after the
# first, from its summary line).
tfm_run() {
  local extra=()
  [ "$3" != fp32 ] && extra=(--precision "$3")
  rm -rf "$OUT/ft"
  TFM_EMULATE_BF16=$EMULATED /usr/bin/time -o "$OUT/time.txt" -f '%M' "$TFM" finetune --task classify --model "$1" --train "$2" --out "$OUT/ft" \
    --epochs 1 --batch-size "$BATCH" --max-length "$LENGTH" --lr 5e-5 --threads "$THREADS" --no-progress \
    "${extra[@]}" 2> "$OUT/ft.err" || { cat "$OUT/ft.err" >&2; exit 1; }
  local step
  step=$(sed -n 's/.*, \([0-9.]*\) s a step after the first (median).*/\1/p' "$OUT/ft.err")
  [ -n "$step" ] || { echo "no step time in tfm's summary:" >&2; cat "$OUT/ft.err" >&2; exit 1; }
  echo "$step $(cat "$OUT/time.txt")"
}

for size in ${SIZE//,/ }; do
  case $size in
    base) H=768 NL=12 NH=12 I=3072 ;;
    minilm) H=384 NL=12 NH=12 I=1536 ;;
    tiny) H=64 NL=2 NH=2 I=128 ;;
    *) echo "unknown SIZE '$size' (base, minilm, tiny)" >&2; exit 1 ;;
  esac
  STEPS=${STEPS_SET:-$([ "$size" = base ] && echo 2 || echo 5)}
  make_texts "$STEPS"
  cat > "$OUT/config.json" <<EOF
{"architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522, "hidden_size": $H,
 "num_hidden_layers": $NL, "num_attention_heads": $NH, "intermediate_size": $I, "hidden_act": "gelu",
 "hidden_dropout_prob": $DROPOUT, "attention_probs_dropout_prob": $DROPOUT, "max_position_embeddings": 512,
 "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0}
EOF
  rm -rf "$OUT/$size"
  "$TFM" encode --model "$DATA/bert-base-uncased" --config "$OUT/config.json" --init random --seed 1 \
    --save "$OUT/$size" "hello" > /dev/null 2>&1
  for prec in $PRECISIONS; do : > "$OUT/rounds_$prec.txt"; done
  for round in $(seq "$REPEATS"); do
    torch_json=$(/usr/bin/time -o "$OUT/torch_time.txt" -f '%M' $PY bench/finetune_pytorch.py "$OUT/$size" \
      --threads "$THREADS" --batch "$BATCH" --length "$LENGTH" --steps "$STEPS" --warmup 1)
    torch_sps=$($PY -c "import json,statistics,sys; print(1 / statistics.median(json.loads(sys.argv[1])['step_seconds']))" \
      "$torch_json")
    torch_kb=$(cat "$OUT/torch_time.txt")
    for prec in $PRECISIONS; do
      read -r step kb <<< "$(tfm_run "$OUT/$size" "$OUT/many.tsv" "$prec")"
      # One line a round: tfm steps/s, its peak kB, PyTorch's steps/s and peak kB.
      $PY -c "import sys; print(1 / max(float(sys.argv[1]), 1e-9), *sys.argv[2:])" "$step" "$kb" "$torch_sps" \
        "$torch_kb" >> "$OUT/rounds_$prec.txt"
      if [ "$REPEATS" -gt 1 ]; then
        label=$prec
        [ "$EMULATED$prec" = 1bf16 ] && label="bf16 (emulated: the speed is no figure)"
        awk -v s="$size" -v p="$label" -v r="$round" 'END { printf "%-7s %s  round %d: tfm %.3f steps/s, pytorch fp32 %.3f steps/s = %.2fx; peak RSS %.2fx\n", s, p, r, $1, $3, $1 / $3, $2 / $4 }' \
          "$OUT/rounds_$prec.txt"
      fi
    done
  done
  for prec in $PRECISIONS; do
    $PY - "$size" "$prec" "$OUT/rounds_$prec.txt" "$EMULATED" <<'PYEOF'
import statistics, sys
size, prec, path, emulated = sys.argv[1:]
emulated = emulated == "1" and prec == "bf16"
rows = [[float(v) for v in line.split()] for line in open(path)]
sps = statistics.median(r[0] for r in rows)
tsps = statistics.median(r[2] for r in rows)
ratio = statistics.median(r[0] / r[2] for r in rows)
kb, tkb = max(r[1] for r in rows), max(r[3] for r in rows)
mem = kb / tkb
goal = 3.0 if prec == "bf16" else 2.0
what = f"median of {len(rows)} rounds: " if len(rows) > 1 else ""
speed = (f"tfm emulated (no speed figure)  pytorch fp32 {tsps:7.3f} steps/s" if emulated else
         f"tfm {sps:7.3f} steps/s  pytorch fp32 {tsps:7.3f} steps/s  ratio {ratio:5.2f}x "
         f"(goal >= {goal:.0f}x: {'met' if ratio >= goal else 'not met'})")
print(f"{size:<7} {prec}  {what}{speed}  peak RSS tfm {kb / 1024:7.0f} MB  "
      f"pytorch {tkb / 1024:7.0f} MB  ratio {mem:4.2f}x (goal <= 0.5x: {'met' if mem <= 0.5 else 'not met'})")
PYEOF
  done
done
