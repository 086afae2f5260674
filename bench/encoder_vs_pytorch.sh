#!/usr/bin/env bash
# Encoder inference, transformer.cpp vs PyTorch, on random BERT-base weights (12 layers, hidden 768, 12 heads,
# intermediate 3072, vocab 30522, 512 positions; fp32). One invocation does everything:
#   1. writes random Hugging Face-named weights (model.safetensors + config.json) to a temporary folder,
#   2. runs build-bench/bench_encoder on them (OpenBLAS sgemm ceiling first, then forward per shape),
#   3. runs the PyTorch reference BertModelRef (reference/torch/reference_modules.py) on the same file,
#   4. prints the comparison table (markdown).
#
# Usage: bench/encoder_vs_pytorch.sh            (from the repository root)
# Environment: THREADS (2), REPS (10), WARMUP (2), SHAPES (1x128,8x128,1x512), BUILD_DIR (build),
#              BREAKDOWN=1 to add the per-op time breakdown of our forward, KEEP=1 to keep the temporary folder,
#              NICE=-15 to run both benchmarks at that priority (negative needs root) on a machine shared with
#              other work: a 2-thread run on 2 busy cores is otherwise dominated by preemption.
# Needs Debian's /usr/bin/python3 with python3-torch and numpy. Takes about 2 minutes on 2 cores.
set -euo pipefail

cd "$(dirname "$0")/.."
bash bench/ensure_openblas.sh  # the PyTorch peer on OpenBLAS, one BLAS thread under its threads (bench/torch_blas.py)
THREADS=${THREADS:-2}
REPS=${REPS:-10}
WARMUP=${WARMUP:-2}
SHAPES=${SHAPES:-1x128,8x128,1x512}
BUILD_DIR=${BUILD_DIR:-build}
PY=/usr/bin/python3

if [[ ! -x "$BUILD_DIR/bench_encoder" ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j2 --target bench_encoder
fi

tmp=$(mktemp -d /tmp/tfm-bench-encoder.XXXXXX)
if [[ "${KEEP:-0}" == 1 ]]; then echo "keeping $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi

start=$(date +%s)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== writing random BERT-base weights to $tmp/bert" >&2
$PY bench/bert_pytorch.py make-weights "$tmp/bert"

run=()
[[ -n "${NICE:-}" ]] && run=(nice -n "$NICE")
extra=()
[[ "${BREAKDOWN:-0}" == 1 ]] && extra+=(--breakdown)
echo "== transformer.cpp (bench_encoder, $THREADS threads)" >&2
# OMP_NUM_THREADS as well, so the OpenMP runtime never starts more threads than the cores asked for.
OMP_NUM_THREADS=$THREADS "${run[@]}" "$BUILD_DIR/bench_encoder" "$tmp/bert" --threads "$THREADS" --warmup "$WARMUP" \
  --reps "$REPS" --shapes "$SHAPES" --sgemm "${extra[@]}" | tee "$tmp/ours.jsonl" >&2

echo "== PyTorch (BertModelRef, $THREADS threads)" >&2
OMP_NUM_THREADS=$THREADS "${run[@]}" $PY bench/bert_pytorch.py bench "$tmp/bert" --threads "$THREADS" --warmup "$WARMUP" \
  --reps "$REPS" --shapes "$SHAPES" | tee "$tmp/torch.jsonl" >&2

echo >&2
$PY bench/bert_pytorch.py table "$tmp/ours.jsonl" "$tmp/torch.jsonl"
echo
echo "priority: nice ${NICE:-0}; total benchmark time: $(( $(date +%s) - start )) s; load average (1, 5, 15 min) before: $load_before," \
  "after: $(cut -d' ' -f1-3 /proc/loadavg) (on $(nproc) CPUs; a load above $THREADS means other processes competed)"
