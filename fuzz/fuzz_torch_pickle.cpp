// libFuzzer target: pytorch_model.bin archives (TorchCheckpoint::open, the restricted unpickler, get of every tensor).
// Entry point and checks: tfm::fuzz::torch_pickle_entry in fuzz_entries.h. Build and run: scripts/fuzz.sh (FUZZING.md).
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::torch_pickle_entry(data, size);
  return 0;
}
