#!/usr/bin/env bash
# Data-parallel scaling on this machine: the Multi30k recipe (configs/multi30k-en-fr.json), STEPS updates of
# 6,000 tokens each, resumed from one shared checkpoint (so both runs use the same subword model and batches),
# 1 rank x 1 thread against `mpirun -np 2` x 1 thread. Prints target tokens/s of each and the speed-up, and
# for comparison 1 rank x 2 threads.
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
cp -r "$OUT/base" "$OUT/r1"
cp -r "$OUT/base" "$OUT/r2"
cp -r "$OUT/base" "$OUT/t2"
tps() { sed -n 's/.*s, \([0-9.]*\) target tokens\/s.*/\1/p'; }
export OMP_NUM_THREADS=1
one=$("$TFM" train --resume "$OUT/r1" --set stop_after_steps=$((STEPS + 2)) --threads 1 --no-progress | tps)
two=$(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS -x TFM_DATA_DIR \
      "$TFM" train --resume "$OUT/r2" --set stop_after_steps=$((STEPS + 2)) --threads 1 --no-progress 2>/dev/null | tps)
# For comparison, one process on 2 threads: the same shards run in-process on model replicas (train/replicas.h).
threads2=$(OMP_NUM_THREADS=2 "$TFM" train --resume "$OUT/t2" --set stop_after_steps=$((STEPS + 2)) --threads 2 \
           --no-progress | tps)
printf '1 rank x 1 thread: %.0f target tokens/s\n2 ranks x 1 thread: %.0f target tokens/s\n' "$one" "$two"
printf '1 rank x 2 threads: %.0f target tokens/s\n' "$threads2"
/usr/bin/python3 -c "s=$two/$one; print(f'speed-up {s:.2f}x, efficiency {s/2*100:.0f}% (target 1.8x)')"
/usr/bin/python3 -c "s=$threads2/$one; print(f'1 rank x 2 threads: {s:.2f}x 1 x 1')"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
