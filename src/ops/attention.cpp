#include "ops/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <immintrin.h>

#include "ops/attention_train.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/isa.h"
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
  if (d.num_kv_heads < 0 || (d.num_kv_heads && d.num_heads % d.num_kv_heads != 0))
    throw std::invalid_argument("attention: num_heads " + std::to_string(d.num_heads) +
                                " is not a multiple of num_kv_heads " + std::to_string(d.num_kv_heads));
  int64_t hidden = d.num_heads * d.head_dim, kv_hidden = d.kv_heads() * d.head_dim;
  if (!d.q_ld) d.q_ld = hidden;
  if (!d.k_ld) d.k_ld = kv_hidden;
  if (!d.v_ld) d.v_ld = kv_hidden;
  if (!d.out_ld) d.out_ld = hidden;
  if (d.scale == 0.0f) d.scale = 1.0f / std::sqrt((float)d.head_dim);
  if (!d.k_bs) d.k_bs = d.kv_len * d.k_ld;
  if (!d.v_bs) d.v_bs = d.kv_len * d.v_ld;
}

// Softmax of s[0, lim) in place over the keys vis(j) lets through (the others become 0), s[lim, Lk) zeroed;
// a row with no visible key (or all scores -inf) is zeroed. Vector loops for every mask form: 8 running maxima
// (vmaxps: `a > b ? a : b` lane by lane), then exp and sum with the hidden keys selected to 0 (a NaN score makes
// the row NaN, as before).
template <class Vis>
TFM_ALWAYS_INLINE void softmax_row(float* s, int64_t lim, int64_t Lk, const Vis& vis) {
  float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  float mx = -INFINITY;
  int64_t j = 0;
  for (; j + 8 <= lim; j += 8)
    for (int k = 0; k < 8; ++k) {
      const float x = vis(j + k) ? s[j + k] : -INFINITY;
      m8[k] = m8[k] > x ? m8[k] : x;
    }
  for (; j < lim; ++j) {
    const float x = vis(j) ? s[j] : -INFINITY;
    mx = x > mx ? x : mx;
  }
  for (int k = 0; k < 8; ++k) mx = m8[k] > mx ? m8[k] : mx;
  if (mx == -INFINITY) {  // no visible key (or all scores -inf)
    for (int64_t c = 0; c < Lk; ++c) s[c] = 0.0f;
    return;
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < lim; ++c) {
    const float e = vm::fast_exp(s[c] - mx);
    s[c] = vis(c) ? e : 0.0f;
    sum += s[c];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t c = 0; c < lim; ++c) s[c] *= inv;
  for (int64_t c = lim; c < Lk; ++c) s[c] = 0.0f;
}

// Masked softmax of one score row in place: only the first `lim` keys can be visible; per-element masks
// zero the rest. A row with no visible key is zeroed.
void masked_softmax_row(float* s, int64_t b, int64_t i, int64_t Lq, int64_t Lk, const AttentionMask& m) {
  const int64_t lim = m.key_limit(b, i, Lq, Lk);
  const float* km = m.key_mask ? m.key_mask + b * Lk : nullptr;
  const float* gm = m.mask ? m.mask + (b * Lq + i) * Lk : nullptr;
  if (!km && !gm)
    softmax_row(s, lim, Lk, [](int64_t) { return true; });
  else if (!gm)
    softmax_row(s, lim, Lk, [km](int64_t j) { return km[j] != 0.0f; });
  else if (!km)
    softmax_row(s, lim, Lk, [gm](int64_t j) { return gm[j] != 0.0f; });
  else
    softmax_row(s, lim, Lk, [km, gm](int64_t j) { return km[j] != 0.0f && gm[j] != 0.0f; });
}

// ---------------------------------------------------------------- blocked online-softmax attention
//
// Used when no probabilities and no dropout mask are asked for (inference). Per (batch, head) the keys are
// packed once, transposed into blocks Kt[block][head_dim][BK]; then each tile of R query rows walks the key
// blocks: S = scale q K_blk^T (R x BK register tile), masked entries -> -inf, running max m and sum l per row,
// the accumulator rescaled by exp(m_old - m_new) and O += exp(S - m_new) V_blk. Nothing of size [Lq, Lk] is
// written. Key blocks beyond every row's key_limit (causal, valid_lens) are skipped.

// GCC vector of W floats (an alias template would drop the attribute; a member typedef keeps it).
template <int W>
struct VecOf {
  typedef float type __attribute__((vector_size(W * 4)));
};
template <int W>
using vf = typename VecOf<W>::type;
static_assert(sizeof(vf<16>) == 64 && sizeof(vf<8>) == 32);

