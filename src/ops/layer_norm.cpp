#include "ops/layer_norm.h"

#include <cmath>
#include <vector>

namespace tfm::ops {

void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int64_t N, int64_t C, float eps) {
#pragma omp parallel for if (N * C > 32768)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    // Two passes (mean, then centred variance) for accuracy on rows with a large mean.
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c];
    float m = s / (float)C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    float r = 1.0f / std::sqrt(v / (float)C + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * r * weight[c] + bias[c];
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = r;
  }
}

void layer_norm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float m = mean[n], r = rstd[n];
    // dxhat = dy * w; dx = r * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    float sum_d = 0.0f, sum_dx = 0.0f;
#pragma omp simd reduction(+ : sum_d, sum_dx)
    for (int64_t c = 0; c < C; ++c) {
      float xhat = (x[c] - m) * r;
      float d = dy[c] * weight[c];
      sum_d += d;
      sum_dx += d * xhat;
      dweight[c] += dy[c] * xhat;
      dbias[c] += dy[c];
    }
    sum_d /= (float)C;
    sum_dx /= (float)C;
    float* dx = dinp + n * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      float xhat = (x[c] - m) * r;
      dx[c] = r * (dy[c] * weight[c] - sum_d - xhat * sum_dx);
    }
  }
}

void layer_norm_forward_ref(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                            int64_t C, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += inp[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (inp[n * C + c] - m) * (inp[n * C + c] - m);
    v /= C;
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = (float)((inp[n * C + c] - m) / std::sqrt(v + eps) * weight[c] + bias[c]);
  }
}

}  // namespace tfm::ops
