// Training kernels for scaled dot-product attention at small head sizes (d2l: head_dim 8, a few tokens), where
// per-head GEMM calls cost more than their arithmetic: each (batch, head) runs fused loops with head_dim fixed
// at compile time, and keys past a row's key_limit (valid_lens, causal) are skipped rather than computed and
// masked. Same semantics as attention_forward / attention_backward (ops/attention.h).
#pragma once
#include "ops/attention.h"

namespace tfm::ops {

// attention_forward with probs (required) and an optional dropout mask. Returns false, writing nothing, when the
// case is not covered (head_dim not 8, 16, 32 or 64; key_mask or a general mask; more than 32 keys, where
// attention_forward's per-head GEMMs are faster): the caller then calls attention_forward.
bool attention_forward_train(float* out, float* probs, const float* q, const float* k, const float* v,
                             const AttentionDims& dims, const AttentionMask& mask, const float* dropout_mask);
// attention_backward for the same head sizes and up to 32 keys; false (nothing written) otherwise. Each row's visible keys are
// the leading ones with non-zero probability (attention_forward's masked weights are exactly 0, and a weight
// that underflowed to 0 has a zero gradient too).
// dscores: null, or [B, heads, Lq, Lk] written with dL/dS, the gradient of the pre-softmax scores (before the
// scale: P * (dP - sum_j dP * P)), 0 for the keys past a row's visible ones.
bool attention_backward_train(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                              const float* k, const float* v, const AttentionDims& dims, const float* dropout_mask,
                              float* dscores = nullptr);

}  // namespace tfm::ops