// Vectors are passed by value only between always-inlined functions: no call ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"
template <class V>
TFM_ALWAYS_INLINE V vload(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
TFM_ALWAYS_INLINE void vstore(float* p, V v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

struct FlashArgs {
  const float *q, *k, *v;
  float* out;
  const AttentionDims* d;
  const AttentionMask* mask;
};

// Per-thread scratch of the blocked kernel.
struct FlashScratch {
  std::vector<float> kt, qs, s, o, m, l;
  std::vector<uint32_t> kt2, vt2, q2, p2;  // the bf16 copy's packed pairs
  std::vector<uint64_t> kbits;             // and its per-block key_mask bits
};

// W floats per vector, BK = NV * W keys per block, R query rows per tile.
template <int W, int NV, int R>
TFM_ALWAYS_INLINE void flash_task(const FlashArgs& a, int64_t bh, int64_t i_begin, int64_t i_end,
                                  FlashScratch& sc) {
  using V = vf<W>;
  constexpr int BK = NV * W;
  const AttentionDims& d = *a.d;
  const AttentionMask& mk = *a.mask;
  const int64_t H = d.num_heads, Lq = d.q_len, Lk = d.kv_len, Dh = d.head_dim;
  const int64_t b = bh / H, h = bh % H;
  const float* qb = a.q + b * Lq * d.q_ld + h * Dh;
  const float* kb = a.k + b * d.k_bs + d.kv_col(h);
  const float* vb = a.v + b * d.v_bs + d.kv_col(h);
  float* ob = a.out + b * Lq * d.out_ld + h * Dh;
  const int64_t nblk = (Lk + BK - 1) / BK;

  // Visible-key limits of the rows; the largest bounds the keys to pack.
  int64_t kmax = 0;
  for (int64_t i = i_begin; i < i_end; ++i) {
    int64_t lim = mk.key_limit(b, i, Lq, Lk);
    kmax = lim > kmax ? lim : kmax;
  }
  const int64_t nblk_used = (kmax + BK - 1) / BK;
  // Pack K^T per block, zero-padded to BK keys.
  sc.kt.resize(nblk * Dh * BK);
  for (int64_t blk = 0; blk < nblk_used; ++blk) {
    float* kt = sc.kt.data() + blk * Dh * BK;
    const int64_t j0 = blk * BK, nk = Lk - j0 < BK ? Lk - j0 : BK;
    for (int64_t j = 0; j < nk; ++j) {
      const float* kr = kb + (j0 + j) * d.k_ld;
      for (int64_t c = 0; c < Dh; ++c) kt[c * BK + j] = kr[c];
    }
    for (int64_t j = nk; j < BK; ++j)
      for (int64_t c = 0; c < Dh; ++c) kt[c * BK + j] = 0.0f;
  }
  sc.qs.resize(R * Dh);
  sc.s.resize(R * BK);
  sc.o.resize(R * Dh);
  float* qs = sc.qs.data();
  float* S = sc.s.data();
  float* O = sc.o.data();
  const int64_t nvec_o = Dh / W;  // whole vectors of the head_dim; the rest runs scalar
  for (int64_t i0 = i_begin; i0 < i_end; i0 += R) {
    const int64_t nr = i_end - i0 < R ? i_end - i0 : R;
    float m[R], l[R];
    int64_t lim[R];
    int64_t tile_lim = 0;
    for (int r = 0; r < R; ++r) {
      // Rows past the tile's end repeat its last row (results discarded).
      const int64_t i = i0 + (r < nr ? r : nr - 1);
      lim[r] = mk.key_limit(b, i, Lq, Lk);
      tile_lim = lim[r] > tile_lim ? lim[r] : tile_lim;
      m[r] = -INFINITY;
      l[r] = 0.0f;
      const float* qr = qb + i * d.q_ld;
      for (int64_t c = 0; c < Dh; ++c) qs[r * Dh + c] = qr[c] * d.scale;
      for (int64_t c = 0; c < Dh; ++c) O[r * Dh + c] = 0.0f;
    }
    const int64_t tile_blocks = (tile_lim + BK - 1) / BK;
    for (int64_t blk = 0; blk < tile_blocks; ++blk) {
      const int64_t j0 = blk * BK, nk = Lk - j0 < BK ? Lk - j0 : BK;
      // S[R][BK] = qs K_blk^T: R x NV vector accumulators, one broadcast of q per row and head_dim element.
      {
        const float* kt = sc.kt.data() + blk * Dh * BK;
        V acc[R][NV];
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < NV; ++u) acc[r][u] = V{};
        for (int64_t c = 0; c < Dh; ++c) {
          V kv[NV];
          for (int u = 0; u < NV; ++u) kv[u] = vload<V>(kt + c * BK + u * W);
          for (int r = 0; r < R; ++r) {
            const float qv = qs[r * Dh + c];
            for (int u = 0; u < NV; ++u) acc[r][u] += qv * kv[u];
          }
        }
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < NV; ++u) vstore(S + r * BK + u * W, acc[r][u]);
      }
      // Online softmax per row: mask, new running max, rescale the accumulator, exponentiate.
      for (int r = 0; r < R; ++r) {
        const int64_t i = i0 + (r < nr ? r : nr - 1);
        float* s = S + r * BK;
        const int64_t nvis = lim[r] - j0 < nk ? (lim[r] - j0 < 0 ? 0 : lim[r] - j0) : nk;
        const float* km = mk.key_mask ? mk.key_mask + b * Lk + j0 : nullptr;
        const float* gm = mk.mask ? mk.mask + (b * Lq + i) * Lk + j0 : nullptr;
        if (mk.bias) {  // S += bias[b, h, i, j0 .. j0 + nvis)
          const float* br = mk.bias_row(b, h, i, Lq, Lk) + j0;
#pragma omp simd
          for (int64_t j = 0; j < nvis; ++j) s[j] += br[j];
        }
        if (km || gm) {
          for (int64_t j = 0; j < nvis; ++j)
            if ((km && km[j] == 0.0f) || (gm && gm[j] == 0.0f)) s[j] = -INFINITY;
        }
#pragma omp simd
        for (int64_t j = nvis; j < BK; ++j) s[j] = -INFINITY;
        float bm = -INFINITY;
#pragma omp simd reduction(max : bm)
        for (int64_t j = 0; j < BK; ++j) bm = s[j] > bm ? s[j] : bm;
        const float m_new = bm > m[r] ? bm : m[r];
        if (m_new == -INFINITY) {  // nothing visible yet: weights stay zero
#pragma omp simd
          for (int64_t j = 0; j < BK; ++j) s[j] = 0.0f;
          continue;
        }
        const float alpha = vm::fast_exp(m[r] - m_new);  // exp(-inf) = 0 on the first visible block
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < BK; ++j) {
          float p = vm::fast_exp(s[j] - m_new);  // masked: exp(-inf) = 0
          s[j] = p;
          sum += p;
        }
        l[r] = l[r] * alpha + sum;
        m[r] = m_new;
        float* orow = O + r * Dh;
#pragma omp simd
        for (int64_t c = 0; c < Dh; ++c) orow[c] *= alpha;
      }
      // O[R][Dh] += P[R][nk] V_blk[nk][Dh], vectorised over head_dim in chunks of up to 4 vectors.
      for (int64_t cv0 = 0; cv0 < nvec_o; cv0 += 4) {
        const int64_t ncv = nvec_o - cv0 < 4 ? nvec_o - cv0 : 4;
        const int64_t c0 = cv0 * W;
        if (ncv == 4) {
          V acc[R][4];
          for (int r = 0; r < R; ++r)
            for (int u = 0; u < 4; ++u) acc[r][u] = vload<V>(O + r * Dh + c0 + u * W);
          for (int64_t j = 0; j < nk; ++j) {
            const float* vr = vb + (j0 + j) * d.v_ld + c0;
            V vv[4];
            for (int u = 0; u < 4; ++u) vv[u] = vload<V>(vr + u * W);
            for (int r = 0; r < R; ++r) {
              const float p = S[r * BK + j];
              for (int u = 0; u < 4; ++u) acc[r][u] += p * vv[u];
            }
          }
          for (int r = 0; r < R; ++r)
            for (int u = 0; u < 4; ++u) vstore(O + r * Dh + c0 + u * W, acc[r][u]);
        } else {
          for (int64_t u = 0; u < ncv; ++u) {
            V acc[R];
            for (int r = 0; r < R; ++r) acc[r] = vload<V>(O + r * Dh + c0 + u * W);
            for (int64_t j = 0; j < nk; ++j) {
              V vv = vload<V>(vb + (j0 + j) * d.v_ld + c0 + u * W);
              for (int r = 0; r < R; ++r) acc[r] += S[r * BK + j] * vv;
            }
            for (int r = 0; r < R; ++r) vstore(O + r * Dh + c0 + u * W, acc[r]);
          }
        }
      }
      for (int64_t c = nvec_o * W; c < Dh; ++c)  // head_dim tail
        for (int r = 0; r < R; ++r) {
          float acc = O[r * Dh + c];
          for (int64_t j = 0; j < nk; ++j) acc += S[r * BK + j] * vb[(j0 + j) * d.v_ld + c];
          O[r * Dh + c] = acc;
        }
    }
    for (int64_t r = 0; r < nr; ++r) {
      float* orow = ob + (i0 + r) * d.out_ld;
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;  // no visible key: zeros
#pragma omp simd
      for (int64_t c = 0; c < Dh; ++c) orow[c] = O[r * Dh + c] * inv;
    }
  }
}

