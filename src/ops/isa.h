// Run-time choice of the instruction set for our own vectorised kernels (LayerNorm, add + LayerNorm, softmax,
// GELU, blocked attention). The build baseline stays x86-64-v3 (AVX2 + FMA); each such kernel is compiled twice
// from one body: once for the baseline and once with __attribute__((target(...AVX-512...))) at 512-bit vector
// width (TFM_TARGET_AVX512), and the copy is chosen per call from kernel_isa().
//
// kernel_isa() is decided once: Avx512 when the CPU has AVX-512 F/BW/VL/DQ (__builtin_cpu_supports), else Avx2;
// the environment variable TFM_ISA=avx2 forces the baseline copy (TFM_ISA=avx512 on a CPU without it is ignored
// with a one-line warning on stderr). On an AVX2-only CPU (Zen 3, Haswell) every kernel runs its baseline copy:
// 8-wide AVX2 FMA code, the same results up to summation order. oneDNN's GEMMs choose their kernels themselves
// (ops/gemm.h) and ignore TFM_ISA.
#pragma once

namespace tfm::ops {

enum class KernelIsa { Avx2, Avx512 };

KernelIsa kernel_isa();
// Overrides the choice for this process (tests run both copies). Throws std::invalid_argument when asked for
// Avx512 on a CPU without it.
void set_kernel_isa(KernelIsa isa);
bool cpu_has_avx512();
const char* kernel_isa_name(KernelIsa isa);  // "avx2", "avx512"

}  // namespace tfm::ops

// Function attribute for the AVX-512 copy of a kernel. Bodies meant for both copies are written as
// TFM_ALWAYS_INLINE functions (inlining a baseline function into an AVX-512 one is allowed), so they are
// vectorised for the caller's target. OpenMP parallel regions must stay in baseline code (the outlined region
// would not inherit the target), so callers parallelise outside and call the per-ISA copy per chunk.
#define TFM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")))
#define TFM_ALWAYS_INLINE inline __attribute__((always_inline))
