#include "ops/dropout.h"

#include <stdexcept>

namespace tfm::ops {

void dropout_mask(float* mask, int64_t n, float p, Rng& rng) {
  if (!(p >= 0.0f && p < 1.0f)) throw std::invalid_argument("dropout probability must be in [0, 1)");
  const float scale = 1.0f / (1.0f - p);
  // One draw from rng seeds a splitmix64 stream: a counter hash per element is ~10x cheaper than mt19937_64
  // draws and vectorises; the mask stays a deterministic function of the rng state.
  const uint64_t seed = rng.next_u64();
  const uint32_t threshold = (uint32_t)((double)p * 4294967296.0 > 4294967295.0 ? 4294967295.0 : (double)p * 4294967296.0);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    mask[i] = (uint32_t)(z >> 32) < threshold ? 0.0f : scale;
  }
}

void dropout_apply(float* out, const float* inp, const float* mask, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * mask[i];
}

}  // namespace tfm::ops
