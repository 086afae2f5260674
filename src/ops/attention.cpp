#include "ops/attention.h"

#include <cmath>
#include <vector>

#include "ops/attention_train.h"
#include "ops/gemm.h"
#include "ops/vec_math.h"

namespace tfm::ops {

int64_t AttentionMask::key_limit(int64_t b, int64_t i, int64_t Lq, int64_t Lk) const {
  int64_t lim = Lk;
  if (query_mask && query_mask[b * Lq + i] == 0.0f) return 0;
  if (valid_lens) {
    int64_t vl = valid_lens_per_query ? valid_lens[b * Lq + i] : valid_lens[b];
    lim = vl < lim ? vl : lim;
  }
  if (causal) {
    int64_t c = i + causal_offset + 1;
    lim = c < lim ? c : lim;
  }
  return lim < 0 ? 0 : lim;
}

bool AttentionMask::visible(int64_t b, int64_t i, int64_t j, int64_t Lq, int64_t Lk) const {
  if (j >= key_limit(b, i, Lq, Lk)) return false;
  if (key_mask && key_mask[b * Lk + j] == 0.0f) return false;
  if (mask && mask[(b * Lq + i) * Lk + j] == 0.0f) return false;
  return true;
}

namespace {

void resolve(AttentionDims& d) {
  int64_t hidden = d.num_heads * d.head_dim;
  if (!d.q_ld) d.q_ld = hidden;
  if (!d.k_ld) d.k_ld = hidden;
  if (!d.v_ld) d.v_ld = hidden;
  if (!d.out_ld) d.out_ld = hidden;
  if (d.scale == 0.0f) d.scale = 1.0f / std::sqrt((float)d.head_dim);
  if (!d.k_bs) d.k_bs = d.kv_len * d.k_ld;
  if (!d.v_bs) d.v_bs = d.kv_len * d.v_ld;
}

// Masked softmax of one score row in place: only the first `lim` keys can be visible; per-element masks
// zero the rest. Returns false (row zeroed) when no key is visible.
void masked_softmax_row(float* s, int64_t b, int64_t i, int64_t Lq, int64_t Lk, const AttentionMask& m) {
  int64_t lim = m.key_limit(b, i, Lq, Lk);
  const float* km = m.key_mask ? m.key_mask + b * Lk : nullptr;
  const float* gm = m.mask ? m.mask + (b * Lq + i) * Lk : nullptr;
  float mx = -INFINITY;
  for (int64_t j = 0; j < lim; ++j) {
    bool vis = (!km || km[j] != 0.0f) && (!gm || gm[j] != 0.0f);
    if (vis) mx = s[j] > mx ? s[j] : mx;
  }
  if (mx == -INFINITY) {  // no visible key (or all scores -inf)
    for (int64_t j = 0; j < Lk; ++j) s[j] = 0.0f;
    return;
  }
  float sum = 0.0f;
  if (!km && !gm) {
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < lim; ++j) {
      s[j] = vm::fast_exp(s[j] - mx);
      sum += s[j];
    }
  } else {
    for (int64_t j = 0; j < lim; ++j) {
      bool vis = (!km || km[j] != 0.0f) && (!gm || gm[j] != 0.0f);
      s[j] = vis ? vm::fast_exp(s[j] - mx) : 0.0f;
      sum += s[j];
    }
  }
  float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < lim; ++j) s[j] *= inv;
  for (int64_t j = lim; j < Lk; ++j) s[j] = 0.0f;
}

}  // namespace

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                       const AttentionDims& dims_in, const AttentionMask& mask, const float* dropout_mask) {
  AttentionDims d = dims_in;
  resolve(d);
  const int64_t B = d.batch, H = d.num_heads, Lq = d.q_len, Lk = d.kv_len, Dh = d.head_dim;
  if (B * H * Lq == 0) return;
#pragma omp parallel
  {
    std::vector<float> scratch(probs ? 0 : Lq * Lk);
    std::vector<float> dropped(dropout_mask ? Lq * Lk : 0);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      int64_t b = bh / H, h = bh % H;
      const float* qb = q + b * Lq * d.q_ld + h * Dh;
      const float* kb = k + b * d.k_bs + h * Dh;
      const float* vb = v + b * d.v_bs + h * Dh;
      float* ob = out + b * Lq * d.out_ld + h * Dh;
      float* P = probs ? probs + bh * Lq * Lk : scratch.data();
      if (Lk == 0) {
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t c = 0; c < Dh; ++c) ob[i * d.out_ld + c] = 0.0f;
        continue;
      }
      // S = scale * Q K^T  [Lq, Lk]
      gemm(false, true, Lq, Lk, Dh, d.scale, qb, d.q_ld, kb,
                  d.k_ld, 0.0f, P, Lk);
      for (int64_t i = 0; i < Lq; ++i) masked_softmax_row(P + i * Lk, b, i, Lq, Lk, mask);
      const float* A = P;
      if (dropout_mask) {
        const float* M = dropout_mask + bh * Lq * Lk;
        for (int64_t x = 0; x < Lq * Lk; ++x) dropped[x] = P[x] * M[x];
        A = dropped.data();
      }
      // O = A V  [Lq, Dh]
      gemm(false, false, Lq, Dh, Lk, 1.0f, A, Lk, vb,
                  d.v_ld, 0.0f, ob, d.out_ld);
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                        const float* k, const float* v, const AttentionDims& dims_in, const float* dropout_mask) {
  // Fused per-head loops for the common head sizes (ops/attention_train.h).
  if (attention_backward_train(dq, dk, dv, dout, probs, q, k, v, dims_in, dropout_mask)) return;
  AttentionDims d = dims_in;
  resolve(d);
  const int64_t B = d.batch, H = d.num_heads, Lq = d.q_len, Lk = d.kv_len, Dh = d.head_dim;
  if (B * H * Lq == 0 || Lk == 0) return;
#pragma omp parallel
  {
    std::vector<float> dP(Lq * Lk), A(dropout_mask ? Lq * Lk : 0);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      int64_t b = bh / H, h = bh % H;
      const float* qb = q + b * Lq * d.q_ld + h * Dh;
      const float* kb = k + b * d.k_bs + h * Dh;
      const float* vb = v + b * d.v_bs + h * Dh;
      const float* dob = dout + b * Lq * d.out_ld + h * Dh;
      float* dqb = dq + b * Lq * d.q_ld + h * Dh;
      float* dkb = dk + b * d.k_bs + h * Dh;
      float* dvb = dv + b * d.v_bs + h * Dh;
      const float* P = probs + bh * Lq * Lk;
      const float* M = dropout_mask ? dropout_mask + bh * Lq * Lk : nullptr;
      const float* Aw = P;
      if (M) {
        for (int64_t x = 0; x < Lq * Lk; ++x) A[x] = P[x] * M[x];
        Aw = A.data();
      }
      // dV = A^T dO  [Lk, Dh]
      gemm(true, false, Lk, Dh, Lq, 1.0f, Aw, Lk, dob,
                  d.out_ld, 0.0f, dvb, d.v_ld);
      // dA = dO V^T  [Lq, Lk]
      gemm(false, true, Lq, Lk, Dh, 1.0f, dob, d.out_ld, vb,
                  d.v_ld, 0.0f, dP.data(), Lk);
      // dS = P * (dP - sum(dP * P)) with dP = dA * M; masked entries have P = 0 and get no gradient.
      for (int64_t i = 0; i < Lq; ++i) {
        float* g = dP.data() + i * Lk;
        const float* p = P + i * Lk;
        if (M)
          for (int64_t j = 0; j < Lk; ++j) g[j] *= M[i * Lk + j];
        float dot = 0.0f;
        for (int64_t j = 0; j < Lk; ++j) dot += g[j] * p[j];
        for (int64_t j = 0; j < Lk; ++j) g[j] = p[j] * (g[j] - dot);
      }
      // dQ = scale dS K ; dK = scale dS^T Q
      gemm(false, false, Lq, Dh, Lk, d.scale, dP.data(), Lk,
                  kb, d.k_ld, 0.0f, dqb, d.q_ld);
      gemm(true, false, Lk, Dh, Lq, d.scale, dP.data(), Lk,
                  qb, d.q_ld, 0.0f, dkb, d.k_ld);
    }
  }
}