// Tiles: R query rows x NV vectors of keys, sized to the register file (AVX2: 16 ymm, 12 accumulators; AVX-512:
// 32 zmm, 24 accumulators).
void flash_task_avx2(const FlashArgs& a, int64_t bh, int64_t i0, int64_t i1, FlashScratch& sc) {
  flash_task<8, 4, 3>(a, bh, i0, i1, sc);
}
TFM_TARGET_AVX512 void flash_task_avx512(const FlashArgs& a, int64_t bh, int64_t i0, int64_t i1, FlashScratch& sc) {
  flash_task<16, 4, 6>(a, bh, i0, i1, sc);
}

// ---------------------------------------------------------------- the bf16 copy (AVX512-BF16)
//
// flash_task's order with both products as vdpbf16ps (per fp32 lane: a[2i] b[2i] + a[2i+1] b[2i+1], fp32
// accumulate). Operands are bf16 pairs in 32-bit words, low half first: S = q K^T pairs adjacent head_dim
// elements (K packed per block as kt2[pair][key]), O += P V pairs adjacent keys (V packed per block as
// vt2[key pair][head_dim]). head_dim % 16 == 0. Masking, the online softmax and the sums run in fp32 as there.
// Everything outside the two products is vector code too: the packing converts 32 floats per vcvtne2ps2bf16
// (round to nearest even, as to_bf16) and transposes K in 16 x 16 word tiles; the masks are bit masks (key_mask
// folded per block once per task, key limits and 3-D masks per row); the scores are masked, exponentiated and
// rounded to bf16 in registers; the accumulator's rescale by exp(m_old - m_new) rides on its reload.

