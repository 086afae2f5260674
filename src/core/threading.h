// Thread control: OpenMP for our kernels and for oneDNN (built on the same OpenMP runtime). The one place that sets
// thread counts: the CLI's --threads and the public API's `threads` options both come here.
#pragma once

namespace tfm {
// The process default: OMP_NUM_THREADS as the process started, else every core available to it (libgomp's own
// default), read once when the library is loaded, before any call changed a thread's setting.
int default_num_threads();
// Sets the calling thread's OpenMP regions (and so its oneDNN GEMMs) to n threads; n <= 0 restores
// default_num_threads(). omp_set_num_threads is per calling thread, so concurrent callers with different counts
// do not disturb each other.
void set_num_threads(int n);
int get_num_threads();
}  // namespace tfm
