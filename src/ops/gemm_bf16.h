// bf16 GEMM for mixed-precision training (recipe key "precision": "bf16"): the operands are rounded to bf16,
// the product is accumulated in fp32 and written in fp32, through a oneDNN matmul (AMX or AVX512_BF16 kernels).
// Weights stay fp32 (master copy) in the caller; only this product sees them in bf16.
#pragma once
#include <bit>
#include <cstdint>

namespace tfm::ops {

// Same contract as ops::gemm (row-major, op(A) [M, K], op(B) [K, N], C [M, N] with row stride ldc;
// beta = 0 ignores C), except that A and B are rounded to bf16 (round to nearest even, as torch's
// .to(torch.bfloat16)) before the product. alpha and beta are applied in fp32. Deterministic for the same
// shapes, machine and thread count. Call from outside OpenMP parallel regions (oneDNN parallelises it).
// Throws std::runtime_error when this CPU has no bf16 matmul (see require_bf16_gemm).
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The two halves of gemm_bf16, so that an operand used by several products is converted once:
// dst (compact rows x cols) = bf16(src[r * ld + c]); and the product of operands so converted, each compact as
// stored (A is [K, M] when trans_a, B is [N, K] when trans_b).
void convert_to_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld);
void gemm_bf16_converted(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                         const uint16_t* B, float beta, float* C, int64_t ldc);
// The same with row strides lda, ldb (in elements) for operands that are column blocks of wider matrices.
void gemm_bf16_converted(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                         int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// True when oneDNN reports native bf16 arithmetic on this CPU (AVX512_BF16 or AMX): without it oneDNN would
// emulate bf16, slower than fp32, so mixed precision is refused there (unless bf16_gemm_emulated()).
bool has_bf16_gemm();
// True on a CPU without bf16 instructions when the environment variable TFM_EMULATE_BF16=1 was set at the first
// call (the test suite sets it, so that every mixed-precision test also runs on AVX2-only CPUs). The bf16
// products then run as fp32 products (ops::gemm) of the operands rounded to bf16: a product of two bf16 values
// is exact in fp32 and the sums are fp32, as in oneDNN's bf16 matmul, so the results differ from a native run
// only by summation order. Slower than fp32 training: a way to check, not to train. Read once per process.
bool bf16_gemm_emulated();
// has_bf16_gemm() || bf16_gemm_emulated(): whether mixed-precision training runs on this CPU.
inline bool bf16_gemm_available() { return has_bf16_gemm() || bf16_gemm_emulated(); }
// Throws std::runtime_error with a one-line message naming the CPU's ISA when neither has_bf16_gemm() nor
// bf16_gemm_emulated().
void require_bf16_gemm();

// fp32 -> bf16 bits, round to nearest even as torch's .to(torch.bfloat16); a NaN stays a quiet NaN. Branch-free
// so that conversion loops vectorise. The one conversion of the project (PackedLinear, gemm_bf16).
inline uint16_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}
// Round-to-nearest-even fp32 -> bf16 -> fp32 (tests build bf16 references with it).
float round_to_bf16(float x);

}  // namespace tfm::ops
