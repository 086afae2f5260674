// Run-time choice of the instruction set for our own vectorised kernels (LayerNorm, add + LayerNorm, softmax,
// GELU, blocked attention). The build baseline stays x86-64-v3 (AVX2 + FMA); each such kernel is compiled twice
// from one body: once for the baseline and once with __attribute__((target(...AVX-512...))) at 512-bit vector
// width (TFM_TARGET_AVX512), and the copy is chosen per call from kernel_isa().
//
// kernel_isa() is decided once: Avx512 when the CPU has AVX-512 F/BW/VL/DQ (__builtin_cpu_supports), else Avx2.
// The environment variable TFM_ISA caps the choice (one-line warning on stderr for an unknown value or one above
// the CPU): TFM_ISA=avx2 forces the baseline copies; TFM_ISA=avx512 the AVX-512 copies without the AVX512-BF16
// dot products (kernel_bf16_dot() false); TFM_ISA=avx512_bf16 (or unset) everything the CPU has. On an
// AVX2-only CPU (Zen 3, Haswell) every kernel runs its baseline copy: 8-wide AVX2 FMA code, the same results up
// to summation order. oneDNN's GEMMs choose their kernels themselves (ops/gemm.h) and ignore TFM_ISA: cap them
// with ONEDNN_MAX_CPU_ISA (AVX512_CORE_BF16 gives an AMX machine the code path of an AVX512-BF16 CPU without
// AMX, as Zen 4/5).
#pragma once

namespace tfm::ops {

enum class KernelIsa { Avx2, Avx512 };

KernelIsa kernel_isa();
// Overrides the choice for this process (tests run both copies). Throws std::invalid_argument when asked for
// Avx512 on a CPU without it.
void set_kernel_isa(KernelIsa isa);
bool cpu_has_avx512();
const char* kernel_isa_name(KernelIsa isa);  // "avx2", "avx512"

// Whether the bf16 kernels (attention of a bf16 model: AttentionDims::bf16) use AVX512-BF16 dot products
// (vdpbf16ps, fp32 accumulation): the CPU has AVX512_BF16, kernel_isa() is Avx512 and TFM_ISA does not cap it.
// Otherwise those kernels run their fp32 copies. set_kernel_bf16_dot overrides the cap (tests run both); true
// on a CPU without AVX512_BF16 throws std::invalid_argument.
bool cpu_has_avx512_bf16();
bool kernel_bf16_dot();
void set_kernel_bf16_dot(bool on);

}  // namespace tfm::ops

// Function attribute for the AVX-512 copy of a kernel. Bodies meant for both copies are written as
// TFM_ALWAYS_INLINE functions (inlining a baseline function into an AVX-512 one is allowed), so they are
// vectorised for the caller's target. OpenMP parallel regions must stay in baseline code (the outlined region
// would not inherit the target), so callers parallelise outside and call the per-ISA copy per chunk.
#define TFM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")))
#define TFM_ALWAYS_INLINE inline __attribute__((always_inline))
// The AVX-512 copy with AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16), for kernels chosen by kernel_bf16_dot().
#define TFM_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,prefer-vector-width=512")))
