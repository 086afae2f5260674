#include "ops/local_attention.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "ops/isa.h"
#include "ops/vec_math.h"

namespace tfm::ops {
namespace {

template <int W>
struct Vec {
  typedef float type __attribute__((vector_size(W * 4)));
};
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors only cross always-inlined calls
template <class V>
TFM_ALWAYS_INLINE V load_v(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
TFM_ALWAYS_INLINE void store_v(float* p, V v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

struct BandArgs {
  const float *q, *k, *v;
  float* out;
  const float* key_mask;
  AttentionDims d;
  int64_t window;
};

struct BandScratch {
  std::vector<float> kt, qs, s, o;
};

// Queries [i_begin, i_end) of (batch, head) bh, in tiles of R rows; key blocks of BK = NV * W keys, W floats per
// vector. Keys outside a row's window, padded keys and the zero-filled tail of the last block score -inf.
template <int W, int NV, int R>
TFM_ALWAYS_INLINE void band_task(const BandArgs& a, int64_t bh, int64_t i_begin, int64_t i_end, BandScratch& sc) {
  using V = typename Vec<W>::type;
  constexpr int BK = NV * W;
  const AttentionDims& d = a.d;
  const int64_t nh = d.num_heads, Dh = d.head_dim, w = a.window;
  const int64_t b = bh / nh, h = bh % nh;
  // Sentence b: rows [row0, row0 + L) (an unpadded batch's offsets, else the dense [B, L] layout).
  const int64_t row0 = d.seq_offsets ? d.seq_offsets[b] : b * d.q_len;
  const int64_t L = d.seq_offsets ? d.seq_offsets[b + 1] - row0 : d.q_len;
  const float* qb = a.q + row0 * d.q_ld + h * Dh;
  const float* kb = a.k + row0 * d.k_ld + h * Dh;
  const float* vb = a.v + row0 * d.v_ld + h * Dh;
  float* ob = a.out + row0 * d.out_ld + h * Dh;
  const float* km = a.key_mask ? a.key_mask + b * L : nullptr;
  sc.kt.resize(Dh * BK);
  sc.qs.resize(R * Dh);
  sc.s.resize(R * BK);
  sc.o.resize(R * Dh);
  float *kt = sc.kt.data(), *qs = sc.qs.data(), *S = sc.s.data(), *O = sc.o.data();
  const int64_t nvec = Dh / W;
  for (int64_t i0 = i_begin; i0 < i_end; i0 += R) {
    const int64_t nr = i_end - i0 < R ? i_end - i0 : R;
    float m[R], l[R];
    for (int r = 0; r < R; ++r) {
      const int64_t i = i0 + (r < nr ? r : nr - 1);  // rows past the tile's end repeat its last (discarded)
      m[r] = -INFINITY;
      l[r] = 0.0f;
      for (int64_t c = 0; c < Dh; ++c) qs[r * Dh + c] = qb[i * d.q_ld + c] * d.scale;
      for (int64_t c = 0; c < Dh; ++c) O[r * Dh + c] = 0.0f;
    }
    const int64_t lo = i0 - w > 0 ? i0 - w : 0;
    const int64_t hi = i0 + nr + w < L ? i0 + nr + w : L;  // one past the last key of the tile's windows
    for (int64_t j0 = lo; j0 < hi; j0 += BK) {
      const int64_t nk = hi - j0 < BK ? hi - j0 : BK;
      for (int64_t j = 0; j < nk; ++j) {
        const float* kr = kb + (j0 + j) * d.k_ld;
        for (int64_t c = 0; c < Dh; ++c) kt[c * BK + j] = kr[c];
      }
      for (int64_t c = 0; c < Dh; ++c)
        for (int64_t j = nk; j < BK; ++j) kt[c * BK + j] = 0.0f;
      {  // S = qs K_blk^T
        V acc[R][NV];
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < NV; ++u) acc[r][u] = V{};
        for (int64_t c = 0; c < Dh; ++c) {
          V kv[NV];
          for (int u = 0; u < NV; ++u) kv[u] = load_v<V>(kt + c * BK + u * W);
          for (int r = 0; r < R; ++r) {
            const float qv = qs[r * Dh + c];
            for (int u = 0; u < NV; ++u) acc[r][u] += qv * kv[u];
          }
        }
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < NV; ++u) store_v(S + r * BK + u * W, acc[r][u]);
      }
      for (int r = 0; r < R; ++r) {
        const int64_t i = i0 + (r < nr ? r : nr - 1);
        float* s = S + r * BK;
        // Visible block entries of this row: keys [i - w, i + w] of this block, and not padded.
        int64_t a0 = i - w - j0, a1 = i + w + 1 - j0;
        a0 = a0 < 0 ? 0 : a0;
        a1 = a1 > nk ? nk : a1;
        for (int64_t j = 0; j < a0 && j < BK; ++j) s[j] = -INFINITY;
        for (int64_t j = a1 < 0 ? 0 : a1; j < BK; ++j) s[j] = -INFINITY;
        if (km)
          for (int64_t j = a0; j < a1; ++j)
            if (km[j0 + j] == 0.0f) s[j] = -INFINITY;
        float bm = -INFINITY;
#pragma omp simd reduction(max : bm)
        for (int64_t j = 0; j < BK; ++j) bm = s[j] > bm ? s[j] : bm;
        const float m_new = bm > m[r] ? bm : m[r];
        if (m_new == -INFINITY) {  // nothing visible so far
#pragma omp simd
          for (int64_t j = 0; j < BK; ++j) s[j] = 0.0f;
          continue;
        }
        const float alpha = vm::fast_exp(m[r] - m_new);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < BK; ++j) {
          const float p = vm::fast_exp(s[j] - m_new);
          s[j] = p;
          sum += p;
        }
        l[r] = l[r] * alpha + sum;
        m[r] = m_new;
#pragma omp simd
        for (int64_t c = 0; c < Dh; ++c) O[r * Dh + c] *= alpha;
      }
      // O += P V_blk, over the head_dim in vectors of W (two at a time), the tail scalar.
      int64_t cv = 0;
      for (; cv + 2 <= nvec; cv += 2) {
        V acc[R][2];
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < 2; ++u) acc[r][u] = load_v<V>(O + r * Dh + (cv + u) * W);
        for (int64_t j = 0; j < nk; ++j) {
          const float* vr = vb + (j0 + j) * d.v_ld + cv * W;
          const V v0 = load_v<V>(vr), v1 = load_v<V>(vr + W);
          for (int r = 0; r < R; ++r) {
            const float p = S[r * BK + j];
            acc[r][0] += p * v0;
            acc[r][1] += p * v1;
          }
        }
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < 2; ++u) store_v(O + r * Dh + (cv + u) * W, acc[r][u]);
      }
      for (; cv < nvec; ++cv) {
        V acc[R];
        for (int r = 0; r < R; ++r) acc[r] = load_v<V>(O + r * Dh + cv * W);
        for (int64_t j = 0; j < nk; ++j) {
          const V vv = load_v<V>(vb + (j0 + j) * d.v_ld + cv * W);
          for (int r = 0; r < R; ++r) acc[r] += S[r * BK + j] * vv;
        }
        for (int r = 0; r < R; ++r) store_v(O + r * Dh + cv * W, acc[r]);
      }
      for (int64_t c = nvec * W; c < Dh; ++c)
        for (int r = 0; r < R; ++r) {
          float acc = O[r * Dh + c];
          for (int64_t j = 0; j < nk; ++j) acc += S[r * BK + j] * vb[(j0 + j) * d.v_ld + c];
          O[r * Dh + c] = acc;
        }
    }
    for (int64_t r = 0; r < nr; ++r) {
      float* orow = ob + (i0 + r) * d.out_ld;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma omp simd
      for (int64_t c = 0; c < Dh; ++c) orow[c] = O[r * Dh + c] * inv;
    }
  }
}

