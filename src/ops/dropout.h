// Inverted dropout (torch.nn.Dropout in training): keep with probability 1 - p and scale by 1 / (1 - p).
#pragma once
#include <cstdint>
#include <vector>

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

// dropout_mask in two halves, so that a training forward keeps a few bytes instead of its masks and backward
// writes them again: dropout_draw consumes rng (or its row keys' call count) exactly as dropout_mask does and
// returns what the mask is a function of; dropout_fill(mask, draw) writes dropout_mask's mask, bit for bit, as
// often as asked. Throws as dropout_mask for a bad p or keyed rows that do not divide n.
struct DropoutDraw {
  int64_t n = 0;  // 0: no mask (p 0, or never drawn)
  float p = 0.0f;
  bool keyed = false;
  uint64_t seed = 0;            // unkeyed: the generator's draw; keyed: the call's hash
  std::vector<uint64_t> rows;   // keyed: the row keys
  AttentionDropoutDims inner;   // heads 0: none
  bool defined() const { return n > 0; }
};
DropoutDraw dropout_draw(int64_t n, float p, Rng& rng, const AttentionDropoutDims* inner_dims = nullptr);
void dropout_fill(float* mask, const DropoutDraw& draw);
// out[n] = inp[n] * mask[n] (in-place allowed). Backward is the same product on the gradient.
void dropout_apply(float* out, const float* inp, const float* mask, int64_t n);
}  // namespace tfm::ops