// GCC 12 reports "'__Y' may be used uninitialized" inside avx512fintrin.h wherever an unmasked AVX-512 intrinsic
// (unpack, shuffle_i32x4, max, roundscale, ...) is inlined: its pass-through operand is _mm512_undefined_*(), a
// self-initialised variable. A known false positive of GCC 12 (GCC bug 105593, fixed in 13), silenced for these
// kernels only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TFM_BF16_INLINE TFM_TARGET_AVX512_BF16 TFM_ALWAYS_INLINE

// r[0..15] (16 rows of 16 words) -> its transpose in place: r[c] holds word c of every row.
TFM_BF16_INLINE void transpose16x16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4g + p], 128-bit lane L: rows 4g .. 4g + 3 at word 4L + p
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int p = 0; p < 4; ++p) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[p], u[4 + p], 0x44), x1 = _mm512_shuffle_i32x4(u[p], u[4 + p], 0xEE);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + p], u[12 + p], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + p], u[12 + p], 0xEE);
    r[p] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    r[4 + p] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    r[8 + p] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    r[12 + p] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

// vm::fast_exp on 16 lanes (same range reduction and polynomial); lanes below -87.3 give 0.
TFM_BF16_INLINE __m512 exp16(__m512 x_in) {
  const __m512 x = _mm512_min_ps(_mm512_max_ps(x_in, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  e = _mm512_max_epi32(e, _mm512_set1_epi32(1));
  const __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(e, 23)));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x_in, _mm512_set1_ps(-87.3f), _CMP_GE_OQ), y);
}

// Bits [0, n) set, n clamped to [0, 64].
TFM_ALWAYS_INLINE uint64_t low_bits(int64_t n) {
  return n <= 0 ? 0ull : n >= 64 ? ~0ull : (1ull << n) - 1;
}

