#!/usr/bin/env bash
# Tokenizer speed, whole process, one thread: `tfm tokenize --input FILE --threads 1` (load the tokenizer,
# encode every line with special tokens, write one JSON line each to /dev/null) against the Hugging Face
# tokenizers library (npm `tokenizers`, scripts/package.json: load the same tokenizer.json, encodeBatch of all
# lines, RAYON_NUM_THREADS=1) on the first LINES lines of Multi30k (train.en.gz + train.de.gz + train.fr.gz,
# interleaved). Prints both wall times (best of REPS) and the ratio (npm / tfm: above 1 means tfm is faster) for
# each tokenizer kind: bert-base-uncased (WordPiece) and the fixtures' byte-level BPE, Unigram (Precompiled +
# Metaspace) and WordLevel.
#
# Usage: bench/tokenizer_speed.sh      (from the repository root, after `make build` and `cd scripts && npm install`)
# Environment: LINES (20000), REPS (3), BUILD_DIR (build), TFM_DATA_DIR (../shared/data), NICE (e.g. -15, root).
set -euo pipefail

cd "$(dirname "$0")/.."
LINES=${LINES:-20000}
REPS=${REPS:-3}
BUILD_DIR=${BUILD_DIR:-build}
DATA=${TFM_DATA_DIR:-../shared/data}
NICE=${NICE:-0}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

[ -x "$BUILD_DIR/tfm" ] || { echo "tokenizer_speed: $BUILD_DIR/tfm not built (make build)" >&2; exit 1; }
[ -d scripts/node_modules/tokenizers ] || { echo "tokenizer_speed: run 'cd scripts && npm install' first" >&2; exit 1; }

# LINES lines, English / German / French in turn.
python3 - "$DATA/multi30k" "$LINES" > "$TMP/lines.txt" <<'PY'
import gzip, sys
langs = [gzip.open(f"{sys.argv[1]}/train.{l}.gz", "rt", encoding="utf-8").read().splitlines() for l in ("en", "de", "fr")]
out = [line for trio in zip(*langs) for line in trio][: int(sys.argv[2])]
sys.stdout.write("\n".join(out) + "\n")
PY
echo "lines: $(wc -l < "$TMP/lines.txt"), bytes: $(wc -c < "$TMP/lines.txt")"

cat > "$TMP/npm_encode.js" <<'JS'
const fs = require('fs');
const tk = require(process.argv[2]);
const t = tk.Tokenizer.fromFile(process.argv[3]);
const lines = fs.readFileSync(process.argv[4], 'utf8').split('\n');
if (lines[lines.length - 1] === '') lines.pop();
t.encodeBatch(lines).then((enc) => { let n = 0; for (const e of enc) n += e.getLength(); process.stderr.write(`tokens ${n}\n`); });
JS

best_of() {  # best wall seconds of REPS runs of "$@"
  local best=""
  for _ in $(seq "$REPS"); do
    local s e
    s=$(date +%s.%N)
    nice -n "$NICE" "$@" > /dev/null 2> "$TMP/err" || { cat "$TMP/err" >&2; exit 1; }
    e=$(date +%s.%N)
    best=$(python3 -c "a=$e-$s; b='$best'; print(min(a, float(b)) if b else a)")
  done
  echo "$best"
}

printf '%-16s %10s %10s %8s\n' tokenizer "tfm s" "npm s" "npm/tfm"
for kind in bert-base-uncased bpe_bytelevel unigram wordlevel; do
  if [ "$kind" = bert-base-uncased ]; then dir="$DATA/bert-base-uncased"; else dir="tests/fixtures/tokenizer/$kind"; fi
  t_tfm=$(best_of env OMP_NUM_THREADS=1 "$BUILD_DIR/tfm" tokenize --model "$dir" --input "$TMP/lines.txt" --threads 1)
  t_npm=$(best_of env RAYON_NUM_THREADS=1 node "$TMP/npm_encode.js" "$PWD/scripts/node_modules/tokenizers" \
    "$dir/tokenizer.json" "$TMP/lines.txt")
  python3 -c "print('%-16s %10.3f %10.3f %8.2f' % ('$kind', $t_tfm, $t_npm, $t_npm / $t_tfm))"
done
