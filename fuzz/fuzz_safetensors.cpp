// libFuzzer target: safetensors header and data_offsets validation (SafeTensors::open, get of every tensor).
// Entry point and checks: tfm::fuzz::safetensors_entry in fuzz_entries.h. Build and run: scripts/fuzz.sh (FUZZING.md).
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::safetensors_entry(data, size);
  return 0;
}
