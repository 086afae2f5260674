#include "ops/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace tfm::ops {
namespace {

KernelIsa detect() {
  const bool has = cpu_has_avx512();
  const char* env = std::getenv("TFM_ISA");
  if (env && *env) {
    if (std::strcmp(env, "avx2") == 0) return KernelIsa::Avx2;
    if (std::strcmp(env, "avx512") != 0)
      std::fprintf(stderr, "warning: TFM_ISA='%s' ignored (expected avx2 or avx512)\n", env);
    else if (!has)
      std::fprintf(stderr, "warning: TFM_ISA=avx512 ignored: this CPU has no AVX-512 F/BW/VL/DQ\n");
  }
  return has ? KernelIsa::Avx512 : KernelIsa::Avx2;
}

std::atomic<int>& current() {
  static std::atomic<int> isa{(int)detect()};  // read once, thread-safe initialisation
  return isa;
}

}  // namespace

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

KernelIsa kernel_isa() { return (KernelIsa)current().load(std::memory_order_relaxed); }

void set_kernel_isa(KernelIsa isa) {
  if (isa == KernelIsa::Avx512 && !cpu_has_avx512())
    throw std::invalid_argument("set_kernel_isa: this CPU has no AVX-512 F/BW/VL/DQ");
  current().store((int)isa, std::memory_order_relaxed);
}

const char* kernel_isa_name(KernelIsa isa) { return isa == KernelIsa::Avx512 ? "avx512" : "avx2"; }

}  // namespace tfm::ops
