// Multi-head attention as a module: the projections around the ops/ kernels (ops/attention.h), for
// self-attention, cross-attention and the incremental decoder step over a KV cache.
//
//   out = W_o concat_h(softmax(W_q x_q (W_k x_kv)^T / sqrt(head_dim) + mask) W_v x_kv)   (Vaswani et al. eq. 4)
//
// Heads are column slices of the projections: head h is columns [h * head_dim, (h + 1) * head_dim).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/layers.h"
#include "ops/attention.h"
#include "ops/dropout.h"

namespace tfm::nn {

// An unpadded batch ("remove padding", as text-embeddings-inference and FasterTransformer): `batch` sentences'
// tokens concatenated into one [T, H] matrix, sentence b at rows [offsets[b], offsets[b + 1]); T = offsets[batch].
// The projections, LayerNorms and feed-forwards run on the T real tokens; attention runs per sentence.
struct Varlen {
  int64_t batch = 0;
  const int64_t* offsets = nullptr;  // [batch + 1], non-decreasing, offsets[0] = 0
  int64_t max_len = 0;               // the longest sentence (scratch sizing)
  // [batch] or null (0): the padded column of each sentence's first token, where rotary positions start (Hugging
  // Face's unpadded path keeps each token's padded position id).
  const int64_t* start = nullptr;
  int64_t tokens() const { return offsets[batch]; }
};

// Rotary position embeddings (ops/rotary.h) of a self-attention: q and k rotated at each token's position before
// the scores. theta per module (ModernBERT's global and local layers differ); dim the rotated columns per head
// (head_dim * partial_rotary_factor; 0: head_dim). The cos / sin tables of positions 0 .. n - 1 are computed once
// and shared by copies of a Rotary made by make() (every layer of one theta), grown when a longer input comes.
struct RotaryTables {
  int64_t len = 0, half = 0;
  std::vector<float> cos, sin;  // [len, half]
};
struct Rotary {
  double theta = 0.0;  // 0: no rotary positions
  int64_t dim = 0;
  std::shared_ptr<struct RotaryCache> cache;
  static Rotary make(double theta, int64_t dim);
  bool enabled() const { return theta > 0.0; }
  // Tables of at least len positions (thread-safe).
  std::shared_ptr<const RotaryTables> tables(int64_t len) const;
};

struct DisentangledAttention;  // nn/disentangled_attention.h

struct MultiHeadAttention {
  Linear query, key, value, output;  // [H, H] each (training and unfused inference)
  Linear qkv;                        // optional fused self-attention projection [3H, H]: q | k | v columns
  int64_t num_heads = 1, hidden_size = 0;
  int64_t head_dim() const { return hidden_size / num_heads; }
  // Options of self-attention (off by default; the plain module pays nothing for them):
  //  - rotary: q and k rotated at their positions (padded: column l of the row; unpadded: Varlen::start + the
  //    token's index in its sentence);
  //  - window >= 0: sliding-window attention (ops/local_attention.h), each query sees the keys within `window`
  //    positions (ModernBERT's local layers: local_attention // 2). Training keeps O(L * window) memory (the
  //    banded kernel's log-sum-exp, no [L, L] weights), except with dropout on the attention weights, which runs
  //    the dense kernel under a band mask. The mask may then hold only a key_mask.
  //  - a trainable fused projection: qkv with parameters ([3H, H], "Wqkv") instead of query / key / value.
  //  - disentangled: DeBERTa's c2p / p2c score bias from q, k and the relative-position embeddings
  //    (nn/disentangled_attention.h), scores scaled by its scale(); inference only (forward_inference, padded with a
  //    key_mask or unpadded): the saving forward and the first-token paths throw std::logic_error.
  Rotary rotary;
  int64_t window = -1;
  std::shared_ptr<const DisentangledAttention> disentangled;

  // Saving forward. xq: [B, Lq, H], xkv: [B, Lk, H] (both alive until backward); out: [B, Lq, H] written.
  // Attention weights [B, heads, Lq, Lk] stay in `probs`; dropout (ctx) drops them, as d2l's DotProductAttention.
  // A score bias in `mask` (ops::AttentionMask::bias) must be one [heads, Lq, Lk] table shared by the batch rows
  // (bias_batch_stride 0, bias_len 0; std::invalid_argument otherwise): backward then writes its gradient to dbias.
  void forward(const Context& ctx, float* out, const float* xq, const float* xkv, int64_t B, int64_t Lq, int64_t Lk,
               const ops::AttentionMask& mask);
  // dxq [B, Lq, H] and dxkv [B, Lk, H] added to (they may alias: self-attention; dout may alias dxq, being read
  // entirely before either is written). When the forward had a score
  // bias, dbias [heads, Lq, Lk] is written with its gradient (ops::attention_backward's dbias); else it is emptied.
  void backward(const float* dout, float* dxq, float* dxkv);
  // backward's products for fused_qkv with bf16 parameter products, from dQKV [B * Lq, 3H].
  void backward_stacked_bf16(const float* dqkv, float* dxq, float* dxkv);

