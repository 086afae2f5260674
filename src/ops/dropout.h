// Inverted dropout (torch.nn.Dropout in training): keep with probability 1 - p and scale by 1 / (1 - p).
#pragma once
#include <cstdint>

#include "core/rng.h"

namespace tfm::ops {
// Fills mask[n] with 0 or 1 / (1 - p) from rng. p in [0, 1).
// With rng.row_keys() set, mask is [rows, n / rows] (rows = row_keys()->rows.size(), which must divide n) and
// element j of row b is keyed by (key, rows[b], call, j). For a [B, L, C] tensor j = t * C + c does not depend on
// the padded length L. inner_dims = {heads, Lq, Lk} marks attention weights [B, heads, Lq, Lk], keyed by
// (head, q, k) so that padding of Lq and Lk does not move them either.
struct AttentionDropoutDims {
  int64_t heads = 0, lq = 0, lk = 0;
};
void dropout_mask(float* mask, int64_t n, float p, Rng& rng, const AttentionDropoutDims* inner_dims = nullptr);
// out[n] = inp[n] * mask[n] (in-place allowed). Backward is the same product on the gradient.
void dropout_apply(float* out, const float* inp, const float* mask, int64_t n);
}  // namespace tfm::ops
