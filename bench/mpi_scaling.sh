#!/usr/bin/env bash
# Data-parallel scaling on this machine: the Multi30k recipe (configs/multi30k-en-fr.json), STEPS updates of
# 6,000 tokens each, resumed from one shared checkpoint (so every run uses the same subword model and batches),
# 1 rank x 1 thread against `mpirun -np 2` x 1 thread; for comparison 1 rank x 2 threads (in-process replicas), and
# the machine's own ceiling: two independent 1 x 1 runs at the same time against one alone (what two cores sharing
# one memory bus and L3 give two jobs that never talk to each other).
#
# Two figures a run, both in target tokens/s of this invocation's STEPS updates:
#   steps   the training steps alone, as `tfm train` reports them ("in the training steps": batch, forward,
#           backward, all-reduce, update); the figure data-parallel scaling is judged on;
#   run     the whole invocation, wall clock of the process (mpirun's start-up, data loading and encoding, the
#           final checkpoint included) over the tokens it trained (the checkpoint's count minus the base's).
# tfm's own whole-run figure ("N target tokens/s" before the parenthesis) is not used: after --resume it is over
# the run's cumulative time and tokens, so it includes the base run's subword training, the same seconds in every
# run, which flattens any speed-up.
#   bench/mpi_scaling.sh            # STEPS=20 (about 1 min a run on an idle 2-core machine)
set -euo pipefail
cd "$(dirname "$0")/.."
TFM=$(realpath "${TFM:-build/tfm}")
export TFM_DATA_DIR=${TFM_DATA_DIR:-$(cd .. && pwd)/shared/data}
STEPS=${STEPS:-20}
[ -x "$TFM" ] || { echo "build first: make build" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$TFM" train --config configs/multi30k-en-fr.json --out "$OUT/base" --set stop_after_steps=2 --set valid_limit=8 \
  --threads 2 --no-progress > /dev/null
for r in r1 r2 t2 ca cb; do cp -r "$OUT/base" "$OUT/$r"; done
# Target tokens trained so far by the run in folder $1 (its checkpoint's state).
ckpt_tokens() {
  /usr/bin/python3 - "$1/checkpoint.safetensors" <<'EOF'
import json, struct, sys
with open(sys.argv[1], 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    print(json.loads(json.loads(f.read(n))['__metadata__']['state'])['tokens'])
EOF
}
base_tokens=$(ckpt_tokens "$OUT/base")
steps_tps() { sed -n 's/.*target tokens\/s (\([0-9.]*\) in the training steps).*/\1/p' "$1"; }
now() { date +%s.%N; }
export OMP_NUM_THREADS=1
args=(--set stop_after_steps=$((STEPS + 2)) --no-progress)
# run NAME THREADS [mpirun args...]: one timed invocation on folder NAME; sets steps_NAME and run_NAME.
run() {
  local name=$1 threads=$2; shift 2
  local t0 t1 tok
  t0=$(now)
  OMP_NUM_THREADS=$threads "$@" "$TFM" train --resume "$OUT/$name" "${args[@]}" --threads "$threads" \
    > "$OUT/$name.log" 2> "$OUT/$name.err"
  t1=$(now)
  tok=$(ckpt_tokens "$OUT/$name")
  printf -v "steps_$name" '%s' "$(steps_tps "$OUT/$name.log")"
  printf -v "run_$name" '%s' "$(/usr/bin/python3 -c "print(($tok - $base_tokens) / ($t1 - $t0))")"
}
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS -x TFM_DATA_DIR)
run r1 1
run r2 1 "${mpi[@]}"
# For comparison, one process on 2 threads: the same shards run in-process on model replicas (train/replicas.h).
run t2 2
# The ceiling: two independent 1 x 1 runs at once (each its own copy of the base), against r1 alone.
t0=$(now)
OMP_NUM_THREADS=1 "$TFM" train --resume "$OUT/ca" "${args[@]}" --threads 1 > "$OUT/ca.log" 2> "$OUT/ca.err" &
pa=$!
OMP_NUM_THREADS=1 "$TFM" train --resume "$OUT/cb" "${args[@]}" --threads 1 > "$OUT/cb.log" 2> "$OUT/cb.err"
wait $pa
t1=$(now)
steps_pair=$(/usr/bin/python3 -c "print($(steps_tps "$OUT/ca.log") + $(steps_tps "$OUT/cb.log"))")
run_pair=$(/usr/bin/python3 -c "print(($(ckpt_tokens "$OUT/ca") + $(ckpt_tokens "$OUT/cb") - 2 * $base_tokens) / ($t1 - $t0))")
/usr/bin/python3 - "$steps_r1" "$run_r1" "$steps_r2" "$run_r2" "$steps_t2" "$run_t2" "$steps_pair" "$run_pair" <<'EOF'
import sys
s1, w1, s2, w2, st, wt, sp, wp = map(float, sys.argv[1:])
print(f"{'target tokens/s':<44} {'steps':>8} {'run':>8}")
for name, s, w in (("1 rank x 1 thread", s1, w1), ("2 ranks x 1 thread (mpirun)", s2, w2),
                   ("1 rank x 2 threads (replicas)", st, wt), ("ceiling: two independent 1 x 1 runs at once", sp, wp)):
    print(f"{name:<44} {s:8.0f} {w:8.0f}   {s / s1:.2f}x {w / w1:.2f}x")
print(f"speed-up of 2 ranks: {s2 / s1:.2f}x in the steps, {w2 / w1:.2f}x the whole run (target 1.8x); "
      f"{s2 / sp * 100:.0f}% / {w2 / wp * 100:.0f}% of the ceiling")
EOF
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
