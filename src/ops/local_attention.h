// Sliding-window (banded) self-attention: each query sees only the keys within `window` positions of it,
//
//   out_i = sum_{j : |i - j| <= window, key j visible} softmax_j(q_i . k_j * scale) v_j
//
// as Hugging Face ModernBERT's local attention layers compute it with their sliding_window_mask (keys farther
// than local_attention // 2 get float32 min added before the softmax). Work and memory are linear in the
// sequence length: nothing of size [L, L] exists, only a tile of R queries x one block of keys at a time.
#pragma once
#include <cstdint>

#include "ops/attention.h"

namespace tfm::ops {

// q, k, v: [B, L, heads*head_dim] with the row strides of dims (q_ld, k_ld, v_ld; q, k, v may be views into one
// fused QKV buffer); out: [B, L, heads*head_dim] (stride out_ld), written. dims.q_len must equal dims.kv_len
// (self-attention) and the batch strides k_bs / v_bs be 0 (dense). key_mask: [B, L] (0 = padded key) or null.
// window >= 0: the half width (ModernBERT: local_attention // 2). A query with no visible key in its window gets
// zeros (Hugging Face gives a uniform average over the window then, as every entry is float32 min).
// Blocked online softmax per (batch, head, tile of queries): the tile walks only the key blocks of its window
// (AVX-512: 6 queries x 64 keys; AVX2: 3 x 32), running max and sum per query, vectorised for kernel_isa().
// Unpadded batch (dims.seq_offsets, ops/attention.h): q, k, v, out hold the sentences' rows concatenated, each
// sentence attends inside itself (positions counted from its first row), q_len / kv_len are ignored and key_mask
// must be null.
// Throws std::invalid_argument for q_len != kv_len, a negative window, non-zero batch strides, or a key_mask or
// decreasing offsets with seq_offsets.
void sliding_window_attention(float* out, const float* q, const float* k, const float* v, const AttentionDims& dims,
                              const float* key_mask, int64_t window);

// Training forward: out as sliding_window_attention (padded batch only; dims.seq_offsets must be null), and
// lse [B, heads, L] the log-sum-exp of each query's visible scaled scores (-inf for a query with no visible key,
// whose output is 0), all that the backward needs besides q, k, v and out: memory O(L * window), no [L, L].
void sliding_window_attention_train(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const AttentionDims& dims, const float* key_mask, int64_t window);
// Backward of sliding_window_attention_train (the flash-attention recomputation: p_ij = exp(s_ij - lse_i),
// dS_ij = p_ij (dout_i . v_j - dout_i . out_i)). dq, dk, dv are written, in q, k, v's layout (strides q_ld,
// k_ld, v_ld: they may be views into one fused gradient buffer); dout, out have stride out_ld. Throws as
// sliding_window_attention_train.
void sliding_window_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                       const float* lse, const float* q, const float* k, const float* v,
                                       const AttentionDims& dims, const float* key_mask, int64_t window);

// Plain reference: double precision, the full [L] score row per query with masked entries skipped.
void sliding_window_attention_ref(float* out, const float* q, const float* k, const float* v,
                                  const AttentionDims& dims, const float* key_mask, int64_t window);

}  // namespace tfm::ops
