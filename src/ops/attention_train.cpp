#include "ops/attention_train.h"

#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/vec_math.h"

namespace tfm::ops {

namespace {

struct Resolved {
  int64_t B, H, Lq, Lk, Dh, q_ld, k_ld, v_ld, out_ld, k_bs, v_bs;
  float scale;
};
Resolved resolve(const AttentionDims& d) {
  const int64_t hidden = d.num_heads * d.head_dim;
  Resolved r{d.batch, d.num_heads, d.q_len, d.kv_len, d.head_dim, d.q_ld ? d.q_ld : hidden, d.k_ld ? d.k_ld : hidden,
             d.v_ld ? d.v_ld : hidden, d.out_ld ? d.out_ld : hidden, 0, 0,
             d.scale != 0.0f ? d.scale : 1.0f / std::sqrt((float)d.head_dim)};
  r.k_bs = d.k_bs ? d.k_bs : r.Lk * r.k_ld;
  r.v_bs = d.v_bs ? d.v_bs : r.Lk * r.v_ld;
  return r;
}

template <int D>
inline float dot(const float* a, const float* b) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int c = 0; c < D; ++c) s += a[c] * b[c];
  return s;
}

template <int D>
void forward_heads(float* out, float* probs, const float* q, const float* k, const float* v, const Resolved& d,
                   const AttentionMask& mask, const float* dropout_mask) {
  const int64_t Lq = d.Lq, Lk = d.Lk;
#pragma omp parallel for schedule(static) if (parallel_worth_macs(2 * d.B * d.H * Lq * Lk * D))
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    const int64_t b = bh / d.H, h = bh % d.H;
    const float* qb = q + b * Lq * d.q_ld + h * D;
    const float* kb = k + b * d.k_bs + h * D;
    const float* vb = v + b * d.v_bs + h * D;
    float* ob = out + b * Lq * d.out_ld + h * D;
    for (int64_t i = 0; i < Lq; ++i) {
      float* p = probs + (bh * Lq + i) * Lk;
      const int64_t lim = mask.key_limit(b, i, Lq, Lk);
      const float* qi = qb + i * d.q_ld;
      float mx = -INFINITY;
      for (int64_t j = 0; j < lim; ++j) {
        p[j] = d.scale * dot<D>(qi, kb + j * d.k_ld);
        mx = p[j] > mx ? p[j] : mx;
      }
      for (int64_t j = lim; j < Lk; ++j) p[j] = 0.0f;
      float acc[D] = {};
      if (lim > 0 && mx != -INFINITY) {
        float sum = 0.0f;
        for (int64_t j = 0; j < lim; ++j) {
          p[j] = vm::fast_exp(p[j] - mx);
          sum += p[j];
        }
        const float inv = 1.0f / sum;
        const float* m = dropout_mask ? dropout_mask + (bh * Lq + i) * Lk : nullptr;
        for (int64_t j = 0; j < lim; ++j) {
          p[j] *= inv;
          const float a = m ? p[j] * m[j] : p[j];
          const float* vj = vb + j * d.v_ld;
#pragma omp simd
          for (int c = 0; c < D; ++c) acc[c] += a * vj[c];
        }
      } else {
        for (int64_t j = 0; j < lim; ++j) p[j] = 0.0f;
      }
      float* o = ob + i * d.out_ld;
#pragma omp simd
      for (int c = 0; c < D; ++c) o[c] = acc[c];
    }
  }
}