void band_task_avx2(const BandArgs& a, int64_t bh, int64_t i0, int64_t i1, BandScratch& sc) {
  band_task<8, 4, 3>(a, bh, i0, i1, sc);
}
TFM_TARGET_AVX512 void band_task_avx512(const BandArgs& a, int64_t bh, int64_t i0, int64_t i1, BandScratch& sc) {
  band_task<16, 4, 6>(a, bh, i0, i1, sc);
}

AttentionDims checked(const AttentionDims& in, const float* key_mask, int64_t window) {
  AttentionDims d = in;
  if (d.seq_offsets) {
    if (key_mask) throw std::invalid_argument("sliding_window_attention: an unpadded batch (seq_offsets) takes no key_mask");
    for (int64_t b = 0; b < d.batch; ++b)
      if (d.seq_offsets[b + 1] < d.seq_offsets[b])
        throw std::invalid_argument("sliding_window_attention: seq_offsets must be non-decreasing");
    d.q_len = d.kv_len = 0;  // per sentence
  }
  if (d.q_len != d.kv_len)
    throw std::invalid_argument("sliding_window_attention: q_len (" + std::to_string(d.q_len) +
                                ") must equal kv_len (" + std::to_string(d.kv_len) + ")");
  if (window < 0) throw std::invalid_argument("sliding_window_attention: window must be >= 0");
  if (d.k_bs != 0 || d.v_bs != 0) throw std::invalid_argument("sliding_window_attention: batch strides must be 0");
  const int64_t hd = d.num_heads * d.head_dim;
  if (d.q_ld == 0) d.q_ld = hd;
  if (d.k_ld == 0) d.k_ld = hd;
  if (d.v_ld == 0) d.v_ld = hd;
  if (d.out_ld == 0) d.out_ld = hd;
  if (d.scale == 0.0f) d.scale = 1.0f / std::sqrt((float)d.head_dim);
  return d;
}

}  // namespace

