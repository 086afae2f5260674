#include "ops/softmax.h"

#include <cmath>

#include "ops/vec_math.h"

namespace tfm::ops {

void softmax_row(float* x, int64_t n) {
  float mx = -INFINITY;
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

void softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * cols;
    const float* x = inp + r * cols;
    if (o != x)
      for (int64_t j = 0; j < cols; ++j) o[j] = x[j];
    softmax_row(o, cols);
  }
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
