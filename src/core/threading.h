// Thread control: OpenMP for our kernels, OpenBLAS for GEMM. One knob for both (`--threads`).
#pragma once

namespace tfm {
// Sets the thread count of OpenMP regions and of OpenBLAS. n <= 0 means all cores.
void set_num_threads(int n);
int get_num_threads();
}  // namespace tfm
