#include "ops/layer_norm.h"

#include <cmath>
#include <vector>

#include "ops/isa.h"
#include "ops/quantize_row.h"

namespace tfm::ops {
namespace {

// Rows [n0, n1) of LayerNorm(x + residual) (residual null: LayerNorm(x)). One body, compiled per ISA.
TFM_ALWAYS_INLINE void ln_rows(float* out, float* sum_out, float* mean, float* rstd, const float* inp,
                               const float* res, const float* weight, const float* bias, int64_t n0, int64_t n1,
                               int64_t C, float eps, PreparedInput* q) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* x = inp + n * C;
    const float* r = res ? res + n * C : nullptr;
    float* y = out + n * C;
    // Two passes (mean, then centred variance) for accuracy on rows with a large mean; the row is in L1.
    float s = 0.0f;
    if (r) {
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += x[c] + r[c];
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += x[c];
    }
    const float m = s / (float)C;
    float v = 0.0f;
    if (r) {
#pragma omp simd reduction(+ : v)
      for (int64_t c = 0; c < C; ++c) {
        float d = x[c] + r[c] - m;
        v += d * d;
      }
    } else {
#pragma omp simd reduction(+ : v)
      for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    }
    const float rs = 1.0f / std::sqrt(v / (float)C + eps);
    if (!r) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * rs * weight[c] + bias[c];
    } else if (sum_out) {
      float* so = sum_out + n * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        float t = x[c] + r[c];
        so[c] = t;
        y[c] = (t - m) * rs * weight[c] + bias[c];
      }
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) y[c] = (x[c] + r[c] - m) * rs * weight[c] + bias[c];
    }
    if (q) detail::prepare_row(*q, n, y);  // the next product's input, from the row while it is in L1
    if (mean) mean[n] = m;
    if (rstd) rstd[n] = rs;
  }
}

using LnRows = void (*)(float*, float*, float*, float*, const float*, const float*, const float*, const float*,
                        int64_t, int64_t, int64_t, float, PreparedInput*);
void ln_rows_avx2(float* out, float* sum_out, float* mean, float* rstd, const float* inp, const float* res,
                  const float* weight, const float* bias, int64_t n0, int64_t n1, int64_t C, float eps,
                  PreparedInput* q) {
  ln_rows(out, sum_out, mean, rstd, inp, res, weight, bias, n0, n1, C, eps, q);
}
TFM_TARGET_AVX512 void ln_rows_avx512(float* out, float* sum_out, float* mean, float* rstd, const float* inp,
                                      const float* res, const float* weight, const float* bias, int64_t n0,
                                      int64_t n1, int64_t C, float eps, PreparedInput* q) {
  ln_rows(out, sum_out, mean, rstd, inp, res, weight, bias, n0, n1, C, eps, q);
}

void ln_dispatch(float* out, float* sum_out, float* mean, float* rstd, const float* inp, const float* res,
                 const float* weight, const float* bias, int64_t N, int64_t C, float eps,
                 PreparedInput* q = nullptr) {
  LnRows fn = kernel_isa() == KernelIsa::Avx512 ? ln_rows_avx512 : ln_rows_avx2;
  if (N * C <= 32768 || N < 2) {
    fn(out, sum_out, mean, rstd, inp, res, weight, bias, 0, N, C, eps, q);
    return;
  }
  const int64_t chunk = 8;  // rows per task: one call per chunk, not per row
#pragma omp parallel for schedule(static)
  for (int64_t n0 = 0; n0 < N; n0 += chunk)
    fn(out, sum_out, mean, rstd, inp, res, weight, bias, n0, n0 + chunk < N ? n0 + chunk : N, C, eps, q);
}

}  // namespace

void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int64_t N, int64_t C, float eps) {
  ln_dispatch(out, nullptr, mean, rstd, inp, nullptr, weight, bias, N, C, eps);
}

void add_layer_norm_forward(float* out, float* sum_out, const float* x, const float* residual, const float* weight,
                            const float* bias, int64_t N, int64_t C, float eps) {
  ln_dispatch(out, sum_out, nullptr, nullptr, x, residual, weight, bias, N, C, eps);
}

void layer_norm_forward_to(float* out, float* sum_out, const float* x, const float* residual, const float* weight,
                           const float* bias, int64_t N, int64_t C, float eps, ComputeType ct,
                           PreparedInput& prepared) {
  prepared.reset(ct, N, C);
  ln_dispatch(out, residual ? sum_out : nullptr, nullptr, nullptr, x, residual, weight, bias, N, C, eps,
              ct == ComputeType::F32 ? nullptr : &prepared);
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
    }
    if (dbias)
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dbias[c] += dy[c];
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
