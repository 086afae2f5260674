// libFuzzer target: line readers read_lines and read_nmt_file (plain or gzip input) and the d2l arrays built from them.
// Entry point and checks: tfm::fuzz::lines_entry in fuzz_entries.h. Build and run: scripts/fuzz.sh (FUZZING.md).
#include "fuzz_entries.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tfm::fuzz::lines_entry(data, size);
  return 0;
}
