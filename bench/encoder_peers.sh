#!/usr/bin/env bash
# Encoder inference against its peers, one invocation, on the same random BERT-base weights (12 layers, hidden
# 768, PyTorch default init, seed 0), THREADS threads, shapes [B, L] in SHAPES:
#   - transformer.cpp fp32 / bf16 / int8 (build/bench_encoder --dtype, one process each so peak RSS is per dtype),
#     plus the oneDNN GEMM ceilings (1024x3072x768: dnnl_sgemm and packed matmul fp32 / bf16 / int8);
#   - ONNX Runtime fp32 (npm onnxruntime-node, installed into NODE_DIR with --ignore-scripts: CPU only) on the
#     model exported by Debian's torch (torch.onnx.export, opset 14);
#   - PyTorch 1.13 fp32, bf16 (torch.autocast) and dynamic int8 (quantize_dynamic, onednn engine);
#   - whole-process `tfm encode` of one sentence per dtype (load + tokenize + forward; wall time, peak RSS).
# Prints the table of bench/peers_table.py (ms, ratios to ONNX Runtime, GFLOP/s against the measured fp32
# ceiling, peak RSS) and the issue-9 targets as met / NOT met.
#
# Usage: bench/encoder_peers.sh          (from the repository root; about 5-10 minutes on 2 idle cores)
#        bench/encoder_peers.sh --family bert,roberta,mpnet,modernbert   (or --family all)
#   Per family, a random checkpoint with its real tensor names (bench/family_peers.py make-weights; SIZE=base,
#   or SIZE=tiny to check that the run works) through our forward (bench_encoder fp32 / bf16 / int8) and ONNX
#   Runtime fp32 on the family's PyTorch reference exported with torch.onnx (bench/family_peers.py export), THREADS
#   threads, in one run; a family without a reference in scripts/ yet (distilbert) is reported as skipped.
#   Prints bench/family_peers.py's table (median ms, ratio to ONNX Runtime). SHAPES defaults to 1x128,8x128.
#   modernbert (base: 22 layers, hidden 768, GeGLU 1152, vocabulary 50368, global attention every 3rd layer,
#   local windows of 128) also runs one 1x8192 forward per dtype and prints its peak RSS against the weight bytes
#   (model.safetensors, fp32; goal: below 2x).
# Environment: THREADS (2), REPS (10), WARMUP (2), SHAPES (1x128,8x128,1x512,32x32), BUILD_DIR (build),
#              WEIGHTS_DIR (reuse config.json + model.safetensors from `bert_pytorch.py make-weights DIR`),
#              NODE_DIR (a folder with node_modules/onnxruntime-node; default: installed into /tmp/tfm-ort),
#              TFM_DATA_DIR (../shared/data; its bert-base-uncased tokenizer files), KEEP=1 keeps the temp folder,
#              TORCH_MODES (PyTorch's modes; default fp32 bf16 int8, without bf16 on a CPU lacking AVX512_BF16/AMX),
#              BREAKDOWN=1 adds bench_encoder's per-op breakdown of each dtype's forward (kind "breakdown" lines),
#              NICE=-15 runs every measured process at that priority (negative needs root): on 2 cores shared with
#              compiles a 2-thread run is otherwise dominated by preemption.
set -euo pipefail

