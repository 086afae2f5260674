// libFuzzer target: config.json readers (EncoderConfig, Seq2SeqConfig, RecipeConfig ::from_json) on parsed JSON.
// Entry point and checks: tfm::fuzz::config_entry in fuzz_entries.h. Build and run: scripts/fuzz.sh (FUZZING.md).
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::config_entry(data, size);
  return 0;
}
