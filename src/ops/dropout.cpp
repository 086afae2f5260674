#include "ops/dropout.h"

#include <stdexcept>
#include <string>

namespace tfm::ops {

namespace {
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// One 32-bit multiply-xorshift hash per element (Wellons' lowbias32, a bijection): AVX2 has 32-bit but no 64-bit
// vector multiplies, so this vectorises where a 64-bit hash per element does not.
inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
inline uint32_t fold(uint64_t z) { return (uint32_t)(z ^ (z >> 32)); }
constexpr uint32_t kGolden32 = 0x9E3779B9u;
constexpr int64_t kParallelFill = 1 << 18;  // masks above this many elements are written by the threads
}  // namespace

DropoutDraw dropout_draw(int64_t n, float p, Rng& rng, const AttentionDropoutDims* inner_dims) {
  if (!(p >= 0.0f && p < 1.0f)) throw std::invalid_argument("dropout probability must be in [0, 1)");
  DropoutDraw d;
  d.n = n;
  d.p = p;
  if (RowKeys* keys = rng.row_keys()) {
    const int64_t rows = (int64_t)keys->rows.size();
    if (rows == 0 || n % rows != 0)
      throw std::invalid_argument("dropout_mask: " + std::to_string(n) + " elements are not " + std::to_string(rows) +
                                  " keyed rows");
    if (inner_dims && inner_dims->heads * inner_dims->lq * inner_dims->lk != n / rows)
      throw std::invalid_argument("dropout_mask: attention dims do not match the row size");
    d.keyed = true;
    d.seed = mix64(keys->key ^ mix64(++keys->calls * 0x9E3779B97F4A7C15ull));
    d.rows = keys->rows;
    if (inner_dims) d.inner = *inner_dims;
    return d;
  }
  d.seed = rng.next_u64();
  return d;
}

void dropout_fill(float* mask, const DropoutDraw& d) {
  const int64_t n = d.n;
  if (n == 0) return;
  const float scale = 1.0f / (1.0f - d.p);
  const uint32_t thr =
      (uint32_t)((double)d.p * 4294967296.0 > 4294967295.0 ? 4294967295.0 : (double)d.p * 4294967296.0);
  if (d.keyed) {
    const int64_t rows = (int64_t)d.rows.size();
    const int64_t per_row = n / rows;
#pragma omp parallel for schedule(static) if (n > kParallelFill && rows > 1)
    for (int64_t b = 0; b < rows; ++b) {
      const uint64_t seed = mix64(d.seed ^ mix64(d.rows[b] + 0x632BE59BD9B4E019ull));
      float* m = mask + b * per_row;
      if (d.inner.heads) {
        const int64_t lq = d.inner.lq, lk = d.inner.lk;
        for (int64_t h = 0; h < d.inner.heads; ++h)
          for (int64_t q = 0; q < lq; ++q) {
            float* mr = m + (h * lq + q) * lk;
            const uint32_t s = fold(mix64(seed + (((uint64_t)h << 32) | (uint64_t)q) * 0x9E3779B97F4A7C15ull));
#pragma omp simd
            for (int64_t k = 0; k < lk; ++k) mr[k] = hash32(s + (uint32_t)k * kGolden32) < thr ? 0.0f : scale;
          }
      } else {
        const uint32_t s = fold(seed);
#pragma omp simd
        for (int64_t j = 0; j < per_row; ++j) m[j] = hash32(s + (uint32_t)j * kGolden32) < thr ? 0.0f : scale;
      }
    }
    return;
  }
  // One draw from rng seeds a counter hash per element: much cheaper than mt19937_64 draws, and it vectorises;
  // the mask stays a deterministic function of the rng state.
  const uint32_t s = fold(mix64(d.seed));
  const int64_t chunk = 1 << 16;  // element i's value depends on i alone: any split writes the same mask
#pragma omp parallel for schedule(static) if (n > kParallelFill)
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t i1 = i0 + chunk < n ? i0 + chunk : n;
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) mask[i] = hash32(s + (uint32_t)(i + 1) * kGolden32) < thr ? 0.0f : scale;
  }
}

void dropout_mask(float* mask, int64_t n, float p, Rng& rng, const AttentionDropoutDims* inner_dims) {
  dropout_fill(mask, dropout_draw(n, p, rng, inner_dims));
}

void dropout_apply(float* out, const float* inp, const float* mask, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * mask[i];
}

}  // namespace tfm::ops
