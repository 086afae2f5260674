#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (clang, ASan + UBSan + libFuzzer) into build-fuzz/ and runs each one.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   build, seed and fuzz every target (or the named ones) for SECONDS
#                                           each (default 60; the robustness issue asks for 600)
#   scripts/fuzz.sh build                   only build
#
# Environment: CXX (default clang++-14), TFM_DATA_DIR (default ../shared/data), FUZZ_JOBS (parallel compile
# jobs, default 1), FUZZ_PARALLEL (targets fuzzed at once, default 1; 2 on a 2-core machine halves the wall time),
# FUZZ_NICE (nice level, default 19), FUZZ_OUT (build dir, default build-fuzz).
# Crash reproducers land in build-fuzz/artifacts/<target>/; copy them to tests/fixtures/fuzz_regressions/<target>/
# so tfm_tests (suite FuzzRegression) replays them. See FUZZING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

CXX=${CXX:-clang++-14}
OUT=${FUZZ_OUT:-build-fuzz}
JOBS=${FUZZ_JOBS:-1}
NICE=${FUZZ_NICE:-19}
DATA=${TFM_DATA_DIR:-../shared/data}
export TFM_DATA_DIR=$DATA

ALL_TARGETS=(fuzz_safetensors fuzz_config fuzz_tokenizer fuzz_hf_tokenizer fuzz_vocab_load fuzz_lines fuzz_checkpoint fuzz_serve_request)
# Longest input libFuzzer may generate, per target (bytes).
declare -A MAX_LEN=([fuzz_safetensors]=8192 [fuzz_config]=4096 [fuzz_tokenizer]=2048 [fuzz_hf_tokenizer]=2048 [fuzz_vocab_load]=16384
                    [fuzz_lines]=8192 [fuzz_checkpoint]=32768 [fuzz_serve_request]=4096)

CXXFLAGS=(-std=c++20 -g -O1 -march=x86-64-v3 -fno-trapping-math -fno-omit-frame-pointer -fopenmp
          -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-pass-failed -Isrc -Iinclude $(pkg-config --cflags cairo))
LIBS=($(pkg-config --libs libutf8proc oniguruma sentencepiece) -ldnnl -lsentencepiece_train -lz -lcurl -lcrypto -fopenmp
      $(pkg-config --libs cairo cpp-httplib) -pthread)

