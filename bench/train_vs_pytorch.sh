#!/usr/bin/env bash
# Training and greedy-decoding throughput of `tfm` against the PyTorch d2l reference loop, in one invocation, on the
# same data and hyper-parameters (Debian python3-torch, same thread count). Prints tokens/s of each and the ratio.
#   bench/train_vs_pytorch.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/ensure_openblas.sh  # the PyTorch peer on OpenBLAS, one BLAS thread under its threads (bench/torch_blas.py)
TFM=${TFM:-build/tfm}
DATA=${TFM_DATA_DIR:-$(cd .. && pwd)/shared/data}/fra-eng/fra.txt
THREADS=${THREADS:-2}
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
[ -x "$TFM" ] || { echo "build first: make build" >&2; exit 1; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $THREADS"

run_case() {  # name, torch epochs, tfm epochs, then shared args
  local name=$1 te=$2 fe=$3; shift 3
  local torch_json ours_line
  torch_json=$($PY bench/d2l_pytorch.py --data "$DATA" --epochs "$te" --threads "$THREADS" "$@")
  ours_line=$("$TFM" train --data "$DATA" --out "$OUT/$name" --epochs "$fe" --threads "$THREADS" --no-progress "$@")
  local ours_tps torch_tps
  ours_tps=$(echo "$ours_line" | sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p')
  torch_tps=$($PY -c "import json,sys; print(round(json.loads(sys.argv[1])['train_tokens_per_s']))" "$torch_json")
  printf '%-44s tfm %9.0f tok/s   pytorch %9.0f tok/s   ratio %6.1fx\n' "$name" "$ours_tps" "$torch_tps" \
    "$($PY -c "print($ours_tps/$torch_tps)")"
}

run_case "d2l default (600 ex, H32, 2 layers, b64)" 20 200
if [ "${1:-}" != "--quick" ]; then
  run_case "large (20k ex, H256, 4 heads, ffn1024, 4 l, b128, L20)" 1 1 \
    --num-examples 20000 --num-hiddens 256 --num-heads 4 --ffn-num-hiddens 1024 --num-layers 4 --batch-size 128 \
    --num-steps 20
fi

# Greedy decoding of 1,000 sentences: the reference's predict loop vs tfm translate (KV cache).
$PY - "$DATA" 1000 > "$OUT/src.txt" <<'PYEOF'
import sys
sys.path.insert(0, "../shared/reference/torch")
import d2lnmt
text = d2lnmt.preprocess_nmt(open(sys.argv[1], encoding="utf-8").read())
lines = [l.split("\t")[0] for l in text.split("\n")[: int(sys.argv[2])] if "\t" in l]
print("\n".join(lines))
PYEOF
torch_json=$($PY bench/d2l_pytorch.py --data "$DATA" --epochs 1 --predict 1000 --threads "$THREADS")
t0=$(date +%s.%N)
"$TFM" translate --model "$OUT/d2l default (600 ex, H32, 2 layers, b64)" --threads "$THREADS" < "$OUT/src.txt" > /dev/null 2>&1
t1=$(date +%s.%N)
$PY - "$torch_json" "$t0" "$t1" "$(wc -l < "$OUT/src.txt")" <<'PYEOF'
import json, sys
t = json.loads(sys.argv[1])["predict_sentences_per_s"]
n = int(sys.argv[4]); ours = n / (float(sys.argv[3]) - float(sys.argv[2]))
print(f"{'greedy decoding, %d sentences' % n:<44} tfm {ours:9.0f} sent/s  pytorch {t:9.0f} sent/s  ratio {ours / t:6.1f}x")
PYEOF
