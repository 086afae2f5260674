// libFuzzer target: the tokenizer engine with each fixture tokenizer kind (byte-level BPE, Unigram with
// Precompiled + Metaspace, WordPiece, WordLevel) on arbitrary bytes as text; a 0 byte splits off the pair, the
// last byte picks a max_length. Entry point and checks: tfm::fuzz::hf_tokenizer_entry in fuzz_entries.h. Build
// and run: scripts/fuzz.sh (FUZZING.md). tokenizer.json parsing itself is fuzzed by fuzz_vocab_load.
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tfm::fuzz::engine_tokenizers();
  return 0;
}
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::hf_tokenizer_entry(data, size);
  return 0;
}