  // Self-attention on the fused packed qkv, nothing saved. x, out: [B, L, H]; qkv_buf: [B * L, 3H] and
  // ctx_buf: [B * L, H] scratch. Thread-safe. With qkv packed in bf16 the attention products run in bf16 too
  // (ops::AttentionDims::bf16). xq: null, or x already in the qkv product's input type (ops::PreparedInput,
  // used when it holds [B * L, H] of qkv's input_type(); the same result).
  void forward_inference(float* out, const float* x, int64_t B, int64_t L, const ops::AttentionMask& mask,
                         float* qkv_buf, float* ctx_buf, const ops::PreparedInput* xq = nullptr) const;
  // The same for the first position of each row only (a sequence classifier's last layer): the keys and values of
  // every position of x [B, L, H], the query, attention and output product of position 0. out: [B, H], row b
  // equal to forward_inference's out[b, 0]; qkv_buf: [B * L, 3H], ctx_buf: [B, H] scratch. mask as for
  // forward_inference with Lq = 1 (a score bias table [heads, L, L] needs bias_len L). Thread-safe.
  void forward_inference_first_token(float* out, const float* x, int64_t B, int64_t L, const ops::AttentionMask& mask,
                                     float* qkv_buf, float* ctx_buf, const ops::PreparedInput* xq = nullptr) const;
  // The same on an unpadded batch x [T, H] (T = seqs.tokens()): row b of out [B, H] is sentence b's first token
  // (its first row, offsets[b]), attending to the sentence's own keys; an empty sentence's row is unspecified.
  // qkv_buf [T, 3H], ctx_buf [B, H]. mask: empty, or a score bias with bias_len set (read at query position 0).
  void forward_inference_first_token(float* out, const float* x, const Varlen& seqs, const ops::AttentionMask& mask,
                                     float* qkv_buf, float* ctx_buf, const ops::PreparedInput* xq = nullptr) const;
  // The same on an unpadded batch: x, out [T, H] (T = seqs.tokens()); qkv_buf [T, 3H], ctx_buf [T, H]. Each
  // sentence's rows equal forward_inference's rows for it in a padded batch with a key_mask of its length.
  // mask: empty, causal, or a score bias shared by the sentences (AttentionMask::bias_len; MPNet's relative
  // position bias), as ops::attention_forward takes for an unpadded batch.
  void forward_inference(float* out, const float* x, const Varlen& seqs, float* qkv_buf, float* ctx_buf,
                         const ops::AttentionMask& mask = {}, const ops::PreparedInput* xq = nullptr) const;

  // One decoder step of self-attention. x: [R, H] this step's inputs; their keys and values are written to
  // rows `new_k`, `new_v` ([R, H] inside the cache buffers kv.k, kv.v), then each row attends over kv.
  // q_buf, ctx_buf: [R, H], qkv_buf: [R, 3H] scratch; probs: [R, heads, kv.kv_len] or null. out: [R, H].
  void step_self(const Context& ctx, float* out, const float* x, int64_t R, float* new_k, float* new_v,
                 const ops::StepKeys& kv, float* probs, float* q_buf, float* qkv_buf, float* ctx_buf) const;
  // One decoder step of cross-attention over keys/values computed once by project_kv.
  void step_cross(const Context& ctx, float* out, const float* x, int64_t R, const ops::StepKeys& kv, float* probs,
                  float* q_buf, float* ctx_buf) const;
  // k, v: [N, H] = W_k x, W_v x for x [N, H] (the encoder outputs of cross-attention).
  void project_kv(const Context& ctx, float* k, float* v, const float* x, int64_t N) const;

  // Saved by forward. ctx: the attention output (given back to the scratch pool when a bf16 output product keeps
  // its own copy; ctx_src is where it lay); dctx, dQ, dK, dV: backward's scratch (nn::take_scratch).
  // Self-attention (fused_qkv) keeps q | k | v as the columns of one [B * L, 3H] matrix QKV, made by one product
  // with the three weights stacked ([3H, H], as the inference qkv), and its backward runs one product for the
  // input gradient and one for the three weight gradients (dQKV, Wqkv, bqkv, dWqkv: scratch): wider products than
  // three [H, H] ones, which oneDNN runs faster. Q, K, V then stay empty. With bf16 products the input is
  // converted once, not once per projection, and not kept: backward converts xq again for the weight gradients.
  const float *xq = nullptr, *xkv = nullptr;
  Buf Q, K, V, QKV, probs, ctx, dctx, dQ, dK, dV, dQKV, Wqkv, bqkv, dWqkv, dbias;
  // The attention weights' dropout (undefined: none): its mask [B, heads, Lq, Lk] is written into drop_mask
  // (scratch) by forward and again by backward, and given back after each; no mask is kept between them.
  ops::DropoutDraw drop;
  Buf drop_mask;
  const float* ctx_src = nullptr;
  int64_t B = 0, Lq = 0, Lk = 0;
  // The banded training forward's log-sum-exp [B, heads, L], its key mask, and whether it ran (windowed).
  Buf lse, band;
  const float* window_key_mask = nullptr;
  bool windowed = false;
  bool score_bias = false;  // the forward's mask had a score bias
  bool fused_qkv = false;   // the forward ran the stacked q | k | v product (QKV holds them)
};

}  // namespace tfm::nn