void sliding_window_attention(float* out, const float* q, const float* k, const float* v, const AttentionDims& dims,
                              const float* key_mask, int64_t window) {
  const AttentionDims d = checked(dims, key_mask, window);
  constexpr int64_t kChunk = 120;  // queries per task: a multiple of both tile heights (3 and 6)
  struct Task {
    int64_t bh, i0, i1;
  };
  std::vector<Task> tasks;
  int64_t work = 0;
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t L = d.seq_offsets ? d.seq_offsets[b + 1] - d.seq_offsets[b] : d.q_len;
    for (int64_t h = 0; h < d.num_heads; ++h)
      for (int64_t i0 = 0; i0 < L; i0 += kChunk) tasks.push_back({b * d.num_heads + h, i0, std::min(i0 + kChunk, L)});
    work += d.num_heads * L * std::min(2 * window + 1, L) * d.head_dim;
  }
  const int64_t ntask = (int64_t)tasks.size();
  if (ntask == 0) return;
  auto fn = kernel_isa() == KernelIsa::Avx512 ? band_task_avx512 : band_task_avx2;
  const BandArgs a{q, k, v, out, key_mask, d, window};
#pragma omp parallel if (ntask > 1 && work > 65536)
  {
    BandScratch sc;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < ntask; ++t) fn(a, tasks[t].bh, tasks[t].i0, tasks[t].i1, sc);
  }
}

void sliding_window_attention_ref(float* out, const float* q, const float* k, const float* v,
                                  const AttentionDims& dims, const float* key_mask, int64_t window) {
  const AttentionDims d = checked(dims, key_mask, window);
  const int64_t Dh = d.head_dim;
  std::vector<double> s, acc(Dh);
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t row0 = d.seq_offsets ? d.seq_offsets[b] : b * d.q_len;  // as band_task
    const int64_t L = d.seq_offsets ? d.seq_offsets[b + 1] - row0 : d.q_len;
    s.resize(L);
    for (int64_t h = 0; h < d.num_heads; ++h)
      for (int64_t i = 0; i < L; ++i) {
        const float* qi = q + (row0 + i) * d.q_ld + h * Dh;
        double mx = -INFINITY;
        for (int64_t j = 0; j < L; ++j) {
          const bool vis = (i - j <= window && j - i <= window) && (!key_mask || key_mask[b * L + j] != 0.0f);
          s[j] = -INFINITY;
          if (!vis) continue;
          double dot = 0;
          const float* kj = k + (row0 + j) * d.k_ld + h * Dh;
          for (int64_t c = 0; c < Dh; ++c) dot += (double)qi[c] * kj[c];
          s[j] = dot * d.scale;
          mx = s[j] > mx ? s[j] : mx;
        }
        double sum = 0;
        for (int64_t c = 0; c < Dh; ++c) acc[c] = 0;
        if (mx != -INFINITY)
          for (int64_t j = 0; j < L; ++j) {
            if (s[j] == -INFINITY) continue;
            const double p = std::exp(s[j] - mx);
            sum += p;
            const float* vj = v + (row0 + j) * d.v_ld + h * Dh;
            for (int64_t c = 0; c < Dh; ++c) acc[c] += p * vj[c];
          }
        float* o = out + (row0 + i) * d.out_ld + h * Dh;
        for (int64_t c = 0; c < Dh; ++c) o[c] = sum > 0 ? (float)(acc[c] / sum) : 0.0f;
      }
  }
}

namespace {
AttentionDims checked_train(const AttentionDims& dims, const float* key_mask, int64_t window) {
  if (dims.seq_offsets)
    throw std::invalid_argument("sliding_window_attention_train: a padded batch only (seq_offsets must be null)");
  return checked(dims, key_mask, window);
}
// The visible keys [lo, hi) of query i in a row of L (the band; padded keys are skipped by the callers).
inline void band(int64_t i, int64_t L, int64_t w, int64_t& lo, int64_t& hi) {
  lo = i - w > 0 ? i - w : 0;
  hi = i + w + 1 < L ? i + w + 1 : L;
}
}  // namespace