template <int D>
void backward_heads(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                    const float* k, const float* v, const Resolved& d, const float* dropout_mask, float* dscores) {
  const int64_t Lq = d.Lq, Lk = d.Lk;
#pragma omp parallel for schedule(static) if (parallel_worth_macs(2 * d.B * d.H * Lq * Lk * D))
  for (int64_t bh = 0; bh < d.B * d.H; ++bh) {
    thread_local std::vector<float> row;
    if ((int64_t)row.size() < Lk) row.resize(Lk);
    float* g = row.data();
    const int64_t b = bh / d.H, h = bh % d.H;
    const float* qb = q + b * Lq * d.q_ld + h * D;
    const float* kb = k + b * d.k_bs + h * D;
    const float* vb = v + b * d.v_bs + h * D;
    const float* dob = dout + b * Lq * d.out_ld + h * D;
    float* dqb = dq + b * Lq * d.q_ld + h * D;
    float* dkb = dk + b * d.k_bs + h * D;
    float* dvb = dv + b * d.v_bs + h * D;
    for (int64_t j = 0; j < Lk; ++j) {
#pragma omp simd
      for (int c = 0; c < D; ++c) dkb[j * d.k_ld + c] = 0.0f;
#pragma omp simd
      for (int c = 0; c < D; ++c) dvb[j * d.v_ld + c] = 0.0f;
    }
    for (int64_t i = 0; i < Lq; ++i) {
      const float* p = probs + (bh * Lq + i) * Lk;
      const float* m = dropout_mask ? dropout_mask + (bh * Lq + i) * Lk : nullptr;
      int64_t lim = Lk;
      while (lim > 0 && p[lim - 1] == 0.0f) --lim;
      const float* doi = dob + i * d.out_ld;
      const float* qi = qb + i * d.q_ld;
      // dA = dO V^T, dP = dA * M; dV += A^T dO with A = P * M
      float s = 0.0f;
      for (int64_t j = 0; j < lim; ++j) {
        const float mj = m ? m[j] : 1.0f;
        const float gj = dot<D>(doi, vb + j * d.v_ld) * mj;
        g[j] = gj;
        s += gj * p[j];
        const float a = p[j] * mj;
        float* dvj = dvb + j * d.v_ld;
#pragma omp simd
        for (int c = 0; c < D; ++c) dvj[c] += a * doi[c];
      }
      // dS = P * (dP - sum(dP * P)); dQ = scale dS K; dK += scale dS^T Q
      float* dsi = dscores ? dscores + (bh * Lq + i) * Lk : nullptr;
      float acc[D] = {};
      for (int64_t j = 0; j < lim; ++j) {
        const float raw = p[j] * (g[j] - s);
        if (dsi) dsi[j] = raw;
        const float ds = d.scale * raw;
        const float* kj = kb + j * d.k_ld;
        float* dkj = dkb + j * d.k_ld;
#pragma omp simd
        for (int c = 0; c < D; ++c) {
          acc[c] += ds * kj[c];
          dkj[c] += ds * qi[c];
        }
      }
      if (dsi)
        for (int64_t j = lim; j < Lk; ++j) dsi[j] = 0.0f;
      float* dqi = dqb + i * d.q_ld;
#pragma omp simd
      for (int c = 0; c < D; ++c) dqi[c] = acc[c];
    }
  }
}

// Above this many keys the per-head oneDNN GEMMs of attention_forward / attention_backward win: at [32 x 12 heads,
// 128 keys] they took 0.4x the fused loops' time (head_dim 32 and 64, forward and backward), at 64 keys 0.6x; at
// 16 keys the fused loops are faster.
constexpr int64_t kFusedMaxKeys = 32;

}  // namespace

bool attention_forward_train(float* out, float* probs, const float* q, const float* k, const float* v,
                             const AttentionDims& dims, const AttentionMask& mask, const float* dropout_mask) {
  // The generic kernel adds a bias and reads grouped keys.
  if (!probs || mask.key_mask || mask.mask || mask.bias || dims.kv_heads() != dims.num_heads) return false;
  const Resolved d = resolve(dims);
  if (d.B * d.H * d.Lq == 0 || d.Lk > kFusedMaxKeys) return false;
  switch (d.Dh) {
    case 8: forward_heads<8>(out, probs, q, k, v, d, mask, dropout_mask); return true;
    case 16: forward_heads<16>(out, probs, q, k, v, d, mask, dropout_mask); return true;
    case 32: forward_heads<32>(out, probs, q, k, v, d, mask, dropout_mask); return true;
    case 64: forward_heads<64>(out, probs, q, k, v, d, mask, dropout_mask); return true;
    default: return false;
  }
}

bool attention_backward_train(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                              const float* k, const float* v, const AttentionDims& dims, const float* dropout_mask,
                              float* dscores) {
  const Resolved d = resolve(dims);
  if (d.B * d.H * d.Lq == 0 || d.Lk == 0 || d.Lk > kFusedMaxKeys) return false;
  switch (d.Dh) {
    case 8: backward_heads<8>(dq, dk, dv, dout, probs, q, k, v, d, dropout_mask, dscores); return true;
    case 16: backward_heads<16>(dq, dk, dv, dout, probs, q, k, v, d, dropout_mask, dscores); return true;
    case 32: backward_heads<32>(dq, dk, dv, dout, probs, q, k, v, d, dropout_mask, dscores); return true;
    case 64: backward_heads<64>(dq, dk, dv, dout, probs, q, k, v, d, dropout_mask, dscores); return true;
    default: return false;
  }
}

}  // namespace tfm::ops
