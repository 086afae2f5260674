// Scaled dot-product attention, multi-head, with every mask form the reference documents use.
//
//   out = softmax(q k^T / sqrt(head_dim) restricted to visible keys) v          (Vaswani et al. eq. 1)
//
// Heads are read in place from the projection outputs: head h of token t is the slice
// [h * head_dim, (h + 1) * head_dim) of row t, so q/k/v may be views into one fused QKV buffer (row stride
// `ld` floats). A masked key is excluded from the softmax. This equals the references' fills (-inf in docs/000,
// float32 min in Hugging Face BERT, -1e6 in d2l's masked_softmax) whenever a row has a visible key; a query row
// with no visible key yields zeros (the references give NaN, or a uniform average in d2l).
#pragma once
#include <cstdint>

namespace tfm::ops {

// Which (batch b, query i, key j) entries may attend. All given forms are combined (logical AND).
struct AttentionMask {
  const float* query_mask = nullptr;    // [B, Lq], 0 = padded query (docs/000: mask = query_mask ⊗ key_mask)
  const float* key_mask = nullptr;      // [B, Lk], 0 = padded key (HF attention_mask, key padding mask)
  const float* mask = nullptr;          // [B, Lq, Lk], 0 = masked (docs/000 general mask, BERT 3-D mask)
  const int64_t* valid_lens = nullptr;  // d2l valid_lens: [B], or [B, Lq] when valid_lens_per_query; keys j >= len masked
  bool valid_lens_per_query = false;
  bool causal = false;                  // key j masked when j > i + causal_offset (decoder self-attention)
  int64_t causal_offset = 0;
  // Additive score bias, not a mask: added to scale * q_i . k_j before the softmax (MPNet's relative position
  // bias, modeling_mpnet.py `attention_scores += position_bias`). Element (b, h, i, j) is
  // bias[b * bias_batch_stride + (h * Lq + i) * Lk + j], in score units (nats); bias_batch_stride 0 = one
  // [heads, Lq, Lk] table shared by every batch row (PyTorch's expand over the batch). Null: no bias.
  const float* bias = nullptr;
  int64_t bias_batch_stride = 0;
  // 0: the table's rows are this call's [heads, Lq, Lk]. Else the table is [heads, bias_len, bias_len] and
  // element (b, h, i, j) is bias[b * bias_batch_stride + (h * bias_len + i) * bias_len + j]: one table of the
  // longest sentence shared by the sentences of an unpadded batch (AttentionDims::seq_offsets; i, j are then
  // positions inside the sentence), bias_len >= every length.
  int64_t bias_len = 0;

  // The bias of (b, h, query i) over keys 0 .. Lk - 1 (bias must be set).
  const float* bias_row(int64_t b, int64_t h, int64_t i, int64_t Lq, int64_t Lk) const {
    const int64_t rq = bias_len ? bias_len : Lq, rk = bias_len ? bias_len : Lk;
    return bias + b * bias_batch_stride + (h * rq + i) * rk;
  }