// NV vectors of 16 keys per block (BK = 16 NV keys), R query rows per tile for S = q K^T (R x NV accumulators),
// RP rows at a time for O += P V (RP x 4 accumulators).
template <int NV, int R, int RP>
TFM_BF16_INLINE void flash_bf16_body(const FlashArgs& a, int64_t bh, int64_t i_begin, int64_t i_end,
                                     FlashScratch& sc) {
  constexpr int W = 16, BK = NV * W, BP = BK / 2;
  static_assert(BK <= 64 && R % RP == 0);
  const AttentionDims& d = *a.d;
  const AttentionMask& mk = *a.mask;
  const int64_t H = d.num_heads, Lq = d.q_len, Lk = d.kv_len, Dh = d.head_dim, Dp = Dh / 2, nvec = Dh / W;
  const int64_t b = bh / H, h = bh % H;
  const float* qb = a.q + b * Lq * d.q_ld + h * Dh;
  const float* kb = a.k + b * d.k_bs + d.kv_col(h);
  const float* vb = a.v + b * d.v_bs + d.kv_col(h);
  float* ob = a.out + b * Lq * d.out_ld + h * Dh;
  int64_t kmax = 0;
  for (int64_t i = i_begin; i < i_end; ++i) {
    int64_t lim = mk.key_limit(b, i, Lq, Lk);
    kmax = lim > kmax ? lim : kmax;
  }
  const int64_t nblk_used = (kmax + BK - 1) / BK;
  sc.kt2.resize(nblk_used * Dp * BK + 1);
  sc.vt2.resize(nblk_used * BP * Dh + 1);
  sc.kbits.resize(nblk_used + 1);
  const __m512 zero = _mm512_setzero_ps();
  // Word 2c of a packed V pair row is key j's column c, word 2c + 1 key j + 1's.
  alignas(64) static const uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int64_t blk = 0; blk < nblk_used; ++blk) {
    uint32_t* kt = sc.kt2.data() + blk * Dp * BK;
    uint32_t* vt = sc.vt2.data() + blk * BP * Dh;
    const int64_t j0 = blk * BK, nk = Lk - j0 < BK ? Lk - j0 : BK;
    // Keys visible by key_mask (and present): one bit per key of the block.
    uint64_t bits = low_bits(nk);
    if (mk.key_mask) {
      const float* km = mk.key_mask + b * Lk + j0;
      uint64_t kmb = 0;
      for (int u = 0; u < NV; ++u) {
        const __mmask16 in = (__mmask16)(bits >> (16 * u));
        kmb |= (uint64_t)_mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, km + 16 * u), zero, _CMP_NEQ_UQ)
               << (16 * u);
      }
      bits &= kmb;
    }
    sc.kbits[blk] = bits;
    // K^T: 16 keys x 16 words (32 head_dim elements) per transpose.
    for (int64_t j16 = 0; j16 < BK; j16 += 16)
      for (int64_t cp0 = 0; cp0 < Dp; cp0 += 16) {
        const bool two = Dh - 2 * cp0 >= 32;  // else 16 elements left (head_dim % 32 == 16)
        __m512i r[16];
        for (int x = 0; x < 16; ++x) {
          if (j16 + x < nk) {
            const float* kr = kb + (j0 + j16 + x) * d.k_ld + 2 * cp0;
            const __m512 lo = _mm512_loadu_ps(kr), hi = two ? _mm512_loadu_ps(kr + 16) : zero;
            r[x] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
          } else {
            r[x] = _mm512_setzero_si512();
          }
        }
        transpose16x16(r);
        const int64_t nc = Dp - cp0 < 16 ? Dp - cp0 : 16;
        for (int64_t c = 0; c < nc; ++c) _mm512_storeu_si512(kt + (cp0 + c) * BK + j16, r[c]);
      }
    // V in key pairs.
    for (int64_t jp = 0; jp < BP; ++jp) {
      const int64_t j = 2 * jp;
      const float* v0 = vb + (j0 + j) * d.v_ld;
      const float* v1 = v0 + d.v_ld;
      for (int64_t c0 = 0; c0 < Dh; c0 += W) {
        const __m512 x0 = j < nk ? _mm512_loadu_ps(v0 + c0) : zero;
        const __m512 x1 = j + 1 < nk ? _mm512_loadu_ps(v1 + c0) : zero;
        _mm512_storeu_si512(vt + jp * Dh + c0,
                            _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(x1, x0)));
      }
    }
  }
  sc.q2.resize(R * Dp);
  sc.p2.resize(R * BP);
  sc.s.resize(R * BK);
  sc.o.resize(R * Dh);
  uint32_t* q2 = sc.q2.data();
  uint32_t* p2 = sc.p2.data();
  float* S = sc.s.data();
  float* O = sc.o.data();
  const __m512 scale = _mm512_set1_ps(d.scale), ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t i0 = i_begin; i0 < i_end; i0 += R) {
    const int64_t nr = i_end - i0 < R ? i_end - i0 : R;
    float m[R], l[R], alpha[R];
    int64_t lim[R];
    int64_t tile_lim = 0;
    for (int r = 0; r < R; ++r) {
      const int64_t i = i0 + (r < nr ? r : nr - 1);  // rows past the tile's end repeat its last (discarded)
      lim[r] = mk.key_limit(b, i, Lq, Lk);
      tile_lim = lim[r] > tile_lim ? lim[r] : tile_lim;
      m[r] = -INFINITY;
      l[r] = 0.0f;
      const float* qr = qb + i * d.q_ld;
      for (int64_t c = 0; c < Dh; c += W) {
        _mm256_storeu_si256((__m256i*)(q2 + r * Dp + c / 2),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(qr + c), scale)));
        _mm512_storeu_ps(O + r * Dh + c, zero);
      }
    }
    const int64_t tile_blocks = (tile_lim + BK - 1) / BK;
    for (int64_t blk = 0; blk < tile_blocks; ++blk) {
      const int64_t j0 = blk * BK, nk = Lk - j0 < BK ? Lk - j0 : BK;
      {  // S[R][BK] = q K_blk^T
        const uint32_t* kt = sc.kt2.data() + blk * Dp * BK;
        __m512 acc[R][NV];
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < NV; ++u) acc[r][u] = _mm512_setzero_ps();
        for (int64_t cp = 0; cp < Dp; ++cp) {
          __m512bh kv[NV];
          for (int u = 0; u < NV; ++u) kv[u] = (__m512bh)_mm512_loadu_si512(kt + cp * BK + u * W);
          for (int r = 0; r < R; ++r) {
            const __m512bh qv = (__m512bh)_mm512_set1_epi32((int)q2[r * Dp + cp]);
            for (int u = 0; u < NV; ++u) acc[r][u] = _mm512_dpbf16_ps(acc[r][u], qv, kv[u]);
          }
        }
        for (int r = 0; r < R; ++r)
          for (int u = 0; u < NV; ++u) _mm512_storeu_ps(S + r * BK + u * W, acc[r][u]);
      }
      // Online softmax per row, in registers: visible bits, max, exp, sum, bf16 weights.
      for (int r = 0; r < R; ++r) {
        const int64_t i = i0 + (r < nr ? r : nr - 1);
        uint64_t vis = sc.kbits[blk] & low_bits(lim[r] - j0);
        if (mk.mask) {
          const float* gm = mk.mask + (b * Lq + i) * Lk + j0;
          uint64_t gb = 0;
          for (int u = 0; u < NV; ++u) {
            const __mmask16 in = (__mmask16)(low_bits(nk) >> (16 * u));
            gb |= (uint64_t)_mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, gm + 16 * u), zero, _CMP_NEQ_UQ)
                  << (16 * u);
          }
          vis &= gb;
        }
        __m512 s[NV];
        __m512 mx = ninf;
        const float* br = mk.bias ? mk.bias_row(b, h, i, Lq, Lk) + j0 : nullptr;
        for (int u = 0; u < NV; ++u) {
          const __mmask16 vu = (__mmask16)(vis >> (16 * u));
          s[u] = _mm512_loadu_ps(S + r * BK + u * W);
          if (br) s[u] = _mm512_add_ps(s[u], _mm512_maskz_loadu_ps(vu, br + u * W));  // in fp32 as the fp32 copy
          s[u] = _mm512_mask_blend_ps(vu, ninf, s[u]);
          mx = _mm512_max_ps(mx, s[u]);
        }
        const float bm = _mm512_reduce_max_ps(mx);
        const float m_new = bm > m[r] ? bm : m[r];
        if (m_new == -INFINITY) {  // nothing visible yet: weights zero, accumulator unchanged
          for (int u = 0; u < BP; u += 16) _mm512_storeu_si512(p2 + r * BP + u, _mm512_setzero_si512());
          alpha[r] = 1.0f;
          continue;
        }
        alpha[r] = vm::fast_exp(m[r] - m_new);  // exp(-inf) = 0 on the first visible block
        const __m512 mv = _mm512_set1_ps(m_new);
        __m512 sum = zero;
        for (int u = 0; u < NV; ++u) {
          s[u] = _mm512_maskz_mov_ps((__mmask16)(vis >> (16 * u)), exp16(_mm512_sub_ps(s[u], mv)));
          sum = _mm512_add_ps(sum, s[u]);
        }
        for (int u = 0; u < NV; u += 2)
          _mm512_storeu_si512(p2 + r * BP + u * 8, (__m512i)_mm512_cvtne2ps_pbh(s[u + 1], s[u]));
        l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(sum);
        m[r] = m_new;
      }
      // O[R][Dh] = alpha O + P V_blk: per key pair one broadcast of (p_j, p_j+1) and one dot product per 16
      // columns, RP rows x up to 4 vectors of columns at a time.
      const uint32_t* vt = sc.vt2.data() + blk * BP * Dh;
      const int64_t np = (nk + 1) / 2;
      for (int r0 = 0; r0 < R; r0 += RP)
        for (int64_t cv0 = 0; cv0 < nvec; cv0 += 4) {
          const int64_t ncv = nvec - cv0 < 4 ? nvec - cv0 : 4;
          const int64_t c0 = cv0 * W;
          __m512 acc[RP][4];
          for (int r = 0; r < RP; ++r) {
            const __m512 al = _mm512_set1_ps(alpha[r0 + r]);
            for (int u = 0; u < ncv; ++u) acc[r][u] = _mm512_mul_ps(_mm512_loadu_ps(O + (r0 + r) * Dh + c0 + u * W), al);
          }
          for (int64_t jp = 0; jp < np; ++jp) {
            __m512bh vv[4];
            for (int u = 0; u < ncv; ++u) vv[u] = (__m512bh)_mm512_loadu_si512(vt + jp * Dh + c0 + u * W);
            for (int r = 0; r < RP; ++r) {
              const __m512bh pv = (__m512bh)_mm512_set1_epi32((int)p2[(r0 + r) * BP + jp]);
              for (int u = 0; u < ncv; ++u) acc[r][u] = _mm512_dpbf16_ps(acc[r][u], pv, vv[u]);
            }
          }
          for (int r = 0; r < RP; ++r)
            for (int u = 0; u < ncv; ++u) _mm512_storeu_ps(O + (r0 + r) * Dh + c0 + u * W, acc[r][u]);
        }
    }
    for (int64_t r = 0; r < nr; ++r) {
      float* orow = ob + (i0 + r) * d.out_ld;
      const __m512 inv = _mm512_set1_ps(l[r] > 0.0f ? 1.0f / l[r] : 0.0f);  // no visible key: zeros
      for (int64_t c = 0; c < Dh; c += W) _mm512_storeu_ps(orow + c, _mm512_mul_ps(_mm512_loadu_ps(O + r * Dh + c), inv));
    }
  }
}

