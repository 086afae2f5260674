#!/usr/bin/env bash
# Load benchmark of `tfm serve` (issue 11): throughput and p50/p99 latency of single-sentence /embed requests at
# concurrency 1, 8 and 64 (wrk), against offline `tfm encode` on the same sentence, plus a soak for RSS growth.
#   bench/serve_load.sh [BUILD_DIR]      env: DURATION_S (per level, 20), SOAK_S (300), THREADS (2), MODEL (dir),
#                                             SIZE (small | base), LEVELS ("1 8 64"), WRK_TIMEOUT_S (30)
# Without MODEL it builds a random-weight BERT with the real bert-base-uncased WordPiece vocabulary from
# $TFM_DATA_DIR (the weights do not change the speed): SIZE=small (default) hidden 256, 4 layers, 4 heads,
# intermediate 1024; SIZE=base BERT-base (768, 12 layers, 12 heads, 3072; bench/bert_pytorch.py make-weights,
# Debian's torch). Ends with the issue-24 serving targets: p99 at concurrency 1 <= 1.5x one forward (the mean
# model time per batch at concurrency 1), p99 at 64 <= 3x p50 at 64, 0 non-2xx, served >= 90% of offline
# `tfm embed` (the issue's baseline: the same unpadded path and pooling; offline `tfm encode`, one padded batch
# of 1,024, is printed too, as issue 11 measured it).
# After each level: where the server's time went per request, from its access log (p50 / p99 of tokenize,
# queue, model, answer, and the total inside the server), the server's CPU per request split into the model
# threads (the THREADS busiest) and the rest (HTTP), and how often a model thread went to sleep (voluntary
# context switches: OpenMP threads waiting between parallel regions sleep after GOMP_SPINCOUNT spins and must be
# woken again; tfm's default is 1,000, see BENCHMARKS.md). SERVE_SPINCOUNT=N runs the server alone with
# GOMP_SPINCOUNT=N (the offline baselines keep theirs), to compare.
set -euo pipefail
BUILD=${1:-build}
TFM=$(realpath "$BUILD/tfm")
DURATION_S=${DURATION_S:-20}
SOAK_S=${SOAK_S:-300}
THREADS=${THREADS:-2}
SIZE=${SIZE:-small}
LEVELS=${LEVELS:-1 8 64}
# wrk gives up on a request after 2 s by default and counts it as a socket time-out (not in its latencies). At
# concurrency 64 on a BERT-base-size model each request waits for about 64 / throughput seconds (Little's law:
# 64 / 40 req/s = 1.6 s on 2 cores), so that default fails requests the server is about to answer, and the work
# done for them is lost. A client of a batching server waits longer: 30 s here; time-outs still count as failed.
WRK_TIMEOUT_S=${WRK_TIMEOUT_S:-30}
DATA=${TFM_DATA_DIR:-$(dirname "$0")/../../shared/data}
if ! command -v wrk > /dev/null; then  # the load generator, from Debian, installed as ensure_openblas.sh installs its peers
  echo "serve_load: installing wrk (the load generator)" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >&2; } ||
    { echo "serve_load: needs wrk (apt-get install wrk)" >&2; exit 1; }
fi
WORK=$(mktemp -d)
SERVER=""
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
SENTENCE="the quick brown fox jumps over the lazy dog near the river bank"

if [ -z "${MODEL:-}" ] && [ "$SIZE" = base ]; then
  MODEL=$WORK/bert
  /usr/bin/python3 "$(dirname "$0")/bert_pytorch.py" make-weights "$MODEL"
  cp "$DATA/bert-base-uncased/vocab.txt" "$DATA/bert-base-uncased/tokenizer_config.json" "$MODEL/"
elif [ -z "${MODEL:-}" ]; then
  MODEL=$WORK/bert
  mkdir -p "$MODEL"
  cp "$DATA/bert-base-uncased/vocab.txt" "$MODEL/vocab.txt"
  python3 - "$MODEL" <<'PY'
