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
#include "ops/rotary.h"

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
// (head_dim * partial_rotary_factor; 0: head_dim); scaling the rope_scaling (ops::RotaryScaling: GTE's NTK,
// dynamic NTK). The cos / sin tables of positions 0 .. n - 1 are computed once and shared by copies of a Rotary
// made by make() (every layer of one theta), grown when a longer input comes. Dynamic scaling past its trained
// length makes a table for the call's length (its largest position + 1), kept for the next call of that length.
struct RotaryTables {
  int64_t len = 0, half = 0;
  std::vector<float> cos, sin;  // [len, half]
};
struct Rotary {
  double theta = 0.0;  // 0: no rotary positions
  int64_t dim = 0;
  ops::RotaryScaling scaling;
  std::shared_ptr<struct RotaryCache> cache;
  // std::invalid_argument for theta <= 0, an odd or non-positive dim, or a scaling ops::rotary_inv_freq refuses.
  static Rotary make(double theta, int64_t dim, const ops::RotaryScaling& scaling = {});
  bool enabled() const { return theta > 0.0; }
  // Tables for a call whose positions are 0 .. len - 1, at least len rows (thread-safe).
  std::shared_ptr<const RotaryTables> tables(int64_t len) const;
};

struct DisentangledAttention;  // nn/disentangled_attention.h

// ALiBi (Press et al. 2022, "Train Short, Test Long"): no position embeddings; head h adds
//   bias[h, i, j] = -slope_h * |i - j|
// to its scores (the symmetric form of bidirectional encoders: JinaBERT-v2's rebuild_alibi_tensor, MPT's
// non-causal build_alibi_bias; under a causal mask it equals the causal form -slope_h * (i - j), which differs
// from MPT's slope_h * (j - (L - 1)) by a constant per row, the same softmax). The attention module calls it as
// its score-bias provider (ops::AttentionMask::bias, as MPNet's relative bias): one [heads, n, n] table of
// n >= L positions, shared by the layers and grown on demand; the unpadded path reads it at positions inside
// each sentence (bias_len). Computed as the references do: float32 slopes times float32 distances.
struct AlibiTable {
  int64_t len = 0, heads = 0;
  std::vector<float> bias;  // [heads, len, len]
};
struct Alibi {
  std::vector<float> slopes;  // [heads]; empty: no ALiBi
  std::shared_ptr<struct AlibiCache> cache;
  // The ALiBi paper's slopes (its code's get_slopes; JinaBERT-v2's _get_alibi_head_slopes): for n a power of
  // two, 2^(-8 (h + 1) / n); otherwise the 2^floor(log2 n) slopes of that power followed by every other slope of
  // twice that power, up to n. n > 0 (std::invalid_argument otherwise).
  static std::vector<float> paper_slopes(int64_t n);
  // MPT's gen_slopes(n, alibi_bias_max): m_h = (h + 1) * max / n' (n' the next power of two), slopes 1 / 2^m; for
  // n' != n the odd-indexed slopes then the even-indexed ones, the first n (float32 arithmetic, as torch). With
  // the default max 8 these are paper_slopes(n); another max scales the exponents.
  static std::vector<float> mpt_slopes(int64_t n, double alibi_bias_max = 8.0);
  static Alibi make(std::vector<float> slopes);
  bool enabled() const { return !slopes.empty(); }
  // A table of at least len positions (thread-safe).
  std::shared_ptr<const AlibiTable> table(int64_t len) const;
  // out [heads, Lq, Lk] written: -slope_h * |i - j|.
  void fill(float* out, int64_t Lq, int64_t Lk) const;
};

