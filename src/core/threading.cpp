#include "core/threading.h"

#include <omp.h>

namespace tfm {
namespace {
const int kDefaultThreads = omp_get_max_threads();
}  // namespace

int default_num_threads() { return kDefaultThreads; }

// oneDNN (Debian libdnnl, DNNL_CPU_RUNTIME = OMP, libgomp) takes its thread count from OpenMP, so this one knob
// sets both our kernels and every GEMM.
void set_num_threads(int n) {
  if (n <= 0) n = kDefaultThreads;
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}
int get_num_threads() { return omp_get_max_threads(); }
}  // namespace tfm

namespace tfm {
SerialScope::SerialScope(bool active) {
  if (!active) return;
  const int n = omp_get_max_threads();
  if (n <= 1) return;
  saved_ = n;
  omp_set_num_threads(1);
}
SerialScope::~SerialScope() {
  if (saved_) omp_set_num_threads(saved_);
}
}  // namespace tfm
