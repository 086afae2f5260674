// Row kernels shared by every producer of a GEMM input (ops/gemm.h PreparedInput): PackedLinear's own conversion
// of fp32 input, add + LayerNorm (ops/layer_norm.h) and the int8 dequantisation epilogue. One body each,
// TFM_ALWAYS_INLINE, so that it is vectorised for the ISA copy that inlines it (ops/isa.h) and every producer
// writes bit for bit what PackedLinear would compute from the fp32 row. Internal to src/ops.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/isa.h"

namespace tfm::ops::detail {

// max |x[i]|, or NaN when x holds a NaN or an infinity (x * 0 is NaN exactly for those; fmax alone would drop a
// NaN). Every caller turns a NaN scale into NaN outputs, as the fp32 product gives, never a finite answer.
TFM_ALWAYS_INLINE float row_absmax(const float* x, int64_t n) {
  // Plain selects, not std::fmax / std::fmin: GCC vectorises these (vmaxps), while fmax's NaN rules made it call
  // libm per element (20x slower); a NaN that the select drops is caught by `bad`.
  float mx = 0.0f, bad = 0.0f;
#pragma omp simd reduction(max : mx) reduction(+ : bad)
  for (int64_t i = 0; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    mx = a > mx ? a : mx;
    bad += x[i] * 0.0f;
  }
  return bad == 0.0f ? mx : NAN;
}

// Symmetric int8 scale of a finite max |x|: max / qmax, or 1 for an all-zero row. qmax is 127, or 63 for the 7-bit
// weights of CPUs without VNNI (ops/gemm.h int8_weight_max).
TFM_ALWAYS_INLINE float s8_scale_of(float mx, float qmax = 127.0f) { return mx > 0.0f ? mx / qmax : 1.0f; }

// q[i] = round_half_even(x[i] * inv) clamped to [-qmax, qmax]. Adding and subtracting 1.5 * 2^23 rounds to nearest
// even without a libm call, so the loop vectorises.
TFM_ALWAYS_INLINE void quantize_s8(int8_t* q, const float* x, int64_t n, float inv, float qmax = 127.0f) {
  constexpr float kRound = 12582912.0f;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float r = (x[i] * inv + kRound) - kRound;
    r = r > qmax ? qmax : r;
    r = r < -qmax ? -qmax : r;
    q[i] = (int8_t)(int32_t)r;
  }
}

// One row with its own scale, given its max |x| (row_absmax's value: NaN when the row holds a NaN or an
// infinity); returns the scale, NaN (and q all 0) for such a row, so that the row's outputs come out NaN.
TFM_ALWAYS_INLINE float quantize_row_s8_given_max(int8_t* q, const float* x, int64_t n, float mx) {
  if (!std::isfinite(mx)) {
    std::memset(q, 0, (size_t)n);
    return NAN;
  }
  const float scale = s8_scale_of(mx);
  quantize_s8(q, x, n, 1.0f / scale);
  return scale;
}
// The same, finding the max itself.
TFM_ALWAYS_INLINE float quantize_row_s8(int8_t* q, const float* x, int64_t n) {
  return quantize_row_s8_given_max(q, x, n, row_absmax(x, n));
}

TFM_ALWAYS_INLINE void row_to_bf16(uint16_t* d, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = to_bf16(x[i]);
}

// Row r of p (p.cols values) from x, in p's type (nothing for F32).
TFM_ALWAYS_INLINE void prepare_row(PreparedInput& p, int64_t r, const float* x) {
  if (p.ct == ComputeType::BF16)
    row_to_bf16(p.bf16.data() + r * p.cols, x, p.cols);
  else if (p.ct == ComputeType::I8)
    p.scale[r] = quantize_row_s8(p.s8.data() + r * p.cols, x, p.cols);
}

}  // namespace tfm::ops::detail