struct MultiHeadAttention {
  // query [q_width(), H], key and value [kv_width(), H], output [H, q_width()] (training and unfused inference)
  Linear query, key, value, output;
  Linear qkv;  // optional fused self-attention projection [qkv_width(), H]: q | k | v columns
  int64_t num_heads = 1, hidden_size = 0;
  // Grouped-query attention: key / value heads (Qwen3, Llama num_key_value_heads; 0: num_heads), each shared by
  // num_heads / kv_heads() query heads (Hugging Face's repeat_kv). head_size: the head width when it is not
  // hidden_size / num_heads (Qwen3's head_dim; 0: that quotient).
  int64_t num_kv_heads = 0, head_size = 0;
  int64_t head_dim() const { return head_size ? head_size : hidden_size / num_heads; }
  int64_t kv_heads() const { return num_kv_heads ? num_kv_heads : num_heads; }
  int64_t q_width() const { return num_heads * head_dim(); }
  int64_t kv_width() const { return kv_heads() * head_dim(); }
  int64_t qkv_width() const { return q_width() + 2 * kv_width(); }
  // Options (off by default; the plain module pays nothing for them):
  //  - rotary: q and k rotated at their positions (padded: column l of the row; unpadded: Varlen::start + the
  //    token's index in its sentence);
  //  - window >= 0: sliding-window attention (ops/local_attention.h), each query sees the keys within `window`
  //    positions (ModernBERT's local layers: local_attention // 2). Training keeps O(L * window) memory (the
  //    banded kernel's log-sum-exp, no [L, L] weights), except with dropout on the attention weights, which runs
  //    the dense kernel under a band mask. The mask may then hold only a key_mask; no causal, ALiBi or groups.
  //  - a trainable fused projection: qkv with parameters ([qkv_width(), H], "Wqkv") instead of query / key / value.
  //  - causal: query i sees keys j <= i (a decoder used as an encoder: Qwen3-Embedding), with every path's mask
  //    (left padding of a padded batch through its key_mask; per sentence on the unpadded path).
  //  - alibi: ALiBi score bias (the caller's mask then holds no bias of its own: std::invalid_argument).
  //  - q_norm / k_norm (defined: loaded): a norm over head_dim applied to each head of q and of k after the
  //    projections and before rotary (Qwen3Attention's RMSNorm q_norm / k_norm).
  //  - disentangled: DeBERTa's c2p / p2c score bias from q, k and the relative-position embeddings
  //    (nn/disentangled_attention.h), scores scaled by its scale(); inference only (forward_inference, padded with a
  //    key_mask or unpadded): the saving forward and the first-token paths throw std::logic_error.
  Rotary rotary;
  int64_t window = -1;
  bool causal = false;
  Alibi alibi;
  LayerNorm q_norm, k_norm;
  bool qk_norm() const { return q_norm.weight.defined(); }
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

  // Self-attention on the fused packed qkv, nothing saved. x, out: [B, L, H]; qkv_buf: [B * L, qkv_width()] and
  // ctx_buf: [B * L, q_width()] scratch (3H and H without groups or a head_size). Thread-safe. With qkv packed in bf16 the attention products run in bf16 too
  // (ops::AttentionDims::bf16). xq: null, or x already in the qkv product's input type (ops::PreparedInput,
  // used when it holds [B * L, H] of qkv's input_type(); the same result).
  void forward_inference(float* out, const float* x, int64_t B, int64_t L, const ops::AttentionMask& mask,
                         float* qkv_buf, float* ctx_buf, const ops::PreparedInput* xq = nullptr) const;
  // The same for the first position of each row only (a sequence classifier's last layer): the keys and values of
  // every position of x [B, L, H], the query, attention and output product of position 0. out: [B, H], row b
  // equal to forward_inference's out[b, 0]; qkv_buf: [B * L, qkv_width()], ctx_buf: [B, q_width()] scratch. mask as for
  // forward_inference with Lq = 1 (a score bias table [heads, L, L] needs bias_len L). Thread-safe.
  void forward_inference_first_token(float* out, const float* x, int64_t B, int64_t L, const ops::AttentionMask& mask,
                                     float* qkv_buf, float* ctx_buf, const ops::PreparedInput* xq = nullptr) const;
  // The same on an unpadded batch x [T, H] (T = seqs.tokens()): row b of out [B, H] is sentence b's first token
  // (its first row, offsets[b]), attending to the sentence's own keys; an empty sentence's row is unspecified.
  // qkv_buf [T, qkv_width()], ctx_buf [B, q_width()]. mask: empty, or a score bias with bias_len set (read at
  // query position 0).
  void forward_inference_first_token(float* out, const float* x, const Varlen& seqs, const ops::AttentionMask& mask,
                                     float* qkv_buf, float* ctx_buf, const ops::PreparedInput* xq = nullptr) const;
  // The same on an unpadded batch: x, out [T, H] (T = seqs.tokens()); qkv_buf [T, qkv_width()], ctx_buf
  // [T, q_width()]. Each
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
  // Options' saved state: the ALiBi table of the forward [heads, Lq, Lk]; q and k before their norms ([N, heads,
  // head_dim] gathered from the projections' layout); the repeated keys and values of grouped-query attention
  // [B * Lk, q_width()] (KE, VE) and their gradients (scratch); where q, k, v lay and their row strides.
  Buf alibi_bias, q_pre, k_pre, KE, VE, dKE, dVE, norm_tmp, norm_dtmp;
  float *q_at = nullptr, *k_at = nullptr, *v_at = nullptr;
  int64_t q_ld = 0, k_ld = 0;
  bool fused_qkv = false;   // the forward ran the stacked q | k | v product (QKV holds them)
};

}  // namespace tfm::nn
