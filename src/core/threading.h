// Thread control: OpenMP for our kernels and for oneDNN (built on the same OpenMP runtime). The one place that sets
// thread counts: the CLI's --threads and the public API's `threads` options both come here.
//
// Parallel grain. Opening an OpenMP region costs a few microseconds while the other threads still spin from the
// previous one, tens of microseconds once they sleep, and far more when the cores are shared with another process
// (a worker spinning between regions then takes the core from the thread doing the serial work). A small model's
// training step (d2l: 640 token rows of 32 features) is a few hundred kernels of 5-100 us each, so a kernel opens a
// region only when its work is worth it: parallel_worth(elements) for element-wise kernels (LayerNorm, dropout,
// softmax / cross-entropy, Adam, bias and residual passes), parallel_worth_macs(multiply-adds) for products
// (GEMMs through serial_below, the attention loops). Below the grain a kernel runs on the calling thread; the
// results are the same either way for kernels whose rows are independent.
#pragma once
#include <cstdint>

namespace tfm {
// The process default: OMP_NUM_THREADS as the process started, else every core available to it (libgomp's own
// default), read once when the library is loaded, before any call changed a thread's setting.
int default_num_threads();
// Sets the calling thread's OpenMP regions (and so its oneDNN GEMMs) to n threads; n <= 0 restores
// default_num_threads(). omp_set_num_threads is per calling thread, so concurrent callers with different counts
// do not disturb each other.
void set_num_threads(int n);
int get_num_threads();

// Element-wise work (elements, each a few flops) below which a kernel runs on one thread: about 50 us on one core.
constexpr int64_t kParallelGrainElements = int64_t(1) << 18;
// Multiply-add work below which a product runs on one thread: about 40-80 us of a oneDNN sgemm on one core.
constexpr int64_t kParallelGrainMacs = int64_t(1) << 22;
constexpr bool parallel_worth(int64_t elements) { return elements >= kParallelGrainElements; }
constexpr bool parallel_worth_macs(int64_t macs) { return macs >= kParallelGrainMacs; }

// While alive and `active`, the calling thread's OpenMP regions, and so its oneDNN calls, run on one thread
// (oneDNN opens no region then); the thread's previous count comes back at the end of the scope.
class SerialScope {
 public:
  explicit SerialScope(bool active = true);
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  int saved_ = 0;  // 0: not active
};
// A oneDNN product of `macs` multiply-adds: serial below the grain (SerialScope(serial_below(macs))).
constexpr bool serial_below(int64_t macs) { return !parallel_worth_macs(macs); }
}  // namespace tfm