  bool any() const { return query_mask || key_mask || mask || valid_lens || causal; }
  // Number of leading keys that can be visible for row (b, i) before per-element masks apply.
  int64_t key_limit(int64_t b, int64_t i, int64_t Lq, int64_t Lk) const;
  bool visible(int64_t b, int64_t i, int64_t j, int64_t Lq, int64_t Lk) const;
};

struct AttentionDims {
  int64_t batch = 1, q_len = 1, kv_len = 1, num_heads = 1, head_dim = 1;
  int64_t q_ld = 0, k_ld = 0, v_ld = 0, out_ld = 0;  // row strides in floats; 0 = num_heads * head_dim
  int64_t k_bs = 0, v_bs = 0;                          // batch strides of k, v in floats; 0 = kv_len * ld
                                                       // (a KV cache holds more rows than kv_len)
  float scale = 0.0f;                                  // 0 = 1 / sqrt(head_dim)
  // Unpadded batch ("remove padding", as text-embeddings-inference and FasterTransformer): when set, q, k, v and
  // out hold the `batch` sentences' tokens concatenated, sentence b being rows [seq_offsets[b],
  // seq_offsets[b + 1]) of each, and its queries attend to its own keys only (self-attention: its query and key
  // counts are both its length). [batch + 1], non-decreasing, seq_offsets[0] = 0. q_len / kv_len are then
  // ignored, k_bs / v_bs too, and the mask may only be causal (the other forms index a padded [B, L] layout) or
  // a score bias with bias_len set and bias_batch_stride 0 (AttentionMask::bias_len).
  const int64_t* seq_offsets = nullptr;
  // A bf16 (or int8) model's attention (torch.autocast(bfloat16) order): the blocked kernel rounds q (scaled),
  // k, the softmax weights and v to bf16 for its two products and accumulates in fp32 with AVX512-BF16 dot
  // products, when kernel_bf16_dot() (ops/isa.h) and head_dim is a multiple of 16, at every key count (blocks of
  // 32 keys up to 32 keys, of 64 above); otherwise the fp32 kernels run. The online softmax stays fp32.
  bool bf16 = false;
  // Grouped-query attention (Ainslie et al. 2023; Llama / Qwen3 num_key_value_heads): k and v hold num_kv_heads
  // heads, query head h reading key / value head h / (num_heads / num_kv_heads), as Hugging Face's repeat_kv.
  // 0: num_heads. num_heads must be a multiple of it (std::invalid_argument otherwise). The forward kernels and
  // the reference take it; attention_backward does not (std::invalid_argument): training repeats k and v.
  int64_t num_kv_heads = 0;
  int64_t kv_heads() const { return num_kv_heads ? num_kv_heads : num_heads; }
  // Column offset of the key / value head query head h reads.
  int64_t kv_col(int64_t h) const { return (h / (num_heads / kv_heads())) * head_dim; }
};

// q: [B, Lq, heads*head_dim] (stride q_ld), k, v: [B, Lk, heads*head_dim] (strides k_ld, v_ld)
// out: [B, Lq, heads*head_dim] (stride out_ld), written.
// probs: [B, heads, Lq, Lk] attention weights (before dropout), written when non-null (needed for backward
//        and visualisation).
// dropout_mask: [B, heads, Lq, Lk] multipliers (0 or 1/(1-p)) applied to the weights before v, or null
//        (d2l's DotProductAttention drops attention weights).
// With probs and dropout_mask both null (inference) and more than 32 keys (any number for dims.bf16 on the
// AVX512-BF16 copy), on the AVX-512 copy or above 1,024 keys, no [Lq, Lk] buffer is written: a
// blocked online softmax per head (Flash-attention order on CPU: key blocks of 64 (AVX-512) or 32 (AVX2) keys;
// running max and sum per query row; accumulator rescaled by exp(old_max - new_max)), vectorised for
// kernel_isa() (ops/isa.h). Otherwise the scores go through oneDNN GEMMs and a masked softmax into probs (or a
// per-thread [Lq, Lk] scratch): on the AVX2 copy that path took 0.73-0.83x the blocked kernel's time from 64 to
// 512 keys (AMD EPYC Zen 3, head_dim 32 and 64, 1 and 2 threads; BENCHMARKS.md), so AVX2 runs it up to 1,024 keys.
//
// With dims.seq_offsets (an unpadded batch) probs and dropout_mask must be null (std::invalid_argument
// otherwise, also for a non-causal mask); each (sentence, head) runs the kernel the padded path would pick for its
// length, so sentence b's rows equal the padded batch's rows for a key_mask of its length.
void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v,
                       const AttentionDims& dims, const AttentionMask& mask, const float* dropout_mask = nullptr);

// Forces inference attention onto the blocked kernel wherever it can run (true), or back to the choice above
// (false, the default): tests check both kernels on every ISA. Process-wide; read when a call starts.
void force_blocked_attention(bool on);

// Gradients of attention_forward given its saved probs. dq, dk, dv use the q/k/v strides and are written.
// dbias: null, or [heads, Lq, Lk] written with the gradient of a score bias shared by the batch rows
// (AttentionMask::bias with bias_batch_stride 0 and bias_len 0; MPNet's relative position bias): the sum over the
// batch of dL/dS[b, h, i, j], S the pre-softmax scores (scale * q_i . k_j + bias), i.e. P * (dP - sum_j dP * P)
// with dP the gradient of the (dropped) weights. A masked key (probability exactly 0) gets 0.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                        const float* k, const float* v, const AttentionDims& dims, const float* dropout_mask = nullptr,
                        float* dbias = nullptr);

// Plain reference: double precision, element by element, same semantics.
void attention_forward_ref(float* out, float* probs, const float* q, const float* k, const float* v,
                           const AttentionDims& dims, const AttentionMask& mask);

}  // namespace tfm::ops

namespace tfm::ops {

// The keys and values one incremental decoder step attends over (a KV cache), gathered by row index so that
// beam search reorders rows without copying: key j of batch row r is buffer row
//   rows[r * rows_stride + j]   when rows is given (self-attention: one buffer row per step and hypothesis), or
//   blocks[r] * kv_len + j      otherwise (cross-attention: one block of kv_len rows per source sentence).
struct StepKeys {
  const float* k = nullptr;  // [buffer rows, heads * head_dim]
  const float* v = nullptr;  // [buffer rows, heads * head_dim]
  int64_t kv_len = 0;        // Lk: keys per batch row
  const int64_t* rows = nullptr;
  int64_t rows_stride = 0;
  const int64_t* blocks = nullptr;      // [R]
  const int64_t* valid_lens = nullptr;  // [R] leading keys visible to each row (d2l valid_lens); null: all kv_len
};

// Attention of one query per batch row (a decoder step): q [R, heads * head_dim], out [R, heads * head_dim]
// written; probs [R, heads, kv_len] written when non-null (masked keys 0). The arithmetic is attention_forward's
// for q_len 1 (a simd dot product per key, masked softmax with fast_exp, then out += p_j v_j key by key), so a
// cached step equals the teacher-forced forward. A row with no visible key gets zeros.
void attention_step(float* out, float* probs, const float* q, int64_t R, int64_t num_heads, int64_t head_dim,
                    const StepKeys& kv);
// Plain reference in double precision, same semantics.
void attention_step_ref(float* out, float* probs, const float* q, int64_t R, int64_t num_heads, int64_t head_dim,
                        const StepKeys& kv);

}  // namespace tfm::ops