// Blocks of 64 keys, 6 query rows per tile; up to 32 keys (one block of 32) 8 rows per tile.
TFM_TARGET_AVX512_BF16 void flash_task_bf16(const FlashArgs& a, int64_t bh, int64_t i0, int64_t i1, FlashScratch& sc) {
  flash_bf16_body<4, 6, 6>(a, bh, i0, i1, sc);
}
TFM_TARGET_AVX512_BF16 void flash_task_bf16_short(const FlashArgs& a, int64_t bh, int64_t i0, int64_t i1,
                                                  FlashScratch& sc) {
  flash_bf16_body<2, 8, 4>(a, bh, i0, i1, sc);
}
#undef TFM_BF16_INLINE
#pragma GCC diagnostic pop

using FlashFn = void (*)(const FlashArgs&, int64_t, int64_t, int64_t, FlashScratch&);
// Whether this call runs the bf16 copy: a bf16 (or int8) model's attention where the CPU and the cap allow.
bool bf16_kernel(const AttentionDims& d) { return d.bf16 && d.head_dim % 16 == 0 && kernel_bf16_dot(); }

// The blocked kernel's copy for this call and Lk keys: bf16 dot products where bf16_kernel(d) (blocks of 32 keys
// up to 32 keys), else the fp32 copy of kernel_isa().
FlashFn flash_fn(const AttentionDims& d, int64_t Lk) {
  if (bf16_kernel(d)) return Lk <= 32 ? flash_task_bf16_short : flash_task_bf16;
  return kernel_isa() == KernelIsa::Avx512 ? flash_task_avx512 : flash_task_avx2;
}

void attention_blocked(float* out, const float* q, const float* k, const float* v, const AttentionDims& d,
                       const AttentionMask& mask) {
  const int64_t BH = d.batch * d.num_heads, Lq = d.q_len;
  // Tasks: (batch, head, chunk of query rows); chunks only when there are too few heads to share.
  const int64_t chunk = BH >= 8 ? Lq : 64;
  const int64_t nchunk = (Lq + chunk - 1) / chunk;
  const FlashFn fn = flash_fn(d, d.kv_len);
  FlashArgs a{q, k, v, out, &d, &mask};
#pragma omp parallel if (BH * nchunk > 1 && BH * Lq * d.kv_len * d.head_dim > 65536)
  {
    FlashScratch sc;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < BH * nchunk; ++t) {
      const int64_t bh = t / nchunk, i0 = (t % nchunk) * chunk;
      fn(a, bh, i0, i0 + chunk < Lq ? i0 + chunk : Lq, sc);
    }
  }
}

