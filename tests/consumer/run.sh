#!/usr/bin/env bash
# The installed package as a consumer uses it: `cmake --install` into a temporary prefix, then examples/ built
# with find_package(tfm) (tfm::tfm and tfm::tfm_static) and with pkg-config, run on the golden fixtures.
#   run.sh BUILD_DIR SOURCE_DIR [EXTRA_CXX_FLAGS]
set -euo pipefail
build=$1 src=$2 flags=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" --component tfm > "$tmp/install.log"
for f in include/tfm/tfm.h lib/libtfm.a lib/cmake/tfm/tfmConfig.cmake lib/pkgconfig/tfm.pc; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
ls "$prefix"/lib/libtfm.so* > /dev/null
# The public headers stand alone: no internal header, no third-party header.
if grep -h '#include' "$prefix"/include/tfm/*.h | grep -v -E '#include [<"](tfm/[a-z_]+\.h|[a-z_]+)[>"]'; then
  echo "public headers include something outside <tfm/...> and the standard library"; exit 1
fi

# A model folder with a tokenizer: the BERT golden model (vocab_size 60) and a 60-token vocabulary.
model=$tmp/bert
mkdir -p "$model"
cp "$src/tests/fixtures/bert/config.json" "$src/tests/fixtures/bert/model.safetensors" "$model/"
printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]' the a cat dog sat on mat hello world time flies like an \
  arrow i have dream is was good bad day night red blue big small run '##s' '##ing' '##ed' . , '!' '?' and or \
  not this that it he she we they you my your house tree car book read write sun > "$model/vocab.txt"

d2l=$src/tests/fixtures/d2l_trained
expected=$(/usr/bin/python3 -c 'import json,sys; print("\n".join(p["pred"] for p in json.load(open(sys.argv[1]))["predictions"][:4]))' "$d2l/predictions.json")

check() {  # check NAME EMBED_BIN TRANSLATE_BIN
  local name=$1 embed=$2 translate=$3
  "$embed" "$model" "the cat sat on the mat" "a dog sat on a mat" "hello world" > "$tmp/$name.embed"
  grep -q 'bert encoder, embeddings \[3, 32\]' "$tmp/$name.embed" || { cat "$tmp/$name.embed"; echo "$name: embed"; exit 1; }
  [ "$(grep -c 'norm 1.0000' "$tmp/$name.embed")" = 3 ] || { cat "$tmp/$name.embed"; echo "$name: norms"; exit 1; }
  "$translate" "$d2l" "go ." "i lost ." "he's calm ." "i'm home ." > "$tmp/$name.translate"
  got=$(cut -f1 "$tmp/$name.translate")
  [ "$got" = "$expected" ] || { printf 'got:\n%s\nexpected (PyTorch):\n%s\n' "$got" "$expected"; echo "$name: translate"; exit 1; }
  # Errors reach the program as exceptions with the library's message.
  if "$translate" "$tmp/missing" "go ." 2> "$tmp/$name.err"; then echo "$name: missing folder accepted"; exit 1; fi
  grep -q "missing: no such model folder" "$tmp/$name.err" || { cat "$tmp/$name.err"; exit 1; }
  echo "$name: ok"
}

for kind in shared static; do
  static=OFF; [ $kind = static ] && static=ON
  cmake -S "$src/examples" -B "$tmp/build-$kind" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
        -DTFM_EXAMPLES_STATIC=$static -DCMAKE_CXX_FLAGS="$flags" > "$tmp/configure-$kind.log"
  cmake --build "$tmp/build-$kind" -j 2 > "$tmp/build-$kind.log" || { cat "$tmp/build-$kind.log"; exit 1; }
  check "find_package $kind" "$tmp/build-$kind/embed" "$tmp/build-$kind/translate"
done
# The shared build loads the installed libtfm.so, not the build tree's.
libs=$(ldd "$tmp/build-shared/embed")  # not piped into grep -q: under pipefail an early exit is a SIGPIPE failure
grep -q "$prefix/lib/libtfm.so" <<< "$libs" || { echo "$libs"; exit 1; }

# pkg-config, as a Makefile would use it.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
for ex in embed translate; do
  # shellcheck disable=SC2046
  g++ -std=c++17 $flags "$src/examples/$ex.cpp" -o "$tmp/pc-$ex" $(pkg-config --cflags --libs tfm) \
      -Wl,-rpath,"$prefix/lib"
done
check "pkg-config" "$tmp/pc-embed" "$tmp/pc-translate"
# pkg-config --static with libtfm.a (a static consumer): every library it names must exist. libcurl, cairo and Open
# MPI are not named: libtfm opens them at run time when used (src/core/shared_library.h).
for ex in embed translate; do
  # shellcheck disable=SC2046
  g++ -std=c++17 $flags "$src/examples/$ex.cpp" -o "$tmp/pcs-$ex" $(pkg-config --cflags tfm) \
      -Wl,-Bstatic -ltfm -Wl,-Bdynamic $(pkg-config --static --libs-only-L --libs-only-other tfm) \
      $(pkg-config --static --libs-only-l tfm | sed 's/-ltfm //') \
      || { echo "pkg-config --static: link failed"; exit 1; }
done
if ldd "$tmp/pcs-embed" | grep -q libtfm.so; then echo "pkg-config --static: linked libtfm.so"; exit 1; fi
check "pkg-config --static" "$tmp/pcs-embed" "$tmp/pcs-translate"
cmp "$tmp/find_package shared.embed" "$tmp/find_package static.embed"
cmp "$tmp/find_package shared.embed" "$tmp/pkg-config.embed"
