#include "ops/isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace tfm::ops {
namespace {

// TFM_ISA's cap: 0 avx2, 1 avx512, 2 avx512_bf16 / unset / unknown (warned).
int env_cap() {
  const char* env = std::getenv("TFM_ISA");
  if (!env || !*env) return 2;
  if (std::strcmp(env, "avx2") == 0) return 0;
  if (std::strcmp(env, "avx512") == 0) return 1;
  if (std::strcmp(env, "avx512_bf16") == 0) return 2;
  std::fprintf(stderr, "warning: TFM_ISA='%s' ignored (expected avx2, avx512 or avx512_bf16)\n", env);
  return 2;
}

KernelIsa detect() {
  const bool has = cpu_has_avx512();
  const int cap = env_cap();
  if (cap == 0) return KernelIsa::Avx2;
  const char* env = std::getenv("TFM_ISA");
  if (env && *env && !has)
    std::fprintf(stderr, "warning: TFM_ISA=%s ignored: this CPU has no AVX-512 F/BW/VL/DQ\n", env);
  return has ? KernelIsa::Avx512 : KernelIsa::Avx2;
}

std::atomic<int>& current() {
  static std::atomic<int> isa{(int)detect()};  // read once, thread-safe initialisation
  return isa;
}

std::atomic<bool>& bf16_dot() {
  static std::atomic<bool> on{cpu_has_avx512_bf16() && env_cap() >= 2};
  return on;
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

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
}

bool kernel_bf16_dot() { return kernel_isa() == KernelIsa::Avx512 && bf16_dot().load(std::memory_order_relaxed); }

void set_kernel_bf16_dot(bool on) {
  if (on && !cpu_has_avx512_bf16())
    throw std::invalid_argument("set_kernel_bf16_dot: this CPU has no AVX512_BF16");
  bf16_dot().store(on, std::memory_order_relaxed);
}

const char* kernel_isa_name(KernelIsa isa) { return isa == KernelIsa::Avx512 ? "avx512" : "avx2"; }

}  // namespace tfm::ops