// One (batch b, head h) of the GEMM path: S = scale Q K^T into P [Lq, Lk], masked softmax, dropout, O = A V.
void head_via_gemm(float* ob, float* P, float* dropped, const float* qb, const float* kb, const float* vb,
                   const AttentionDims& d, const AttentionMask& mask, int64_t b, const float* M, int64_t h = 0) {
  const int64_t Lq = d.q_len, Lk = d.kv_len, Dh = d.head_dim;
  if (Lk == 0) {
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t c = 0; c < Dh; ++c) ob[i * d.out_ld + c] = 0.0f;
    return;
  }
  gemm(false, true, Lq, Lk, Dh, d.scale, qb, d.q_ld, kb, d.k_ld, 0.0f, P, Lk);  // S = scale * Q K^T  [Lq, Lk]
  if (mask.bias)  // S += bias[b, h]
    for (int64_t i = 0; i < Lq; ++i) {
      const float* br = mask.bias_row(b, h, i, Lq, Lk);
#pragma omp simd
      for (int64_t j = 0; j < Lk; ++j) P[i * Lk + j] += br[j];
    }
  for (int64_t i = 0; i < Lq; ++i) masked_softmax_row(P + i * Lk, b, i, Lq, Lk, mask);
  const float* A = P;
  if (M) {
    for (int64_t x = 0; x < Lq * Lk; ++x) dropped[x] = P[x] * M[x];
    A = dropped;
  }
  gemm(false, false, Lq, Dh, Lk, 1.0f, A, Lk, vb, d.v_ld, 0.0f, ob, d.out_ld);  // O = A V  [Lq, Dh]
}

// Up to kBlockedMinKeys keys the [Lq, Lk] scratch is small and oneDNN's GEMMs were faster (1.17x at [32, 32]).
constexpr int64_t kBlockedMinKeys = 32;
// On the AVX2 copy the GEMM path stays faster up to this many keys (ops/attention.h); its per-thread scratch is
// then at most [Lq, 1024] floats per head task.
constexpr int64_t kGemmMaxKeysAvx2 = 1024;
std::atomic<bool> g_force_blocked{false};

// Whether inference attention over Lk keys runs the blocked kernel (else head_via_gemm into scratch).
bool use_blocked(const AttentionDims& d, int64_t Lk) {
  if (bf16_kernel(d)) return true;
  if (Lk <= kBlockedMinKeys) return false;
  return g_force_blocked.load(std::memory_order_relaxed) || kernel_isa() == KernelIsa::Avx512 || Lk > kGemmMaxKeysAvx2;
}

// The unpadded batch (dims.seq_offsets): tasks (sentence, head, chunk of query rows) over all sentences, each
// running the kernel the padded path picks for its length, on a one-sentence view.
void attention_varlen(float* out, const float* q, const float* k, const float* v, const AttentionDims& d,
                      const AttentionMask& mask) {
  struct Task {
    int64_t b, h, i0, i1;
  };
  const int64_t* off = d.seq_offsets;
  const int64_t H = d.num_heads;
  std::vector<Task> tasks;
  int64_t work = 0;
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t len = off[b + 1] - off[b];
    if (len < 0) throw std::invalid_argument("attention_forward: seq_offsets must be non-decreasing");
    if (mask.bias && len > mask.bias_len)
      throw std::invalid_argument("attention_forward: sentence of " + std::to_string(len) +
                                  " tokens is longer than the score bias table (bias_len " +
                                  std::to_string(mask.bias_len) + ")");
    const int64_t chunk = use_blocked(d, len) && len > kBlockedMinKeys && H < 8 ? 64 : (len > 0 ? len : 1);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i0 = 0; i0 < len; i0 += chunk) tasks.push_back({b, h, i0, i0 + chunk < len ? i0 + chunk : len});
    work += H * len * len * d.head_dim;
  }
  const int64_t ntask = (int64_t)tasks.size();
