// Inverted dropout (torch.nn.Dropout in training): keep with probability 1 - p and scale by 1 / (1 - p).
#pragma once
#include <cstdint>

#include "core/rng.h"

namespace tfm::ops {
// Fills mask[n] with 0 or 1 / (1 - p) from rng. p in [0, 1).
void dropout_mask(float* mask, int64_t n, float p, Rng& rng);
// out[n] = inp[n] * mask[n] (in-place allowed). Backward is the same product on the gradient.
void dropout_apply(float* out, const float* inp, const float* mask, int64_t n);
}  // namespace tfm::ops