cd "$(dirname "$0")/.."
families=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --family)
      [[ $# -ge 2 ]] || { echo "encoder_peers.sh: --family needs a name (bert, roberta, distilbert, mpnet, modernbert, all)" >&2; exit 2; }
      families=$2; shift 2 ;;
    --family=*) families=${1#--family=}; shift ;;
    *) echo "encoder_peers.sh: unknown argument '$1' (usage: encoder_peers.sh [--family NAME[,NAME...] | all])" >&2
       exit 2 ;;
  esac
done
[[ "$families" == all ]] && families=bert,roberta,distilbert,mpnet,modernbert
bash bench/ensure_openblas.sh  # the PyTorch peer on OpenBLAS, one BLAS thread under its threads (bench/torch_blas.py)
THREADS=${THREADS:-2}
REPS=${REPS:-10}
WARMUP=${WARMUP:-2}
user_shapes=${SHAPES:-}
SHAPES=${SHAPES:-1x128,8x128,1x512,32x32}
BUILD_DIR=${BUILD_DIR:-build}
DATA=${TFM_DATA_DIR:-../shared/data}
NODE_DIR=${NODE_DIR:-/tmp/tfm-ort}
PY=/usr/bin/python3

if [[ ! -x "$BUILD_DIR/bench_encoder" || ! -x "$BUILD_DIR/tfm" ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j2 --target bench_encoder tfm
fi
if [[ ! -d "$NODE_DIR/node_modules/onnxruntime-node" ]]; then
  echo "== installing onnxruntime-node into $NODE_DIR" >&2
  mkdir -p "$NODE_DIR"
  (cd "$NODE_DIR" && npm install --silent --no-audit --no-fund --ignore-scripts onnxruntime-node >&2)
fi

tmp=$(mktemp -d /tmp/tfm-peers.XXXXXX)
if [[ "${KEEP:-0}" == 1 ]]; then echo "keeping $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi
start=$(date +%s)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

if [[ -n "$families" ]]; then
  SIZE=${SIZE:-base}
  SHAPES=${user_shapes:-1x128,8x128}
  export OMP_NUM_THREADS=$THREADS GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
  done_families=()
  for fam in ${families//,/ }; do
    echo "== $fam ($SIZE): random weights -> $tmp/$fam" >&2
    rc=0
    $PY bench/family_peers.py make-weights "$fam" "$tmp/$fam" --size "$SIZE" || rc=$?
    if [[ $rc == 3 ]]; then done_families+=("$fam"); continue; fi  # no reference yet: the table says skipped
    [[ $rc == 0 ]] || exit $rc
    for dt in fp32 bf16 int8; do
      echo "== $fam: transformer.cpp $dt" >&2
      "$BUILD_DIR/bench_encoder" "$tmp/$fam" --threads "$THREADS" --warmup "$WARMUP" --reps "$REPS" --shapes "$SHAPES" \
        --dtype "$dt" | tee "$tmp/ours_${fam}_$dt.jsonl" >&2
    done
    echo "== $fam: ONNX Runtime fp32" >&2
    $PY bench/family_peers.py export "$fam" "$tmp/$fam" "$tmp/$fam.onnx" >&2
    vocab=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$tmp/$fam/config.json")
    NODE_PATH="$NODE_DIR/node_modules" node bench/ort_bench.js "$tmp/$fam.onnx" "$THREADS" "$WARMUP" "$REPS" "$SHAPES" \
      "$vocab" | tee "$tmp/ort_$fam.jsonl" >&2
    if [[ $fam == modernbert ]]; then  # long inputs: one 8,192-token forward per dtype, peak RSS against the weights
      for dt in fp32 bf16 int8; do
        echo "== $fam: transformer.cpp $dt, 1x8192 (peak memory)" >&2
        "$BUILD_DIR/bench_encoder" "$tmp/$fam" --threads "$THREADS" --warmup 0 --reps 1 --shapes 1x8192 --dtype "$dt" \
          | tee "$tmp/long_${fam}_$dt.jsonl" >&2
      done
    fi
    rm -f "$tmp/$fam.onnx" "$tmp/$fam/model.safetensors"  # the next family's files fit in /tmp
    done_families+=("$fam")
  done
  echo >&2
  $PY bench/family_peers.py table "$tmp" "$(IFS=,; echo "${done_families[*]}")"
  echo
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $THREADS threads, size $SIZE;" \
    "total $(( $(date +%s) - start )) s; load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi

echo "== random BERT-base weights -> $tmp/bert" >&2
if [[ -n "${WEIGHTS_DIR:-}" ]]; then mkdir -p "$tmp/bert" && cp "$WEIGHTS_DIR"/config.json "$WEIGHTS_DIR"/model.safetensors "$tmp/bert/"
else $PY bench/bert_pytorch.py make-weights "$tmp/bert"; fi
cp "$DATA/bert-base-uncased/vocab.txt" "$DATA/bert-base-uncased/tokenizer_config.json" "$tmp/bert/"
export OMP_NUM_THREADS=$THREADS
# tfm sets this itself (tools/tfm/main.cpp, BENCHMARKS.md "Threads waiting at barriers"); bench_encoder and
# PyTorch (also libgomp) get it here. With libgomp's default spin a run on shared cores was 5-10x slower.
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
run=()
[[ -n "${NICE:-}" ]] && run=(nice -n "$NICE")

for dt in fp32 bf16 int8; do
  echo "== transformer.cpp $dt" >&2
  extra=()
  [[ $dt == fp32 ]] && extra+=(--sgemm)
  [[ "${BREAKDOWN:-0}" == 1 ]] && extra+=(--breakdown)  # per-op time of the real forward, per dtype
  "${run[@]}" "$BUILD_DIR/bench_encoder" "$tmp/bert" --threads "$THREADS" --warmup "$WARMUP" --reps "$REPS" --shapes "$SHAPES" \
    --dtype "$dt" "${extra[@]}" | tee "$tmp/ours_$dt.jsonl" >&2
done

echo "== ONNX Runtime fp32" >&2
$PY bench/peers_pytorch.py export "$tmp/bert" "$tmp/bert.onnx" >&2
NODE_PATH="$NODE_DIR/node_modules" "${run[@]}" node bench/ort_bench.js "$tmp/bert.onnx" "$THREADS" "$WARMUP" "$REPS" "$SHAPES" 30522 \
  | tee "$tmp/ort.jsonl" >&2

# PyTorch's bf16 without AVX512_BF16 / AMX is emulated (BERT-base [1, 128]: 13.9 s against 2.1 s fp32 on a Zen 3):
# not a peer worth the minutes, so it is left out there unless TORCH_MODES names it.
torch_modes="fp32 bf16 int8"
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo || torch_modes="fp32 int8"
for mode in ${TORCH_MODES:-$torch_modes}; do
  echo "== PyTorch $mode" >&2
  "${run[@]}" $PY bench/peers_pytorch.py bench "$tmp/bert" --mode "$mode" --threads "$THREADS" --warmup "$WARMUP" --reps "$REPS" \
    --shapes "$SHAPES" | tee "$tmp/torch_$mode.jsonl" >&2
done

echo "== whole-process tfm encode" >&2
sentence="The quick brown fox jumps over the lazy dog near the river bank."
for dt in fp32 bf16 int8; do
  "${run[@]}" /usr/bin/time -o "$tmp/time_$dt.txt" -f '%e %M' "$BUILD_DIR/tfm" encode --model "$tmp/bert" --text "$sentence" \
    --dtype "$dt" --threads "$THREADS" > "$tmp/encode_$dt.txt"
  L=$(grep '^input_ids:' "$tmp/encode_$dt.txt" | head -1 | tr -cd ',' | wc -c)
  L=$((L + 1))
  read -r wall kb < "$tmp/time_$dt.txt"
  # The forward alone on the same [1, L], same process kind, for the ratio.
  fwd=$("${run[@]}" "$BUILD_DIR/bench_encoder" "$tmp/bert" --threads "$THREADS" --warmup 2 --reps 10 --shapes "1x$L" --dtype "$dt" \
        | grep '"kind":"encoder"' | sed 's/.*"median_ms":\([0-9.]*\).*/\1/')
  echo "{\"kind\":\"process\",\"dtype\":\"$dt\",\"L\":$L,\"wall_s\":$wall,\"peak_rss_mb\":$(echo "$kb / 1024" | bc -l),\"forward_ms\":$fwd}" \
    | tee -a "$tmp/process.jsonl" >&2
done

echo >&2
$PY bench/peers_table.py "$tmp"
echo
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, oneDNN ISA $(grep -o '"isa":"[a-z0-9_]*"' "$tmp/ours_fp32.jsonl" | head -1);" \
  "total $(( $(date +%s) - start )) s; load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)" \
  "(a load above $THREADS means other processes competed for the cores)"