#pragma omp parallel if (ntask > 1 && work > 65536)
  {
    FlashScratch sc;
    std::vector<float> scratch;
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < ntask; ++t) {
      const Task& tk = tasks[t];
      const int64_t o = off[tk.b], len = off[tk.b + 1] - o;
      AttentionDims s = d;  // this sentence alone: batch 1, its length
      s.batch = 1;
      s.q_len = s.kv_len = len;
      s.k_bs = len * d.k_ld;
      s.v_bs = len * d.v_ld;
      s.seq_offsets = nullptr;
      const float *qs = q + o * d.q_ld, *ks = k + o * d.k_ld, *vs = v + o * d.v_ld;
      float* os = out + o * d.out_ld;
      if (use_blocked(d, len)) {
        FlashArgs a{qs, ks, vs, os, &s, &mask};
        flash_fn(s, len)(a, tk.h, tk.i0, tk.i1, sc);
      } else {
        scratch.resize(len * len);
        const int64_t Dh = d.head_dim;
        head_via_gemm(os + tk.h * Dh, scratch.data(), nullptr, qs + tk.h * Dh, ks + d.kv_col(tk.h),
                      vs + d.kv_col(tk.h), s, mask, 0, nullptr, tk.h);
      }
    }
  }
}

}  // namespace

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                       const AttentionDims& dims_in, const AttentionMask& mask, const float* dropout_mask) {
  AttentionDims d = dims_in;
  resolve(d);
  if (d.seq_offsets) {
    if (probs || dropout_mask)
      throw std::invalid_argument("attention_forward: an unpadded batch (seq_offsets) takes no probs or dropout");
    if (mask.query_mask || mask.key_mask || mask.mask || mask.valid_lens)
      throw std::invalid_argument("attention_forward: an unpadded batch (seq_offsets) takes only a causal mask");
    if (mask.bias && (mask.bias_len <= 0 || mask.bias_batch_stride != 0))  // [heads, Lq, Lk] is a padded layout
      throw std::invalid_argument("attention_forward: an unpadded batch (seq_offsets) takes a score bias only as "
                                  "one shared table (bias_len set, bias_batch_stride 0)");
    attention_varlen(out, q, k, v, d, mask);
    return;
  }
  const int64_t B = d.batch, H = d.num_heads, Lq = d.q_len, Lk = d.kv_len, Dh = d.head_dim;
  if (B * H * Lq == 0) return;
  if (!probs && !dropout_mask && use_blocked(d, Lk)) {
    attention_blocked(out, q, k, v, d, mask);
    return;
  }
#pragma omp parallel
  {
    std::vector<float> scratch(probs ? 0 : Lq * Lk);
    std::vector<float> dropped(dropout_mask ? Lq * Lk : 0);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      int64_t b = bh / H, h = bh % H;
      head_via_gemm(out + b * Lq * d.out_ld + h * Dh, probs ? probs + bh * Lq * Lk : scratch.data(), dropped.data(),
                    q + b * Lq * d.q_ld + h * Dh, k + b * d.k_bs + d.kv_col(h), v + b * d.v_bs + d.kv_col(h), d, mask, b,
                    dropout_mask ? dropout_mask + bh * Lq * Lk : nullptr, h);
    }
  }
}

void force_blocked_attention(bool on) { g_force_blocked.store(on, std::memory_order_relaxed); }

namespace {
// attention_backward on any head size through per-head GEMMs; dscores as attention_backward_train's.
void attention_backward_gemm(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                             const float* k, const float* v, const AttentionDims& dims_in, const float* dropout_mask,
                             float* dscores) {
  AttentionDims d = dims_in;
  resolve(d);
  const int64_t B = d.batch, H = d.num_heads, Lq = d.q_len, Lk = d.kv_len, Dh = d.head_dim;
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
#pragma omp simd
          for (int64_t j = 0; j < Lk; ++j) g[j] *= M[i * Lk + j];
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < Lk; ++j) dot += g[j] * p[j];
#pragma omp simd
        for (int64_t j = 0; j < Lk; ++j) g[j] = p[j] * (g[j] - dot);
      }
      if (dscores) std::copy(dP.begin(), dP.end(), dscores + bh * Lq * Lk);
      // dQ = scale dS K ; dK = scale dS^T Q
      gemm(false, false, Lq, Dh, Lk, d.scale, dP.data(), Lk,
                  kb, d.k_ld, 0.0f, dqb, d.q_ld);
      gemm(true, false, Lk, Dh, Lq, d.scale, dP.data(), Lk,
                  qb, d.q_ld, 0.0f, dkb, d.k_ld);
    }
  }
}
}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                        const float* k, const float* v, const AttentionDims& dims, const float* dropout_mask,
                        float* dbias) {
  const int64_t B = dims.batch, H = dims.num_heads, Lq = dims.q_len, Lk = dims.kv_len;
  if (dims.kv_heads() != H)
    throw std::invalid_argument("attention_backward: grouped-query attention is trained on repeated keys and values");
  if (dbias) std::fill(dbias, dbias + H * Lq * Lk, 0.0f);
  if (B * H * Lq == 0 || Lk == 0) return;
  // With a shared score bias: every row's dS, then their sum over the batch (in batch order: deterministic).
  std::vector<float> dscores(dbias ? B * H * Lq * Lk : 0);
  float* ds = dbias ? dscores.data() : nullptr;
  // Fused per-head loops for the common head sizes (ops/attention_train.h), else per-head GEMMs.
  if (!attention_backward_train(dq, dk, dv, dout, probs, q, k, v, dims, dropout_mask, ds))
    attention_backward_gemm(dq, dk, dv, dout, probs, q, k, v, dims, dropout_mask, ds);
  if (!dbias) return;
  const int64_t table = H * Lq * Lk;
#pragma omp parallel for schedule(static) if (B * table > 65536)
  for (int64_t r = 0; r < H * Lq; ++r)
    for (int64_t b = 0; b < B; ++b) {
      const float* src = ds + b * table + r * Lk;
      float* dst = dbias + r * Lk;
#pragma omp simd
      for (int64_t j = 0; j < Lk; ++j) dst[j] += src[j];
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
            acc += (double)q[(b * Lq + i) * d.q_ld + h * Dh + c] * k[b * d.k_bs + j * d.k_ld + d.kv_col(h) + c];
          const double bias = mask.bias ? mask.bias_row(b, h, i, Lq, Lk)[j] : 0.0;
          s[j] = mask.visible(b, i, j, Lq, Lk) ? acc * d.scale + bias : -INFINITY;
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
          for (int64_t j = 0; j < Lk; ++j) acc += s[j] * v[b * d.v_bs + j * d.v_ld + d.kv_col(h) + c];
          out[(b * Lq + i) * d.out_ld + h * Dh + c] = (float)acc;
        }
      }
}

}  // namespace tfm::ops
