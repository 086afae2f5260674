#!/usr/bin/env bash
# Translation against the PyTorch reference generate (issue 23's benchmark), one invocation, same random weights:
# an OPUS-MT-size Marian folder (d_model 512, 6 + 6 layers, vocabulary 59,514, N(0, 0.02) weights, seed 0; HF
# tensor names; bench/marian_pytorch.py make-folder) translating N (500) English sentences of fra-eng with beam 4,
# THREADS (2) threads, at most MAX_NEW (64) target tokens each (random weights rarely end a sentence):
#   - `tfm translate --beam 4 --input ... --output ...`, whole process (load, tokenize, decode, write), per --dtype
#     in DTYPES (fp32 int8): wall time and peak RSS from /usr/bin/time;
#   - bench/marian_pytorch.py generate: the same folder in PyTorch (batched beam search with a key/value cache,
#     torch.inference_mode, torch threads = THREADS, OpenBLAS under it via bench/torch_blas.py), whole process.
# Prints target tokens/s and peak RSS of each, and the ratios against the issue's goals (fp32 >= 4x, int8 >= 6x
# the PyTorch tokens/s; peak RSS <= 0.3x).
#
# Needs `tfm translate` to load Marian folders (issue 23 item 1). Run it on an idle machine: timings on the shared
# 2-core development machine are not valid.
# Usage: bench/translate_peers.sh     Environment: N, THREADS, MAX_NEW, DTYPES, BUILD_DIR (build), KEEP=1,
#        TFM_DATA_DIR (../shared/data).
set -euo pipefail

cd "$(dirname "$0")/.."
bash bench/ensure_openblas.sh
N=${N:-500}
THREADS=${THREADS:-2}
MAX_NEW=${MAX_NEW:-64}
DTYPES=${DTYPES:-fp32 int8}
BUILD_DIR=${BUILD_DIR:-build}
DATA=${TFM_DATA_DIR:-../shared/data}
PY=/usr/bin/python3
[[ -x "$BUILD_DIR/tfm" ]] || { cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build "$BUILD_DIR" -j2 --target tfm; }

tmp=$(mktemp -d /tmp/tfm-translate-peers.XXXXXX)
if [[ "${KEEP:-0}" == 1 ]]; then echo "keeping $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi
export OMP_NUM_THREADS=$THREADS GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# English side of fra-eng: the SentencePiece training text and the N sentences (every 97th line, so lengths vary).
cut -f1 "$DATA/fra-eng/fra.txt" > "$tmp/en.txt"
awk -v n="$N" 'NR % 97 == 0 && c < n { print; c++ }' "$tmp/en.txt" > "$tmp/input.txt"
echo "== random OPUS-MT-size Marian folder -> $tmp/marian" >&2
$PY bench/marian_pytorch.py make-folder "$tmp/marian" "$tmp/en.txt"

measure() {  # name, command...: one JSON line {name, seconds, peak_rss_mb}
  local name=$1; shift
  /usr/bin/time -f '%e %M' -o "$tmp/time.$name" "$@" > "$tmp/stdout.$name" || { cat "$tmp/time.$name" >&2; exit 1; }
  read -r sec kb < "$tmp/time.$name"
  echo "{\"name\": \"$name\", \"seconds\": $sec, \"peak_rss_mb\": $((kb / 1024))}"
}
results=()
for dt in $DTYPES; do
  results+=("$(measure "tfm_$dt" "$BUILD_DIR/tfm" translate --model "$tmp/marian" --beam 4 --dtype "$dt" \
                 --threads "$THREADS" --max-steps "$MAX_NEW" --input "$tmp/input.txt" --output "$tmp/out.$dt" -q \
                 --progress 2> "$tmp/progress.$dt")")
  # The progress line's count of generated tokens ("500 sentences, ..., 31234 target tokens, ...").
  tokens=$(tail -1 "$tmp/progress.$dt" | sed -n 's/.* \([0-9][0-9]*\) target tokens.*/\1/p')
  results[-1]="${results[-1]%\}}, \"target_tokens\": $tokens}"
done
results+=("$(measure pytorch $PY bench/marian_pytorch.py generate "$tmp/marian" "$tmp/input.txt" "$tmp/out.torch" \
               --beam 4 --max-new-tokens "$MAX_NEW")")
torch_json=$(tail -1 "$tmp/stdout.pytorch")
results[-1]="${results[-1]%\}}, \"target_tokens\": $($PY -c 'import json,sys; print(json.loads(sys.argv[1])["target_tokens"])' "$torch_json")}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
printf '%s\n' "${results[@]}" | $PY -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
ref = next(r for r in rows if r["name"] == "pytorch")
ref_tps = ref["target_tokens"] / ref["seconds"]
print("%-10s %8s %8s %10s %8s %9s %6s" % ("run", "seconds", "tokens", "tokens/s", "x torch", "RSS MiB", "x RSS"))
goal = {"tfm_fp32": 4.0, "tfm_int8": 6.0}
for r in rows:
    tps = r["target_tokens"] / r["seconds"]
    print("%-10s %8.2f %8d %10.1f %8.2f %9d %6.2f" % (r["name"], r["seconds"], r["target_tokens"], tps, tps / ref_tps,
                                                   r["peak_rss_mb"], r["peak_rss_mb"] / ref["peak_rss_mb"]))
for name, g in goal.items():
    r = next((x for x in rows if x["name"] == name), None)
    if r:
        x = r["target_tokens"] / r["seconds"] / ref_tps
        rss = r["peak_rss_mb"] / ref["peak_rss_mb"]
        print("%s: %.2fx tokens/s (goal >= %.0fx: %s), %.2fx peak RSS (goal <= 0.3x: %s)" % (
            name, x, g, "met" if x >= g else "NOT met", rss, "met" if rss <= 0.3 else "NOT met"))
'
