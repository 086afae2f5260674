#!/usr/bin/env bash
# A realistic length mix through the encoder (issue 24 item 2: unpadded batches): BATCHES batches of 32
# sentences of 5-128 tokens, on random BERT-base weights (bench/bert_pytorch.py make-weights, as
# bench/encoder_peers.sh), THREADS threads:
#   - transformer.cpp fp32 / bf16 / int8 as `tfm embed` runs them (EncoderModel::forward_unpadded: every GEMM,
#     LayerNorm and activation on the real tokens only, attention per sentence), and fp32 on the padded batch
#     (EncoderModel::forward with attention_mask) for the gain of unpadding alone;
#   - ONNX Runtime fp32 (npm onnxruntime-node) fed the padded batch with its attention_mask (the model exported
#     by Debian's torch with both inputs: bench/peers_pytorch.py export --with-mask).
# The texts: Multi30k train.en and fra-eng English sentences (../shared/data), shuffled with a fixed seed; a
# text joins 1 to 8 consecutive sentences (uniform count) so that lengths spread over 5-128 tokens; tokenized by
# `tfm tokenize` with bert-base-uncased's tokenizer (special tokens included, --max-length 128), texts under 5
# tokens dropped. Every engine runs the same batches in the same order; one rep is one pass over all batches.
# Prints the lengths' summary, one line per engine (ms per pass, ms per batch, ratio to ONNX Runtime) and the
# issue-24 targets (fp32 <= 0.6x ORT, bf16 <= 0.35x, int8 <= 0.2x) as met / NOT met.
#
# Usage: bench/length_mix.sh     (from the repository root; a few minutes on 2 idle cores)
# Environment: THREADS (2), REPS (5), WARMUP (1), BATCHES (20), BUILD_DIR (build), WEIGHTS_DIR (reuse a
#              make-weights folder), NODE_DIR (node_modules with onnxruntime-node; default /tmp/tfm-ort),
#              TFM_DATA_DIR (../shared/data), KEEP=1 keeps the temp folder, NICE (as encoder_peers.sh).
# The no-AMX path on an AMX machine: ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (oneDNN's GEMMs); TFM_ISA=avx2 selects
# our kernels' AVX2 copies (ops/isa.h).
set -euo pipefail

cd "$(dirname "$0")/.."
THREADS=${THREADS:-2}
REPS=${REPS:-5}
WARMUP=${WARMUP:-1}
BATCHES=${BATCHES:-20}
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

tmp=$(mktemp -d /tmp/tfm-lenmix.XXXXXX)
if [[ "${KEEP:-0}" == 1 ]]; then echo "keeping $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

echo "== random BERT-base weights -> $tmp/bert" >&2
if [[ -n "${WEIGHTS_DIR:-}" ]]; then mkdir -p "$tmp/bert" && cp "$WEIGHTS_DIR"/config.json "$WEIGHTS_DIR"/model.safetensors "$tmp/bert/"
else $PY bench/bert_pytorch.py make-weights "$tmp/bert"; fi
cp "$DATA/bert-base-uncased/vocab.txt" "$DATA/bert-base-uncased/tokenizer_config.json" "$tmp/bert/"

echo "== length mix: $BATCHES batches of 32" >&2
$PY - "$DATA" "$tmp/texts.txt" "$((BATCHES * 40))" <<'EOF'
import gzip, random, sys
data, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sents = [l.strip() for l in gzip.open(data + "/multi30k/train.en.gz", "rt", encoding="utf-8") if l.strip()]
sents += [l.split("\t")[0].strip() for l in open(data + "/fra-eng/fra.txt", encoding="utf-8") if l.strip()]
rng = random.Random(24)
rng.shuffle(sents)
texts, at = [], 0
for _ in range(n):
    k = rng.randint(1, 8)
    texts.append(" ".join(sents[at:at + k]))
    at += k
open(out, "w", encoding="utf-8").write("\n".join(texts) + "\n")
EOF
"$BUILD_DIR/tfm" tokenize --model "$tmp/bert" --input "$tmp/texts.txt" --max-length 128 > "$tmp/tok.jsonl"
$PY - "$tmp/tok.jsonl" "$tmp/batches.txt" "$((BATCHES * 32))" <<'EOF'
import json, sys
rows = [json.loads(l)["input_ids"] for l in open(sys.argv[1])]
rows = [r for r in rows if len(r) >= 5][: int(sys.argv[3])]
open(sys.argv[2], "w").write("".join(" ".join(map(str, r)) + "\n" for r in rows))
lens = sorted(len(r) for r in rows)
q = lambda p: lens[min(len(lens) - 1, int(p * len(lens)))]
real = sum(lens)
padded = sum(len(rows[i:i + 32]) * max(map(len, rows[i:i + 32])) for i in range(0, len(rows), 32))
print(json.dumps(dict(kind="lengths", sentences=len(rows), min=lens[0], p50=q(0.5), p90=q(0.9), max=lens[-1],
                      real_tokens=real, padded_tokens=padded, padding_share=round(1 - real / padded, 3))))
EOF

export OMP_NUM_THREADS=$THREADS
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
run=()
[[ -n "${NICE:-}" ]] && run=(nice -n "$NICE")
: > "$tmp/results.jsonl"
for dt in fp32 bf16 int8; do
  echo "== transformer.cpp $dt unpadded" >&2
  "${run[@]}" "$BUILD_DIR/bench_encoder" "$tmp/bert" --threads "$THREADS" --warmup "$WARMUP" --reps "$REPS" --dtype "$dt" \
    --batches "$tmp/batches.txt" | grep '"length_mix"' | tee -a "$tmp/results.jsonl" >&2
done
echo "== transformer.cpp fp32 padded" >&2
"${run[@]}" "$BUILD_DIR/bench_encoder" "$tmp/bert" --threads "$THREADS" --warmup "$WARMUP" --reps "$REPS" --dtype fp32 \
  --batches "$tmp/batches.txt" --padded | grep '"length_mix"' | tee -a "$tmp/results.jsonl" >&2

echo "== ONNX Runtime fp32 padded" >&2
$PY bench/peers_pytorch.py export "$tmp/bert" "$tmp/bert.onnx" --with-mask >&2
NODE_PATH="$NODE_DIR/node_modules" "${run[@]}" node bench/ort_bench.js "$tmp/bert.onnx" "$THREADS" "$WARMUP" "$REPS" \
  --batches "$tmp/batches.txt" 32 | grep '"length_mix"' | tee -a "$tmp/results.jsonl" >&2

$PY - "$tmp/results.jsonl" <<'EOF'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
ort = next(r for r in rs if r.get("impl") == "onnxruntime")
targets = {"fp32": 0.6, "bf16": 0.35, "int8": 0.2}
print(f"{'engine':<34} {'ms/pass':>10} {'ms/batch':>9} {'x ORT':>7}  target")
for r in rs:
    name = ("onnxruntime" if r.get("impl") == "onnxruntime" else "transformer.cpp") + f" {r['dtype']} {r['mode']}"
    ratio = r["median_ms"] / ort["median_ms"]
    t = ""
    if r.get("impl") != "onnxruntime" and r["mode"] == "unpadded":
        goal = targets[r["dtype"]]
        t = f"<= {goal}x: {'met' if ratio <= goal else 'NOT met'}"
    print(f"{name:<34} {r['median_ms']:>10.1f} {r['median_ms'] / r['batches']:>9.2f} {ratio:>7.3f}  {t}")
EOF
echo
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, threads $THREADS;" \
  "load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg) (above $THREADS: other processes competed)"
