// libFuzzer target: vocabulary files: Vocab::load, BertTokenizer::from_vocab_file and ::from_tokenizer_json.
// Entry point and checks: tfm::fuzz::vocab_load_entry in fuzz_entries.h. Build and run: scripts/fuzz.sh (FUZZING.md).
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::vocab_load_entry(data, size);
  return 0;
}
