#!/usr/bin/env bash
# Batch inference over ranks (issue 24 item 6): `tfm embed` of N lines of fra-eng (the English side, every k-th
# line so that short and long sentences are both there, in the file's length-sorted order), 1 rank x 1 thread
# against `mpirun -np RANKS` x 1 thread, on a random all-MiniLM-L6-v2-sized BERT (6 layers, hidden 384, 12 heads,
# bert-base-uncased's vocabulary; PyTorch's default initialisation from a fixed seed), mean pooling + normalize.
# Each rank embeds a contiguous run of whole chunks (--chunk-lines, balanced by bytes), so the outputs must be
# byte-identical; the script checks it. Prints both wall times (whole process: load + embed + write), the
# speed-up and the goal (>= 1.8x for 2 ranks).
#   bench/mpi_infer.sh              # N=20000, RANKS=2 (about a minute for one rank on an idle 2-core machine)
#   N=500 bench/mpi_infer.sh        # a quick check that it runs
# Environment: N (20000), RANKS (2), BUILD_DIR (build), TFM_DATA_DIR (../shared/data), KEEP=1 keeps the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-20000}
RANKS=${RANKS:-2}
TFM=$(realpath "${BUILD_DIR:-build}/tfm")
DATA=${TFM_DATA_DIR:-$(cd .. && pwd)/shared/data}
[ -x "$TFM" ] || { echo "build first: make build" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)" >&2; exit 1; }
OUT=$(mktemp -d /tmp/tfm-mpi-infer.XXXXXX)
if [[ "${KEEP:-0}" == 1 ]]; then echo "keeping $OUT" >&2; else trap 'rm -rf "$OUT"' EXIT; fi
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The model: BERT config of all-MiniLM-L6-v2's size, random weights written as safetensors by numpy.
mkdir -p "$OUT/model"
cp "$DATA/bert-base-uncased/vocab.txt" "$DATA/bert-base-uncased/tokenizer_config.json" "$OUT/model/"
/usr/bin/python3 - "$OUT/model" <<'PY'
import json, struct, sys
import numpy as np
d = sys.argv[1]
c = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 384, "num_hidden_layers": 6,
     "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu", "vocab_size": 30522,
     "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0}
json.dump(c, open(d + "/config.json", "w"), indent=2)
rng = np.random.default_rng(0)
H, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
t = {}
def lin(name, o, i):
    b = 1 / np.sqrt(i)
    t[name + ".weight"] = rng.uniform(-b, b, (o, i)); t[name + ".bias"] = rng.uniform(-b, b, (o,))
def ln(name):
    t[name + ".weight"] = np.ones(H); t[name + ".bias"] = np.zeros(H)
t["embeddings.word_embeddings.weight"] = rng.standard_normal((V, H))
t["embeddings.position_embeddings.weight"] = rng.standard_normal((c["max_position_embeddings"], H))
t["embeddings.token_type_embeddings.weight"] = rng.standard_normal((2, H))
ln("embeddings.LayerNorm")
for l in range(c["num_hidden_layers"]):
    p = f"encoder.layer.{l}."
    for n in ("query", "key", "value"): lin(p + "attention.self." + n, H, H)
    lin(p + "attention.output.dense", H, H); ln(p + "attention.output.LayerNorm")
    lin(p + "intermediate.dense", I, H); lin(p + "output.dense", H, I); ln(p + "output.LayerNorm")
header, off, blobs = {}, 0, []
for k, v in t.items():
    b = np.ascontiguousarray(v, dtype="<f4").tobytes()
    header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h)
    for b in blobs: f.write(b)
PY

total=$(wc -l < "$DATA/fra-eng/fra.txt")
step=$(( total / N > 0 ? total / N : 1 ))
awk -F'\t' -v s="$step" -v n="$N" 'NR % s == 0 { print $1; if (++c == n) exit }' "$DATA/fra-eng/fra.txt" > "$OUT/in.txt"
echo "input: $(wc -l < "$OUT/in.txt") lines ($(wc -c < "$OUT/in.txt") bytes), every ${step}th line of fra-eng"

export OMP_NUM_THREADS=1
args=(embed --model "$OUT/model" --pooling mean --normalize --threads 1 -q -i "$OUT/in.txt")
secs() { /usr/bin/python3 -c 'import sys, subprocess, time; t = time.perf_counter(); subprocess.run(sys.argv[1:], check=True); print(f"{time.perf_counter() - t:.3f}")' "$@"; }
one=$(secs "$TFM" "${args[@]}" -o "$OUT/one.npy")
many=$(secs mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS" -x OMP_NUM_THREADS \
       "$TFM" "${args[@]}" -o "$OUT/many.npy")
if cmp -s "$OUT/one.npy" "$OUT/many.npy"; then same="identical"; else same="DIFFERENT"; fi
printf '1 rank x 1 thread:  %8.2f s (%.0f sentences/s)\n' "$one" "$(/usr/bin/python3 -c "print($N/$one)")"
printf '%d ranks x 1 thread: %8.2f s (%.0f sentences/s)\n' "$RANKS" "$many" "$(/usr/bin/python3 -c "print($N/$many)")"
/usr/bin/python3 -c "s = $one / $many; g = 1.8 if $RANKS == 2 else 0.9 * $RANKS; print(f'speed-up {s:.2f}x (goal {g:.1f}x: {\"met\" if s >= g else \"NOT met\"}); outputs $same')"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$same" = identical ]
