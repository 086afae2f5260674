#!/usr/bin/env bash
# Output hashes of a `tfm` build over every fixture folder, so that two builds (before / after a refactor) can be
# diffed line for line:
#
#   scripts/hash_outputs.sh TFM_BINARY [OUT]
#   scripts/hash_outputs.sh /work/baseline/tfm before.txt && scripts/hash_outputs.sh build/tfm after.txt
#   diff before.txt after.txt            # no output: every fixture output is bit-identical
#
# Every folder under tests/fixtures with a config.json or a tokenizer is given to each command that may accept it
# (encode, embed with each pooling mode, classify, fill-mask, rerank, translate with greedy, beam, sampling and
# the Hugging Face processors, tokenize, and convert --dtype int8 / bf16 followed by encode / translate of the
# converted folder), in fp32 and int8 where the command takes --dtype (TFM_HASH_DTYPES="bf16 int8" adds bf16),
# with --threads 2. One line per run:
#   FOLDER  COMMAND  DTYPE  SHA256(stdout and output files)  rc=EXIT
# A model folder without a tokenizer is given a generated WordPiece vocabulary (with_tokenizer below).
# A command that refuses a folder gives rc != 0 and is still listed (a refusal that appears or disappears shows in
# the diff); its stderr is not hashed (it may name temporary paths). The dtype runs follow only a folder whose
# fp32 run succeeded. Numbers printed with limited digits (classify, rerank, fill-mask JSON) are hashed as
# printed; encode and embed write .npy files, hashed bit for bit.
set -u
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 TFM_BINARY [OUT]  (TFM_BINARY: an executable tfm)" >&2
  exit 2
fi
tfm=$(realpath "$1")
out=${2:-/dev/stdout}
root=$(cd "$(dirname "$0")/.." && pwd)
fixtures=$root/tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
unset TFM_ISA TFM_INT8_ACT TFM_FUSED_QUANT TFM_EMULATE_BF16 ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA
threads=(--threads 2)

# Short texts: the tiny fixture models take 20 positions, and a generated vocabulary spells words letter by letter.
printf '%s\n' "a fox ran" "Hello, world!" "hi" >"$tmp/lines.txt"
texts=("The fox ran." "hi there")

# run LABEL COMMAND...: runs it in $tmp with an empty output folder o/, prints LABEL, the hash and the exit status.
# Paths given to the commands are relative to $tmp (or the fixtures' own), so that what they print does not name
# the random temporary folder.
last_rc=0
run() {
  local label=$1
  shift
  rm -rf "$tmp/o" && mkdir -p "$tmp/o"
  (cd "$tmp" && "$@" >"$tmp/stdout" 2>"$tmp/stderr" </dev/null)
  last_rc=$?
  local h
  h=$( (cat "$tmp/stdout"; find "$tmp/o" -type f | LC_ALL=C sort | while read -r f; do
    printf '%s\n' "${f#"$tmp"/o/}"
    cat "$f"
  done) | sha256sum | cut -c1-64)
  printf '%s\t%s\trc=%d\n' "$label" "$h" "$last_rc" >>"$out"
}

# each_dtype FOLDER COMMAND_LABEL COMMAND...: fp32, then the other dtypes ($dtypes) when fp32 succeeded.
dtypes=${TFM_HASH_DTYPES:-int8}
each_dtype() {
  local folder=$1 label=$2
  shift 2
  run "$folder	$label	fp32" "$@" --dtype fp32 "${threads[@]}"
  [ "$last_rc" -eq 0 ] || return 0
  for dt in $dtypes; do run "$folder	$label	$dt" "$@" --dtype "$dt" "${threads[@]}"; done
}

[ "$out" = /dev/stdout ] || : >"$out"
mapfile -t folders < <(cd "$fixtures" && find . -type f \( -name config.json -o -name tokenizer.json -o -name vocab.txt \
  -o -name '*.spm' -o -name '*.model' \) -printf '%h\n' | sed 's|^\./||' | LC_ALL=C sort -u)

# A folder with a config.json but no tokenizer gets one for the run: a copy made of links plus a vocab.txt of the
# WordPiece specials, then single letters and their ## forms, cut to the config's vocab_size.
with_tokenizer() {
  local f=$1 src=$fixtures/$1
  if [ ! -f "$src/config.json" ] || compgen -G "$src/tokenizer.json" >/dev/null || compgen -G "$src/vocab*" >/dev/null ||
    compgen -G "$src/*.spm" >/dev/null || compgen -G "$src/*.model" >/dev/null || compgen -G "$src/*vocab.txt" >/dev/null; then
    printf '%s\n' "$src"
    return
  fi
  local rel=linked/${f//\//__}
  local dst=$tmp/$rel
  mkdir -p "$dst"
  for x in "$src"/*; do ln -s "$x" "$dst/"; done
  local n
  n=$(sed -n 's/^ *"vocab_size": *\([0-9]*\).*/\1/p' "$src/config.json" | head -1)
  { printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]'
    for c in {a..z}; do printf '%s\n' "$c"; done
    for c in {a..z}; do printf '##%s\n' "$c"; done; } | head -n "${n:-5}" >"$dst/vocab.txt"
  printf '%s\n' "$rel"
}

