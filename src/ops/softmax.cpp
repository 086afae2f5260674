#include "ops/softmax.h"

#include <cmath>

#include "ops/isa.h"
#include "ops/vec_math.h"

namespace tfm::ops {

namespace {

TFM_ALWAYS_INLINE void softmax_row_impl(float* x, int64_t n) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    x[j] = vm::fast_exp(x[j] - mx);
    sum += x[j];
  }
  float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
}

// Rows [r0, r1) of softmax(inp) into out, per ISA (ops/isa.h).
TFM_ALWAYS_INLINE void softmax_rows_impl(float* out, const float* inp, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) {
    float* o = out + r * cols;
    const float* x = inp + r * cols;
    if (o != x)
      for (int64_t j = 0; j < cols; ++j) o[j] = x[j];
    softmax_row_impl(o, cols);
  }
}
void softmax_rows_avx2(float* out, const float* inp, int64_t r0, int64_t r1, int64_t cols) {
  softmax_rows_impl(out, inp, r0, r1, cols);
}
TFM_TARGET_AVX512 void softmax_rows_avx512(float* out, const float* inp, int64_t r0, int64_t r1, int64_t cols) {
  softmax_rows_impl(out, inp, r0, r1, cols);
}
using SoftmaxRows = void (*)(float*, const float*, int64_t, int64_t, int64_t);
SoftmaxRows softmax_rows() { return kernel_isa() == KernelIsa::Avx512 ? softmax_rows_avx512 : softmax_rows_avx2; }

}  // namespace

void softmax_row(float* x, int64_t n) { softmax_rows()(x, x, 0, 1, n); }

void softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols) {
  SoftmaxRows fn = softmax_rows();
  if (rows * cols <= 32768 || rows < 2) {
    fn(out, inp, 0, rows, cols);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += 8) fn(out, inp, r0, r0 + 8 < rows ? r0 + 8 : rows, cols);
}

void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float* y = out + r * cols;
    const float* dy = dout + r * cols;
    float dot = 0.0f;
    for (int64_t j = 0; j < cols; ++j) dot += dy[j] * y[j];
    for (int64_t j = 0; j < cols; ++j) dinp[r * cols + j] = y[j] * (dy[j] - dot);
  }
}

void softmax_forward_ref(float* out, const float* inp, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < cols; ++j) mx = std::fmax(mx, (double)inp[r * cols + j]);
    for (int64_t j = 0; j < cols; ++j) sum += std::exp((double)inp[r * cols + j] - mx);
    for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = (float)(std::exp((double)inp[r * cols + j] - mx) / sum);
  }
}

}  // namespace tfm::ops