import json, random, struct, sys
from array import array
d = sys.argv[1]
H, L, I, V, P = 256, 4, 1024, 30522, 512
cfg = {"model_type": "bert", "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": 4,
       "intermediate_size": I, "vocab_size": V, "max_position_embeddings": P, "type_vocab_size": 2,
       "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0}
json.dump(cfg, open(d + "/config.json", "w"))
rng = random.Random(0)
t = {}
def size(shape): return shape[0] * (shape[1] if len(shape) > 1 else 1)
def n(name, *shape): t[name] = (list(shape), array("f", (rng.gauss(0, 0.02) for _ in range(size(shape)))))
def ln(name): t[name + ".weight"] = ([H], array("f", [1.0] * H)); t[name + ".bias"] = ([H], array("f", [0.0] * H))
n("embeddings.word_embeddings.weight", V, H); n("embeddings.position_embeddings.weight", P, H)
n("embeddings.token_type_embeddings.weight", 2, H); ln("embeddings.LayerNorm")
for l in range(L):
    p = f"encoder.layer.{l}."
    for m in ("query", "key", "value"):
        n(p + f"attention.self.{m}.weight", H, H); n(p + f"attention.self.{m}.bias", H)
    n(p + "attention.output.dense.weight", H, H); n(p + "attention.output.dense.bias", H)
    ln(p + "attention.output.LayerNorm")
    n(p + "intermediate.dense.weight", I, H); n(p + "intermediate.dense.bias", I)
    n(p + "output.dense.weight", H, I); n(p + "output.dense.bias", H); ln(p + "output.LayerNorm")
n("pooler.dense.weight", H, H); n("pooler.dense.bias", H)
header, off, blobs = {}, 0, []
for k in sorted(t):
    b = t[k][1].tobytes(); header[k] = {"dtype": "F32", "shape": t[k][0], "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]
PY
fi

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); threads $THREADS"
echo "# model: $MODEL ($(python3 -c "import json;c=json.load(open('$MODEL/config.json'));print('hidden %d, %d layers'%(c['hidden_size'],c['num_hidden_layers']))"))"

# Offline: tfm encode on N copies of the sentence in one batch; per-sentence time = (t_N - t_1) / (N - 1).
N=1024
ARGS=(); for _ in $(seq $N); do ARGS+=(--text "$SENTENCE"); done
t1=$( { /usr/bin/time -f %e "$TFM" encode --threads "$THREADS" --model "$MODEL" --text "$SENTENCE" > /dev/null; } 2>&1 | tail -1)
tN=$( { /usr/bin/time -f %e "$TFM" encode --threads "$THREADS" --model "$MODEL" "${ARGS[@]}" > /dev/null; } 2>&1 | tail -1)
offline=$(python3 -c "print('%.1f' % (($N - 1) / max($tN - $t1, 1e-3)))")
echo "offline tfm encode: $offline sentences/s (batch of $N: ${tN}s, one: ${t1}s incl. start-up)"
# Offline tfm embed (batches of 32, unpadded, mean pooling as the server's /embed): the issue-24 baseline.
for _ in $(seq $N); do echo "$SENTENCE"; done > "$WORK/lines.txt"
echo "$SENTENCE" > "$WORK/line.txt"
e1=$( { /usr/bin/time -f %e "$TFM" embed --threads "$THREADS" --model "$MODEL" --pooling mean --input "$WORK/line.txt" \
        -o "$WORK/e1.npy" > /dev/null; } 2>&1 | tail -1)
eN=$( { /usr/bin/time -f %e "$TFM" embed --threads "$THREADS" --model "$MODEL" --pooling mean --input "$WORK/lines.txt" \
        -o "$WORK/eN.npy" > /dev/null; } 2>&1 | tail -1)
offline_embed=$(python3 -c "print('%.1f' % (($N - 1) / max($eN - $e1, 1e-3)))")
echo "offline tfm embed: $offline_embed sentences/s ($N lines: ${eN}s, one: ${e1}s incl. start-up)"

SERVE_ENV=(); [ -n "${SERVE_SPINCOUNT:-}" ] && SERVE_ENV=(env GOMP_SPINCOUNT="$SERVE_SPINCOUNT")
"${SERVE_ENV[@]}" "$TFM" serve --model "$MODEL" --port 0 --threads "$THREADS" --max-concurrent-requests 256 \
  2> "$WORK/serve.log" &
SERVER=$!
for _ in $(seq 300); do grep -q "listening on" "$WORK/serve.log" && break; sleep 0.1; done
PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$WORK/serve.log" | grep -o '[0-9]*$')
URL=http://127.0.0.1:$PORT
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"inputs": "$SENTENCE"}'
wrk.headers["Content-Type"] = "application/json"
LUA
metric() { curl -s "$URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# Per thread of the server: id, voluntary context switches, CPU ticks (user + system).
threads() { for t in /proc/$SERVER/task/*; do
  echo "${t##*/} $(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status") $(awk '{print $14 + $15}' "$t/stat")"
done 2> /dev/null | sort; }
# Where the time of the access-log lines from line $1 on went, and the threads' CPU since snapshot $2.
stages() {
  tail -n +"$1" "$WORK/serve.log" > "$WORK/level.log"
  threads > "$WORK/t1"
  python3 - "$WORK/level.log" "$WORK/t0" "$WORK/t1" "$THREADS" "$(getconf CLK_TCK)" <<'PY'
import re, sys
log, t0, t1, nmodel, hz = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
pat = re.compile(r'" 200 \d+ ([0-9.]+)ms \(tokenize ([0-9.]+)ms, queue ([0-9.]+)ms, model ([0-9.]+)ms, answer ([0-9.]+)ms\)')
rows = [[float(x) for x in m.groups()] for m in map(pat.search, open(log)) if m]
if not rows:
    sys.exit()
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]
print("  server, per request (ms, p50 / p99): " + ", ".join(
    "%s %.1f / %.1f" % (n, pct([r[i] for r in rows], .5), pct([r[i] for r in rows], .99))
    for i, n in enumerate(["total", "tokenize", "queue", "model", "answer"])))
a = {l.split()[0]: l.split()[1:] for l in open(t0)}
d = []
for l in open(t1):
    f = l.split()
    if f[0] in a:
        d.append((int(f[2]) - int(a[f[0]][1]), int(f[1]) - int(a[f[0]][0])))
d.sort(reverse=True)
model, rest = d[:nmodel], d[nmodel:]
n = len(rows)
print("  server CPU per request: model threads %.2f ms, other threads %.2f ms; model threads' sleeps %.0f per request"
      % (1e3 * sum(c for c, _ in model) / hz / n, 1e3 * sum(c for c, _ in rest) / hz / n,
         sum(v for _, v in model) / n))
PY
}
echo "| concurrency | requests/s | p50 ms | p99 ms | non-2xx | mean batch | served / offline embed (encode) |"
echo "|---|---|---|---|---|---|---|"
declare -A P50 P99 BAD RATIO
inf=""
for c in $LEVELS; do
  b0=$(metric tfm_batch_size_sum); n0=$(metric tfm_batch_size_count)
  i0=$(metric tfm_inference_duration_seconds_sum)
  line0=$(( $(wc -l < "$WORK/serve.log") + 1 ))
  threads > "$WORK/t0"
  out=$(wrk -t $(( c < 2 ? 1 : 2 )) -c $c -d "${DURATION_S}s" --timeout "${WRK_TIMEOUT_S}s" --latency -s "$WORK/post.lua" "$URL/embed")
  b1=$(metric tfm_batch_size_sum); n1=$(metric tfm_batch_size_count)
  i1=$(metric tfm_inference_duration_seconds_sum)
  rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
  p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
  bad=$(echo "$out" | awk '/Non-2xx/ {print $NF}'); bad=${bad:-0}
  errs=$(echo "$out" | awk '/Socket errors/ {print $0}')
  # failed: non-2xx answers plus wrk's socket errors (connect, read, write, timeout)
  failed=$(( bad + $(echo "$out" | awk '/Socket errors/ {gsub(",", ""); print $4 + $6 + $8 + $10}') + 0 ))
  mb=$(python3 -c "print('%.1f' % (($b1 - $b0) / max($n1 - $n0, 1)))")
  ratio=$(python3 -c "print('%.0f%% (%.0f%%)' % (100 * $rps / $offline_embed, 100 * $rps / $offline))")
  echo "| $c | $rps | $p50 | $p99 | $bad ${errs:+($errs)} | $mb | $ratio |"
  stages "$line0"
  P50[$c]=$p50; P99[$c]=$p99; BAD[$c]=$failed; RATIO[$c]=$(python3 -c "print($rps / $offline_embed)")
  if [ "$c" = 1 ]; then
    inf=$(python3 -c "print('%.2f' % (1e3 * ($i1 - $i0) / max($n1 - $n0, 1)))")
    echo "  (concurrency 1: mean model time per batch (one forward of the sentence) $inf ms)"
  fi
