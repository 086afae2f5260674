// DeBERTa's disentangled attention (He et al. 2021, "DeBERTa", eq. 2-4; DeBERTa-v3 / modeling_deberta_v2.py
// DisentangledSelfAttention) as an option of nn::MultiHeadAttention: a score bias made from the layer's own
// queries and keys and the shared relative-position embeddings, added before the softmax.
//
//   S[h, i, j] = scale * (q_i . k_j + c2p + p2c),   scale = 1 / sqrt(head_dim * scale_factor)
//   c2p = q_i . pos_key[idx(i - j)]        (content-to-position; pos_att_type "c2p")
//   p2c = k_j . pos_query[idx(i - j)]      (position-to-content; "p2c")
//   idx(r) = clamp(bucket(r) + span, 0, 2 span - 1)
// scale_factor = 1 + the number of terms on (modeling_deberta_v2.py counts c2p and p2c even when
// relative_attention is off). pos_key / pos_query ([2 span, H], head h in columns [h * head_dim, (h + 1) * head_dim))
// are the layer's key / query projections (or its pos_key_proj / pos_query_proj when share_att_key is false) of
// rel_embeddings after encoder.LayerNorm (norm_rel_ebd "layer_norm"): fixed at inference, so the composition
// computes them once per layer at load. bucket is make_log_bucket_position when position_buckets > 0, else r.
// The bias of relative position i - j is the same for every sentence of a batch at its own positions, so an unpadded
// batch (each sentence at positions 0 .. len - 1) equals the padded one for right- or left-padded rows.
#pragma once
#include <cstdint>
#include <vector>

namespace tfm::nn {

// make_log_bucket_position of one relative position r = i - j: r itself when |r| <= bucket_size / 2, else
// sign(r) * (mid + ceil(log(|r| / mid) / log((max_position - 1) / mid) * (mid - 1))), mid = bucket_size / 2, in float32
// arithmetic as the published torch ops (the values of deberta-v3's 256 buckets / 512 positions equal a float64
// re-derivation for |r| <= 2048: tests/test_disentangled_attention.cpp). bucket_size <= 0: r.
int64_t deberta_log_bucket(int64_t r, int64_t bucket_size, int64_t max_position);

struct DisentangledAttention {
  int64_t num_heads = 0, head_dim = 0;
  int64_t span = 0;          // att_span: position_buckets when > 0, else max_relative_positions
  int64_t bucket_size = 0;   // position_buckets (<= 0: relative positions used as they are, clamped to the span)
  int64_t max_position = 0;  // max_relative_positions
  bool c2p = true, p2c = true;
  // pos_key for c2p, pos_query for p2c: [2 span, heads * head_dim] each (empty when that term is off).
  std::vector<float> pos_key, pos_query;

  // The scale's factor; 0: 1 + the terms on. (modeling_deberta_v2.py counts pos_att_type even when
  // relative_attention is false and no term is added: that composition sets it.)
  int64_t factor = 0;

  int64_t scale_factor() const { return factor > 0 ? factor : 1 + (c2p ? 1 : 0) + (p2c ? 1 : 0); }
  bool any() const { return c2p || p2c; }
  float scale() const;  // 1 / sqrt(head_dim * scale_factor)
  // The row of pos_key / pos_query read for relative position r = i - j.
  int64_t index(int64_t r) const;

  // The bias of one sentence of L tokens (c2p + p2c, times scale()): bias [heads, L, L] written. q, k: [L, heads *
  // head_dim] rows of stride ld (views into a fused QKV buffer). Products over the pos rows the sentence reaches
  // only (at most 2 L - 1 of them). Zeros when no term is on. Thread-safe.
  void bias(float* out, const float* q, const float* k, int64_t ld, int64_t L) const;
  // Plain reference: double precision, element by element, same contract.
  void bias_ref(float* out, const float* q, const float* k, int64_t ld, int64_t L) const;

  // Inference self-attention with the bias: each sentence runs ops::attention_forward on its own [heads, len, len]
  // bias (memory quadratic in one sentence's length, not the batch's). q, k, v: rows of stride ld; ctx: rows of
  // stride out_ld, written; scores q . k scaled by scale() (no bias when no term is on). bf16:
  // ops::AttentionDims::bf16.
  // Padded batch [B, L]: key_mask [B, L] (1 = real token) or null; the bias is read at the padded columns (the
  // Hugging Face positions), so a row with holes in its mask gets the same result as there. A query at a padded
  // position attends to the real keys (Hugging Face's XSoftmax gives it zero weights: those rows are unspecified).
  void attention_inference(float* ctx, const float* q, const float* k, const float* v, int64_t ld, int64_t out_ld,
                           int64_t B, int64_t L, const float* key_mask, bool bf16) const;
  // Unpadded batch: sentence b is rows [offsets[b], offsets[b + 1]) of q, k, v and ctx, at positions 0 .. len - 1.
  void attention_inference(float* ctx, const float* q, const float* k, const float* v, int64_t ld, int64_t out_ld,
                           int64_t batch, const int64_t* offsets, bool bf16) const;
};

}  // namespace tfm::nn