void sliding_window_attention_train(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const AttentionDims& dims, const float* key_mask, int64_t window) {
  const AttentionDims d = checked_train(dims, key_mask, window);
  const int64_t L = d.q_len, nh = d.num_heads, Dh = d.head_dim, BH = d.batch * nh;
#pragma omp parallel for schedule(static) if (BH > 1 && BH * L * (2 * window + 1) * Dh > 65536)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / nh, h = bh % nh;
    std::vector<float> s(2 * window + 1), acc(Dh);
    for (int64_t i = 0; i < L; ++i) {
      const float* qi = q + (b * L + i) * d.q_ld + h * Dh;
      int64_t lo, hi;
      band(i, L, window, lo, hi);
      float mx = -INFINITY;
      for (int64_t j = lo; j < hi; ++j) {
        float& sj = s[j - lo];
        sj = -INFINITY;
        if (key_mask && key_mask[b * L + j] == 0.0f) continue;
        const float* kj = k + (b * L + j) * d.k_ld + h * Dh;
        float dot = 0.0f;
        for (int64_t c = 0; c < Dh; ++c) dot += qi[c] * kj[c];
        sj = dot * d.scale;
        mx = sj > mx ? sj : mx;
      }
      float* o = out + (b * L + i) * d.out_ld + h * Dh;
      if (mx == -INFINITY) {  // no visible key
        for (int64_t c = 0; c < Dh; ++c) o[c] = 0.0f;
        lse[bh * L + i] = -INFINITY;
        continue;
      }
      float sum = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = lo; j < hi; ++j) {
        if (s[j - lo] == -INFINITY) continue;
        const float p = std::exp(s[j - lo] - mx);
        sum += p;
        const float* vj = v + (b * L + j) * d.v_ld + h * Dh;
        for (int64_t c = 0; c < Dh; ++c) acc[c] += p * vj[c];
      }
      for (int64_t c = 0; c < Dh; ++c) o[c] = acc[c] / sum;
      lse[bh * L + i] = mx + std::log(sum);
    }
  }
}

void sliding_window_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                       const float* lse, const float* q, const float* k, const float* v,
                                       const AttentionDims& dims, const float* key_mask, int64_t window) {
  const AttentionDims d = checked_train(dims, key_mask, window);
  const int64_t L = d.q_len, nh = d.num_heads, Dh = d.head_dim, BH = d.batch * nh;
  // Each (batch, head) owns its columns of dq, dk, dv: the tasks write disjoint memory.
#pragma omp parallel for schedule(static) if (BH > 1 && BH * L * (2 * window + 1) * Dh > 32768)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / nh, h = bh % nh;
    for (int64_t i = 0; i < L; ++i) {
      float* dqi = dq + (b * L + i) * d.q_ld + h * Dh;
      float* dki = dk + (b * L + i) * d.k_ld + h * Dh;
      float* dvi = dv + (b * L + i) * d.v_ld + h * Dh;
      for (int64_t c = 0; c < Dh; ++c) dqi[c] = dki[c] = dvi[c] = 0.0f;
    }
    for (int64_t i = 0; i < L; ++i) {
      const float m = lse[bh * L + i];
      if (m == -INFINITY) continue;  // no visible key: out_i = 0 is constant
      const float* qi = q + (b * L + i) * d.q_ld + h * Dh;
      const float* doi = dout + (b * L + i) * d.out_ld + h * Dh;
      const float* oi = out + (b * L + i) * d.out_ld + h * Dh;
      float* dqi = dq + (b * L + i) * d.q_ld + h * Dh;
      float D = 0.0f;
      for (int64_t c = 0; c < Dh; ++c) D += doi[c] * oi[c];
      int64_t lo, hi;
      band(i, L, window, lo, hi);
      for (int64_t j = lo; j < hi; ++j) {
        if (key_mask && key_mask[b * L + j] == 0.0f) continue;
        const float* kj = k + (b * L + j) * d.k_ld + h * Dh;
        const float* vj = v + (b * L + j) * d.v_ld + h * Dh;
        float dot = 0.0f, dp = 0.0f;
        for (int64_t c = 0; c < Dh; ++c) {
          dot += qi[c] * kj[c];
          dp += doi[c] * vj[c];
        }
        const float p = std::exp(dot * d.scale - m);
        const float ds = p * (dp - D) * d.scale;
        float* dkj = dk + (b * L + j) * d.k_ld + h * Dh;
        float* dvj = dv + (b * L + j) * d.v_ld + h * Dh;
        for (int64_t c = 0; c < Dh; ++c) {
          dvj[c] += p * doi[c];
          dqi[c] += ds * kj[c];
          dkj[c] += ds * qi[c];
        }
      }
    }
  }
}

}  // namespace tfm::ops