done

# wrk prints latencies with units (us, ms, s): to milliseconds.
ms() { python3 -c "import re,sys; v,u=re.match(r'([0-9.]+)([a-z]+)','$1').groups(); print(float(v)*{'us':1e-3,'ms':1,'s':1e3,'m':6e4}[u])"; }
if [ -n "$inf" ] && [ -n "${P99[1]:-}" ]; then
  python3 -c "r=$(ms "${P99[1]}")/$inf; print('target p99 at concurrency 1 <= 1.5x one forward: %.2fx %s' % (r, 'met' if r <= 1.5 else 'NOT met'))"
fi
if [ -n "${P99[64]:-}" ]; then
  python3 -c "r=$(ms "${P99[64]}")/$(ms "${P50[64]}"); print('target p99 <= 3x p50 at concurrency 64: %.2fx %s' % (r, 'met' if r <= 3 else 'NOT met'))"
  python3 -c "r=${RATIO[64]}; print('target served >= 90%% of offline tfm embed at concurrency 64: %.0f%% %s' % (100*r, 'met' if r >= 0.9 else 'NOT met'))"
fi
for c in $LEVELS; do
  if [ "${BAD[$c]}" = 0 ]; then echo "target 0 failed requests at concurrency $c: met"
  else echo "target 0 failed requests at concurrency $c: NOT met (${BAD[$c]} non-2xx or socket errors)"; fi
done

rss() { awk '/VmRSS/ {print $2}' /proc/$SERVER/status; }
r0=$(rss)
wrk -t 2 -c 8 -d "${SOAK_S}s" --timeout "${WRK_TIMEOUT_S}s" -s "$WORK/post.lua" "$URL/embed" > "$WORK/soak.txt"
r1=$(rss)
soak_bad=$(awk '/Non-2xx/ {print $NF}' "$WORK/soak.txt")
soak_err=$(awk '/Socket errors/ {print $0}' "$WORK/soak.txt")
echo "soak ${SOAK_S}s at concurrency 8: $(awk '/requests in/ {print $1}' "$WORK/soak.txt") requests, ${soak_bad:-0} non-2xx ${soak_err:+($soak_err)}; RSS ${r0} kB -> ${r1} kB ($(python3 -c "print('%+.1f%%' % (100 * ($r1 - $r0) / $r0))"))"
kill -TERM $SERVER; wait $SERVER && echo "SIGTERM: exit 0"
