// Thread control: OpenMP for our kernels and for oneDNN (built on the same OpenMP runtime). One knob (`--threads`).
#pragma once

namespace tfm {
// Sets the thread count of OpenMP regions, which oneDNN GEMMs use too. n <= 0 means all cores.
void set_num_threads(int n);
int get_num_threads();
}  // namespace tfm
