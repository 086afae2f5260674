#include "ops/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threading.h"
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

namespace {

// Rows [n0, n1) of LayerNorm's backward: dinp written, the rows' dweight / dbias terms added into dw / db.
// One body, compiled per ISA.
TFM_ALWAYS_INLINE void ln_backward_rows(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                        const float* weight, const float* mean, const float* rstd, int64_t n0,
                                        int64_t n1, int64_t C) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    const float m = mean[n], r = rstd[n];
    // dxhat = dy * w; dx = r * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    float sum_d = 0.0f, sum_dx = 0.0f;
#pragma omp simd reduction(+ : sum_d, sum_dx)
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * r;
      const float d = dy[c] * weight[c];
      sum_d += d;
      sum_dx += d * xhat;
      dw[c] += dy[c] * xhat;
    }
    if (db)
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) db[c] += dy[c];
    sum_d /= (float)C;
    sum_dx /= (float)C;
    float* dx = dinp + n * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * r;
      dx[c] = r * (dy[c] * weight[c] - sum_d - xhat * sum_dx);
    }
  }
}

using LnBackwardRows = void (*)(float*, float*, float*, const float*, const float*, const float*, const float*,
                                const float*, int64_t, int64_t, int64_t);
void ln_backward_rows_avx2(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                           const float* weight, const float* mean, const float* rstd, int64_t n0, int64_t n1,
                           int64_t C) {
  ln_backward_rows(dinp, dw, db, dout, inp, weight, mean, rstd, n0, n1, C);
}
TFM_TARGET_AVX512 void ln_backward_rows_avx512(float* dinp, float* dw, float* db, const float* dout,
                                               const float* inp, const float* weight, const float* mean,
                                               const float* rstd, int64_t n0, int64_t n1, int64_t C) {
  ln_backward_rows(dinp, dw, db, dout, inp, weight, mean, rstd, n0, n1, C);
}

}  // namespace

void layer_norm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  LnBackwardRows fn = kernel_isa() == KernelIsa::Avx512 ? ln_backward_rows_avx512 : ln_backward_rows_avx2;
  // Blocks of a fixed number of rows, each summing its weight / bias terms into its own partials, which are then
  // added in block order: the result does not depend on the thread count or the schedule.
  const int64_t rows = 64, blocks = (N + rows - 1) / rows;
  if (blocks <= 1 || N * C <= 32768) {
    fn(dinp, dweight, dbias, dout, inp, weight, mean, rstd, 0, N, C);
    return;
  }
  thread_local std::vector<float> partial;
  const int64_t stride = 2 * C;  // dw | db of a block
  partial.assign(blocks * stride, 0.0f);
  float* part = partial.data();
#pragma omp parallel for schedule(static) if (parallel_worth(N * C))
  for (int64_t b = 0; b < blocks; ++b)
    fn(dinp, part + b * stride, dbias ? part + b * stride + C : nullptr, dout, inp, weight, mean, rstd, b * rows,
       std::min(N, (b + 1) * rows), C);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* pw = part + b * stride;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dweight[c] += pw[c];
    if (dbias)
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dbias[c] += pw[C + c];
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

void layer_norm_backward_ref(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, int64_t N, int64_t C, float eps) {
  std::vector<double> dw(C, 0.0), db(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    const double r = 1.0 / std::sqrt(v / C + eps);
    double sd = 0, sdx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x[c] - m) * r, d = (double)dy[c] * weight[c];
      sd += d;
      sdx += d * xh;
      dw[c] += dy[c] * xh;
      db[c] += dy[c];
    }
    for (int64_t c = 0; c < C; ++c)
      dinp[n * C + c] = (float)(r * ((double)dy[c] * weight[c] - sd / C - (x[c] - m) * r * sdx / C));
  }
  for (int64_t c = 0; c < C; ++c) {
    dweight[c] += (float)dw[c];
    if (dbias) dbias[c] += (float)db[c];
  }
}

}  // namespace tfm::ops
