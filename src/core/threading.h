// Thread control: OpenMP for our kernels and for oneDNN (built on the same OpenMP runtime). One knob (`--threads`).
#pragma once

namespace tfm {
// Sets the calling thread's count for OpenMP regions, which oneDNN GEMMs use too: the one place threads are set
// (the CLI's --threads, the API's `threads` options). n <= 0 means the process default: OMP_NUM_THREADS when set,
// else all cores.
void set_num_threads(int n);
int get_num_threads();
}  // namespace tfm
