#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/vec_math.h"

namespace tfm::ops {
namespace {

template <class KeyRow>
void step_kernel(float* out, float* probs, const float* q, int64_t R, int64_t heads, int64_t Dh, const StepKeys& kv,
                 KeyRow key_row) {
  const int64_t H = heads * Dh, Lk = kv.kv_len;
  const float scale = 1.0f / std::sqrt((float)Dh);
  const float* kbuf = kv.k;
  const float* vbuf = kv.v;
  const int64_t* vl = kv.valid_lens;
  // Threads only where there is work enough to pay for waking them (a one-sentence step is a few microseconds).
#pragma omp parallel if (R * heads * Lk * Dh >= (1 << 16))
  {
    thread_local std::vector<float> scratch;
    if ((int64_t)scratch.size() < Lk) scratch.resize(Lk);
#pragma omp for schedule(static)
    for (int64_t rh = 0; rh < R * heads; ++rh) {
      const int64_t r = rh / heads, h = rh % heads;
      const float* qr = q + r * H + h * Dh;
      float* o = out + r * H + h * Dh;
      float* s = probs ? probs + rh * Lk : scratch.data();
      const int64_t lim = std::min<int64_t>(std::max<int64_t>(vl ? vl[r] : Lk, 0), Lk);
      for (int64_t c = 0; c < Dh; ++c) o[c] = 0.0f;
      float mx = -INFINITY;
      for (int64_t j = 0; j < lim; ++j) {
        const float* kr = kbuf + key_row(r, j) * H + h * Dh;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < Dh; ++c) acc += qr[c] * kr[c];
        s[j] = scale * acc;
        mx = s[j] > mx ? s[j] : mx;
      }
      if (mx == -INFINITY) {  // no visible key: zeros, as attention_forward
        for (int64_t j = 0; j < Lk; ++j) s[j] = 0.0f;
        continue;
      }
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < lim; ++j) {
        s[j] = vm::fast_exp(s[j] - mx);
        sum += s[j];
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int64_t j = 0; j < lim; ++j) s[j] *= inv;
      for (int64_t j = lim; j < Lk; ++j) s[j] = 0.0f;
      for (int64_t j = 0; j < lim; ++j) {
        const float a = s[j];
        if (a == 0.0f) continue;
        const float* vr = vbuf + key_row(r, j) * H + h * Dh;
#pragma omp simd
        for (int64_t c = 0; c < Dh; ++c) o[c] += a * vr[c];
      }
    }
  }
}

int64_t key_row_of(const StepKeys& kv, int64_t r, int64_t j) {
  return kv.rows ? kv.rows[r * kv.rows_stride + j] : kv.blocks[r] * kv.kv_len + j;
}

}  // namespace

void attention_step(float* out, float* probs, const float* q, int64_t R, int64_t num_heads, int64_t head_dim,
                    const StepKeys& kv) {
  if (kv.rows) {
    const int64_t* rows = kv.rows;
    const int64_t stride = kv.rows_stride;
    step_kernel(out, probs, q, R, num_heads, head_dim, kv, [rows, stride](int64_t r, int64_t j) { return rows[r * stride + j]; });
  } else {
    const int64_t* blocks = kv.blocks;
    const int64_t Lk = kv.kv_len;
    step_kernel(out, probs, q, R, num_heads, head_dim, kv, [blocks, Lk](int64_t r, int64_t j) { return blocks[r] * Lk + j; });
  }
}

void attention_step_ref(float* out, float* probs, const float* q, int64_t R, int64_t num_heads, int64_t head_dim,
                        const StepKeys& kv) {
  const int64_t H = num_heads * head_dim, Lk = kv.kv_len, Dh = head_dim;
  const double scale = 1.0 / std::sqrt((double)Dh);
  std::vector<double> s(Lk);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < num_heads; ++h) {
      const int64_t lim = std::min<int64_t>(std::max<int64_t>(kv.valid_lens ? kv.valid_lens[r] : Lk, 0), Lk);
      double mx = -INFINITY;
      for (int64_t j = 0; j < lim; ++j) {
        const float* kr = kv.k + key_row_of(kv, r, j) * H + h * Dh;
        double acc = 0;
        for (int64_t c = 0; c < Dh; ++c) acc += (double)q[r * H + h * Dh + c] * kr[c];
        s[j] = acc * scale;
        mx = std::fmax(mx, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < Lk; ++j) {
        s[j] = j < lim ? std::exp(s[j] - mx) : 0.0;
        sum += s[j];
      }
      for (int64_t j = 0; j < Lk; ++j) {
        s[j] = sum > 0 ? s[j] / sum : 0.0;
        if (probs) probs[(r * num_heads + h) * Lk + j] = (float)s[j];
      }
      for (int64_t c = 0; c < Dh; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < lim; ++j) acc += s[j] * kv.v[key_row_of(kv, r, j) * H + h * Dh + c];
        out[r * H + h * Dh + c] = (float)acc;
      }
    }
}

}  // namespace tfm::ops
