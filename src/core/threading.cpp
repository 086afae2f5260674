#include "core/threading.h"

#include <omp.h>

namespace tfm {
namespace {
// "All cores" as the process starts: OMP_NUM_THREADS if set, else the core count (read at library load, before
// any call changed a thread's setting).
const int kDefaultThreads = omp_get_max_threads();
}  // namespace

// oneDNN (Debian libdnnl, DNNL_CPU_RUNTIME = OMP, libgomp) takes its thread count from OpenMP, so this one knob
// sets both our kernels and every GEMM. omp_set_num_threads is per calling thread, so concurrent callers with
// different counts (API objects on several threads) do not disturb each other.
void set_num_threads(int n) {
  if (n <= 0) n = kDefaultThreads;
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}
int get_num_threads() { return omp_get_max_threads(); }
}  // namespace tfm
