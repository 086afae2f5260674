#include "core/threading.h"

#include <omp.h>

namespace tfm {
// oneDNN (Debian libdnnl, DNNL_CPU_RUNTIME = OMP, libgomp) takes its thread count from OpenMP, so this one knob
// sets both our kernels and every GEMM.
void set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
}
int get_num_threads() { return omp_get_max_threads(); }
}  // namespace tfm