for f in "${folders[@]}"; do
  [[ $f =~ ${TFM_HASH_ONLY:-.} ]] || continue  # TFM_HASH_ONLY=REGEX: only the folders it matches
  dir=$(with_tokenizer "$f")
  run "$f	tokenize	-" "$tfm" tokenize --model "$dir" "${texts[@]}"
  run "$f	tokenize-pair	-" "$tfm" tokenize --model "$dir" "${texts[0]}" --pair "${texts[1]}"
  [ -f "$dir/config.json" ] || continue
  each_dtype "$f" encode "$tfm" encode --model "$dir" --text "${texts[0]}" --text "${texts[1]}" -o o/h.npy
  each_dtype "$f" embed "$tfm" embed --model "$dir" -i lines.txt -o o/e.npy -q
  for p in cls mean max mean_sqrt_len weightedmean lasttoken; do
    each_dtype "$f" "embed-$p" "$tfm" embed --model "$dir" -i lines.txt -o o/e.npy -q --pooling "$p"
  done
  each_dtype "$f" classify "$tfm" classify --model "$dir" "${texts[@]}" --all-scores
  each_dtype "$f" classify-sigmoid "$tfm" classify --model "$dir" "${texts[@]}" --all-scores --function-to-apply sigmoid
  each_dtype "$f" classify-tokens "$tfm" classify --model "$dir" "${texts[@]}" --all-tokens
  each_dtype "$f" fill-mask "$tfm" fill-mask --model "$dir" "Paris is [MASK]." "hi [MASK]" --top-k 7
  each_dtype "$f" fill-mask-s "$tfm" fill-mask --model "$dir" "Paris is <mask>." "hi <mask>" --top-k 7
  each_dtype "$f" rerank "$tfm" rerank --model "$dir" --query "a fox" "${texts[@]}" "${texts[0]}"
  each_dtype "$f" rerank-raw "$tfm" rerank --model "$dir" --query "a fox" "${texts[@]}" --raw-scores
  lang=()
  case $f in
    nllb) lang=(--target-lang fra_Latn) ;;
    m2m100) lang=(--target-lang fr) ;;
  esac
  tr=("$tfm" translate --model "$dir" -q "${lang[@]}" "I want to know why." "The house is wonderful." "Hello")
  each_dtype "$f" translate "${tr[@]}"
  each_dtype "$f" translate-greedy "${tr[@]}" --beam 1 --scores
  each_dtype "$f" translate-beam4 "${tr[@]}" --beam 4 --scores --num-hypotheses 2
  each_dtype "$f" translate-processors "${tr[@]}" --beam 3 --scores --repetition-penalty 1.3 --no-repeat-ngram-size 2 \
    --min-length 2
  each_dtype "$f" translate-sample "${tr[@]}" --beam 1 --scores --sampling-topk 0 --sampling-topp 0.9 \
    --sampling-temperature 0.8 --seed 7
  each_dtype "$f" translate-sample-topk "${tr[@]}" --beam 1 --sampling-topk 5 --seed 3
  # The converted folders (tfm convert's own quantiser and rounding), then a run of each.
  for dt in int8 bf16; do
    rm -rf "$tmp/conv"
    run "$f	convert	$dt" "$tfm" convert --model "$dir" --dtype "$dt" --out conv "${threads[@]}"
    # The hash above covers stdout only: the converted weights are hashed here.
    if [ "$last_rc" -eq 0 ]; then
      printf '%s\tconvert-weights\t%s\t%s\trc=0\n' "$f" "$dt" \
        "$(cat "$tmp/conv/model.safetensors" | sha256sum | cut -c1-64)" >>"$out"
      run "$f	encode-converted	$dt" "$tfm" encode --model conv --text "${texts[0]}" --text "${texts[1]}" \
        -o o/h.npy "${threads[@]}"
      run "$f	translate-converted	$dt" "$tfm" translate --model conv -q "${lang[@]}" "I want to know why." \
        "Hello" --beam 2 --scores "${threads[@]}"
    fi
  done
done
