// libFuzzer target: recipe checkpoints (train_recipe --resume) and Seq2SeqModel::load of a small model.
// Entry point and checks: tfm::fuzz::checkpoint_entry in fuzz_entries.h. Build and run: scripts/fuzz.sh (FUZZING.md).
#include "fuzz_entries.h"

// With TFM_FUZZ_WRITE_SEEDS=DIR set, writes valid seed inputs into DIR first (scripts/fuzz.sh does this).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("TFM_FUZZ_WRITE_SEEDS")) tfm::fuzz::write_checkpoint_seeds(dir);
  return 0;
}
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::checkpoint_entry(data, size);
  return 0;
}
