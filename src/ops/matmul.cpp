#include "ops/matmul.h"

#include "core/threading.h"
#include "ops/gemm.h"

namespace tfm::ops {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t in_features, int64_t out_features) {
  if (N == 0) return;
  float beta = 0.0f;
  if (bias) {
    // Seed out with the bias so the GEMM adds onto it (beta = 1): one pass over out instead of two.
#pragma omp parallel for if (parallel_worth(N * out_features))
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < out_features; ++o) out[n * out_features + o] = bias[o];
    beta = 1.0f;
  }
  SerialScope serial(serial_below(N * out_features * in_features));
  gemm(false, true, N, out_features, in_features, 1.0f, inp, in_features, weight, in_features, beta, out, out_features);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t in_features, int64_t out_features,
                     bool accumulate_dinp) {
  if (N == 0) return;
  SerialScope serial(serial_below(N * out_features * in_features));  // both products have this size
  if (dinp)
    gemm(false, false, N, in_features, out_features, 1.0f, dout, out_features, weight, in_features,
         accumulate_dinp ? 1.0f : 0.0f, dinp, in_features);
  if (dweight)
    gemm(true, false, out_features, in_features, N, 1.0f, dout, out_features, inp, in_features, 1.0f, dweight,
         in_features);
  if (dbias) bias_grad(dbias, dout, N, out_features, out_features);
}

void bias_grad(float* dbias, const float* d, int64_t N, int64_t C, int64_t ld) {
#pragma omp parallel for schedule(static) if (parallel_worth(N * C) && C > 64)
  for (int64_t c0 = 0; c0 < C; c0 += 64) {
    const int64_t c1 = c0 + 64 < C ? c0 + 64 : C;
    float acc[64] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* r = d + n * ld;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += r[c];
    }
    for (int64_t c = c0; c < c1; ++c) dbias[c] += acc[c - c0];
  }
}

void linear_forward_ref(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                        int64_t in_features, int64_t out_features) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out_features; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (int64_t i = 0; i < in_features; ++i) acc += (double)inp[n * in_features + i] * weight[o * in_features + i];
      out[n * out_features + o] = (float)acc;
    }
}

}  // namespace tfm::ops