void attention_forward_ref(float* out, float* probs, const float* q, const float* k, const float* v,
                           const AttentionDims& dims_in, const AttentionMask& mask) {
  AttentionDims d = dims_in;
  resolve(d);
  const int64_t B = d.batch, H = d.num_heads, Lq = d.q_len, Lk = d.kv_len, Dh = d.head_dim;
  std::vector<double> s(Lk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < Lk; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < Dh; ++c)
            acc += (double)q[(b * Lq + i) * d.q_ld + h * Dh + c] * k[b * d.k_bs + j * d.k_ld + h * Dh + c];
          s[j] = mask.visible(b, i, j, Lq, Lk) ? acc * d.scale : -INFINITY;
          mx = std::fmax(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          s[j] = mx == -INFINITY ? 0.0 : std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t j = 0; j < Lk; ++j) s[j] = sum > 0 ? s[j] / sum : 0.0;
        if (probs)
          for (int64_t j = 0; j < Lk; ++j) probs[((b * H + h) * Lq + i) * Lk + j] = (float)s[j];
        for (int64_t c = 0; c < Dh; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < Lk; ++j) acc += s[j] * v[b * d.v_bs + j * d.v_ld + h * Dh + c];
          out[(b * Lq + i) * d.out_ld + h * Dh + c] = (float)acc;
        }
      }
}

}  // namespace tfm::ops