build() {
  mkdir -p "$OUT/obj"
  # Library objects get coverage instrumentation but no libFuzzer main (fuzzer-no-link); one archive, so each
  # target links only the objects it needs.
  local objs=() pids=() src obj
  for src in $(find src -name '*.cpp' | sort); do
    obj="$OUT/obj/$(echo "${src%.cpp}" | tr / _).o"
    objs+=("$obj")
    # Rebuild when the source or any header under src/ is newer than the object.
    if [[ ! -f $obj || $src -nt $obj || -n $(find src -name '*.h' -newer "$obj" -print -quit) ]]; then
      echo "compile $src"
      nice -n "$NICE" "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj" &
      pids+=($!)
      if (( ${#pids[@]} >= JOBS )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  local lib="$OUT/libtfm_fuzz.a"
  if [[ ! -f $lib ]] || [[ -n $(find "$OUT/obj" -name '*.o' -newer "$lib" -print -quit) ]]; then
    rm -f "$lib" && ar rcs "$lib" "${objs[@]}"
  fi
  local t
  for t in "${ALL_TARGETS[@]}"; do
    if [[ ! -x $OUT/$t || fuzz/$t.cpp -nt $OUT/$t || fuzz/fuzz_entries.h -nt $OUT/$t || $lib -nt $OUT/$t ]]; then
      echo "link $t"
      nice -n "$NICE" "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer "fuzz/$t.cpp" "$lib" "${LIBS[@]}" -o "$OUT/$t"
    fi
  done
}

# Seed corpora from the real files. Files larger than the target's max_len would be cut by libFuzzer, so they
# are left out (or cut to whole lines, for text).
seed() {
  local S="$OUT/seeds"
  rm -rf "$S" && mkdir -p "$S"/{fuzz_safetensors,fuzz_config,fuzz_tokenizer,fuzz_hf_tokenizer,fuzz_vocab_load,fuzz_lines,fuzz_checkpoint,fuzz_serve_request}
  local f i=0
  while IFS= read -r f; do
    if (( $(stat -c %s "$f") <= MAX_LEN[fuzz_safetensors] )); then cp "$f" "$S/fuzz_safetensors/st_$((i++)).safetensors"; fi
  done < <(find tests/fixtures -name '*.safetensors' | sort)
  i=0
  for f in $(find tests/fixtures -name 'config.json' | sort) "$DATA/bert-base-uncased/config.json" \
           "$DATA/bert-base-uncased/tokenizer_config.json" configs/*.json; do
    if [[ -f $f ]]; then cp "$f" "$S/fuzz_config/cfg_$((i++)).json"; fi
  done
  # Tokenizer: real sentences (English and French, with a pair split by a 0 byte) and odd Unicode.
  local fra="$DATA/fra-eng/fra.txt"
  i=0
  if [[ -f $fra ]]; then
    while IFS=$'\t' read -r en fr _; do
      printf '%s' "$en" > "$S/fuzz_tokenizer/s_$i"
      printf '%s\0%s' "$en" "$fr" > "$S/fuzz_tokenizer/p_$i"
      printf '%s\0%s' "$en" "$fr" > "$S/fuzz_hf_tokenizer/p_$i"
      i=$((i + 1))
    done < <(sed -n '1p;1000p;20000p;100000p;150000p' "$fra")
  fi
  printf 'Héllo [CLS] wörld! 你好 [MASK] naïve café\xe2\x80\xaf ok' > "$S/fuzz_tokenizer/u_0"
  printf '[SEP][PAD] unaffable\0 ##ing x' > "$S/fuzz_tokenizer/u_1"
  # Vocab / tokenizer files: the head of the real vocab.txt, a d2l vocab and a shrunken tokenizer.json.
  { head -c 4000 "$DATA/bert-base-uncased/vocab.txt" || true; } | sed '$d' > "$S/fuzz_vocab_load/bert_vocab_head.txt"
  for f in tests/fixtures/d2l_trained/*_vocab.txt; do cp "$f" "$S/fuzz_vocab_load/$(basename "$f")"; done
  python3 - "$DATA/bert-base-uncased/tokenizer.json" "$S/fuzz_vocab_load/tokenizer_small.json" <<'EOF' || true
import json, sys
j = json.load(open(sys.argv[1]))
vocab = j["model"]["vocab"]
keep = {k: v for k, v in vocab.items() if v < 200 or k in ("the", "un", "##aff", "##able", "##s", "a")}
# ids must stay dense: renumber in id order
for n, k in enumerate(sorted(keep, key=keep.get)): keep[k] = n
j["model"]["vocab"] = keep
j["added_tokens"] = [dict(t, id=keep[t["content"]]) for t in j["added_tokens"] if t["content"] in keep]
for k in ("post_processor", "decoder"):
    if isinstance(j.get(k), dict) and "special_tokens" in j[k]:
        for t in j[k]["special_tokens"].values(): t["ids"] = [keep.get(x, 0) for x in t["tokens"]]
json.dump(j, open(sys.argv[2], "w"), ensure_ascii=False)
EOF
  # Line files: fra-eng lines (plain and gzip) and a few Multi30k lines (gzip, as shipped).
  if [[ -f $fra ]]; then
    head -n 30 "$fra" > "$S/fuzz_lines/fra_head.txt"
    sed -n '50000,50030p' "$fra" | gzip -9 > "$S/fuzz_lines/fra_mid.txt.gz"
    printf 'Go.\tVa !\r\nHi.\tSalut !\r\n' > "$S/fuzz_lines/crlf.txt"
  fi
  for f in "$DATA/multi30k/val.en.gz" "$DATA/multi30k/val.fr.gz"; do
    if [[ -f $f ]]; then { zcat "$f" || true; } | head -n 25 | gzip -9 > "$S/fuzz_lines/$(basename "$f")"; fi
  done
  # Checkpoints: written by the library itself (valid checkpoint and model of the small config).
  TFM_FUZZ_WRITE_SEEDS="$S/fuzz_checkpoint" OMP_NUM_THREADS=1 "$OUT/fuzz_checkpoint" -runs=0 "$S/fuzz_checkpoint" \
    >/dev/null 2>&1
  cp tests/fixtures/io/f32_i64.safetensors "$S/fuzz_checkpoint/" 2>/dev/null || true
  # Request bodies of tfm serve.
  printf '{"inputs": ["the cat", "a dog"], "normalize": false, "truncate": true}' > "$S/fuzz_serve_request/embed.json"
  printf '{"input": "hi", "model": "m", "encoding_format": "float"}' > "$S/fuzz_serve_request/openai.json"
  printf '{"q": ["go .", "hi ."], "source": "en", "target": "fr", "beam_size": 4}' > "$S/fuzz_serve_request/tr.json"
  printf '{"q": "\\u00e9t\\u00e9", "target": "fr", "format": "text"}' > "$S/fuzz_serve_request/esc.json"
  # The regression inputs (tests/fixtures/fuzz_regressions/<target>/) seed their target too.
  local t
  for t in "${ALL_TARGETS[@]}"; do
    if [[ -d tests/fixtures/fuzz_regressions/$t ]]; then
      find "tests/fixtures/fuzz_regressions/$t" -type f ! -name README.md -exec cp {} "$S/$t/" \;
    fi
  done
  echo "seed corpora in $S: $(for d in "$S"/*; do printf '%s=%s ' "$(basename "$d")" "$(ls "$d" | wc -l)"; done)"
}

run_target() {
  local t=$1 secs=$2
  local corpus="$OUT/corpus/$t" art="$OUT/artifacts/$t" log="$OUT/logs/$t.log"
  mkdir -p "$corpus" "$art" "$OUT/logs"
  local stamp="$OUT/logs/.$t.start"
  touch "$stamp"
  # One thread everywhere: deterministic, and the OpenMP/OpenBLAS pools do not compete with the fuzzer.
  OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    nice -n "$NICE" "$OUT/$t" "$corpus" "$OUT/seeds/$t" -artifact_prefix="$art/" -max_total_time="$secs" \
    -max_len="${MAX_LEN[$t]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 > "$log" 2>&1 || true
  local execs rate crashes
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  # Only the artifacts of this run (older ones may already be regression files).
  local new_art
  new_art=$(find "$art" -type f -newer "$stamp")
  crashes=$(printf '%s' "$new_art" | grep -c . || true)
  printf '%-18s %8ss  execs %10s  exec/s %7s  corpus %5s  new artifacts %s\n' "$t" "$secs" "${execs:-?}" \
    "${rate:-?}" "$(ls "$corpus" | wc -l)" "$crashes"
  if (( crashes > 0 )); then
    printf '%s\n' "$new_art" | sed 's/^/    /'
    grep -m3 -E 'ERROR|runtime error|deadly signal|VIOLATED' "$log" | sed 's/^/    /' || true
  fi
}

if [[ ${1:-} == build ]]; then build; exit 0; fi
SECS=${1:-60}
shift || true
TARGETS=("$@")
(( ${#TARGETS[@]} )) || TARGETS=("${ALL_TARGETS[@]}")
build
seed
PAR=${FUZZ_PARALLEL:-1}
mkdir -p "$OUT/logs"
echo "fuzzing ${#TARGETS[@]} targets, $SECS s each, $PAR at a time (logs in $OUT/logs/)"
# Targets run PAR at a time (one core each); summaries print in target order once all are done.
pids=()
for t in "${TARGETS[@]}"; do
  run_target "$t" "$SECS" > "$OUT/logs/$t.summary" &
  pids+=($!)
  if (( ${#pids[@]} >= PAR )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
for t in "${TARGETS[@]}"; do cat "$OUT/logs/$t.summary"; done
