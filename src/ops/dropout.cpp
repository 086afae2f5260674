#include "ops/dropout.h"

#include <stdexcept>

namespace tfm::ops {

void dropout_mask(float* mask, int64_t n, float p, Rng& rng) {
  if (!(p >= 0.0f && p < 1.0f)) throw std::invalid_argument("dropout probability must be in [0, 1)");
  float scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i) mask[i] = rng.uniform() < p ? 0.0f : scale;
}

void dropout_apply(float* out, const float* inp, const float* mask, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * mask[i];
}

}  // namespace tfm::ops
