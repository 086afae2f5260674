// libFuzzer target: BERT WordPiece tokenizer (bert-base-uncased) on arbitrary bytes as text; a 0 byte splits off the pair.
// Entry point and checks: tfm::fuzz::tokenizer_entry in fuzz_entries.h. Build and run: scripts/fuzz.sh (FUZZING.md).
#include "fuzz_entries.h"

// Load the tokenizer before the first input so its load time does not count against -timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tfm::fuzz::bert_tokenizer();
  return 0;
}
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::tokenizer_entry(data, size);
  return 0;
}
