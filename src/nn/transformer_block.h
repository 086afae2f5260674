// The Transformer layer, once for every model: encoder block (self-attention, feed-forward) and decoder block
// (masked self-attention, cross-attention, feed-forward), each with its two norm placements:
//   post-LN (norm_first = false; BERT, d2l): x = LN(x + dropout(f(x)))        (Vaswani et al.)
//   pre-LN  (norm_first = true; docs/000, Multi30k recipe): x = x + dropout(f(LN(x)))   (Xiong et al. 2020)
// f is the attention or the feed-forward; dropout p is the Context's (off at inference).
//
// forward(ctx, ...) / backward(...) sit side by side and serve training (and inference that wants attention
// weights); forward_inference / step are the inference paths (nothing saved, fused kernels). Modules and their
// names come from the composition file (models/), which loads each from its checkpoint prefix.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/attention.h"
#include "nn/layers.h"
#include "ops/dropout.h"

namespace tfm::nn {

// The saved state of one residual sublayer (what its backward needs besides the LayerNorm's own).
struct Residual {
  Buf sum;                // post-LN: x + dropout(f), the LayerNorm input
  Buf h;                  // pre-LN: LN(x), f's input
  ops::DropoutDraw drop;  // dropout of f's output (undefined: none); its mask is written when needed, into
  Buf mask;               // this scratch (nn::take_scratch), and given back: a layer keeps no mask between passes
  Buf dh;
  const float* x = nullptr;
  int64_t n = 0;
};

// Scratch of the inference paths, reused across layers and calls.
struct BlockScratch {
  Buf h, qkv, ctx, a, inter;
  Buf tokens;  // the unpadded stack's real tokens [T, H], gathered from the padded batch
  // GEMM inputs already in their product's input type (ops::PreparedInput), written by the LayerNorm or the
  // product that made them, so that no product converts an fp32 input of its own: xq the QKV product's input
  // (X post-LN, h pre-LN; written by the previous layer's last LayerNorm, or the stack's first one), aq the FFN
  // input, hq the FFN hidden activations. Each is used where it holds the right shape and type.
  ops::PreparedInput xq, aq, hq;
  // What the block's last LayerNorm prepares for the next layer's QKV product (its qkv input_type(); F32: none,
  // as for the last layer). Set by the caller before each layer.
  ops::ComputeType next_input = ops::ComputeType::F32;
};

struct EncoderBlock {
  MultiHeadAttention attention;
  LayerNorm norm1, norm2;  // post-LN: after attention and after the FFN; pre-LN: before them
  FeedForward ffn;
  bool norm_first = false;
  // false: no dropout on the attention sublayer's output before its residual (DistilBERT's TransformerBlock:
  // sa_layer_norm(out_lin(context) + x)); the attention probabilities and the feed-forward output keep theirs.
  bool attention_output_dropout = true;
  // false: no dropout on the feed-forward sublayer's output before its residual (ModernBERT drops inside its MLP
  // instead: FeedForward::gate_dropout).
  bool ffn_output_dropout = true;
  // The options a family composes (off by default): attention.rotary / attention.window (nn/attention.h),
  // ffn.gated (nn/layers.h), an identity norm1 (LayerNorm::identity: ModernBERT's first layer) pre-LN.

  // Saving forward: x [B, L, H] (alive until backward); the result is `out` [B, L, H].
  // first_token_only: the caller reads position 0 of each row only (sequence classification's h[:, 0], as the
  // last layer of *ForSequenceClassification): the keys and values still come from all L positions, but the
  // queries, attention output, LayerNorms and feed-forward run on the B first tokens, and `out` is [B, 1, H],
  // equal to out[:, 0] of the full forward (the rows do not interact outside attention). A score bias in `mask`
  // is then [heads, 1, L] (row 0 of the full table; backward's attention.dbias has that shape). Post-LN only
  // (std::logic_error for norm_first).
  void forward(const Context& ctx, const float* x, int64_t B, int64_t L, const ops::AttentionMask& mask,
               bool first_token_only = false);
  Buf out;
  // dx [B, L, H] += d out / d x (dout: out's shape, [B, 1, H] after a first_token_only forward).
  void backward(const float* dout, float* dx);
  // A stack that keeps only what backward needs (BertTrainable): post-LN, `out` is LN2 of the saved residual
  // sum, so once the next layer's forward has read it, release_output() gives its storage back to the scratch pool
  // (nn::take_scratch) and restore_output() recomputes it, bit for bit, returning out.data() [B, L, H]
  // (release_output does nothing pre-LN, whose output is the next layer's LayerNorm input and stays).
  // set_input(x) points this layer's saved input at x (the previous layer's restored output) before backward.
  void release_output();
  const float* restore_output();
  void set_input(const float* x);

  // The last layer of an inference stack whose caller reads position 0 of each row only (post-LN; sequence
  // classification's h[:, 0] or pooler): keys and values from every position of X [B, L, H] (unchanged), the
  // query, attention output, LayerNorms and feed-forward of position 0 only. first: [B, H], row b equal to
  // forward_inference's X[b, 0]. s.xq: as for forward_inference. Throws std::logic_error for a pre-LN block.
  void forward_inference_first_token(float* first, const float* X, int64_t B, int64_t L,
                                     const ops::AttentionMask& mask, BlockScratch& s) const;
  // The same on an unpadded batch X [T, H]: row b of first is sentence b's first token (offsets[b]); an empty
  // sentence's row is unspecified. mask: as MultiHeadAttention's unpadded forward_inference_first_token.
  void forward_inference_first_token(float* first, const float* X, const Varlen& seqs, const ops::AttentionMask& mask,
                                     BlockScratch& s) const;

  // Inference in place on X [B, L, H] (fused QKV, fused residual + LayerNorm, activation fused into the first
  // FFN product). Pre-LN chains the LayerNorms across layers: on entry s.h holds norm1(X); on exit it holds
  // next_norm(X) when next_norm is given (the next layer's norm1), else X has had only the residual added.
  // Thread-safe (writes only X and s).
  void forward_inference(float* X, int64_t B, int64_t L, const ops::AttentionMask& mask, BlockScratch& s,
                         const LayerNorm* next_norm = nullptr) const;
  // The same on an unpadded batch X [T, H] (nn/attention.h Varlen; T = seqs.tokens()): the GEMMs, LayerNorms
  // and activations run on the T real tokens, attention per sentence. Sentence b's rows equal the padded call's
  // rows for it (key_mask marking its tokens). Pre-LN: s.h [T, H] as above.
  // mask: as MultiHeadAttention's unpadded forward_inference takes it (a shared score bias, or causal).
  void forward_inference(float* X, const Varlen& seqs, BlockScratch& s, const LayerNorm* next_norm = nullptr,
                         const ops::AttentionMask& mask = {}) const;

  // Saved state (r1, r2, the sublayers'; pre-LN also Y); attn_out, ffn_out, dY, d_attn, d_ffn and the residuals'
  // dh are scratch of one pass (nn::take_scratch), and so is post-LN's Y = LN1(r1.sum), recomputed by backward.
  Residual r1, r2;
  Buf attn_out, Y, ffn_out, dY, d_attn, d_ffn;
  // first_token_only: x[:, 0] gathered [B, H] (the queries' input and the residual), its gradient (scratch), and
  // L of the forward (0: a full forward).
  Buf x_first, dx_first;
  Buf bias_first;  // encoder_stack_forward's [heads, 1, L] row 0 of a shared score bias, for a first-token layer
  int64_t first_token_L = 0;
  int64_t N = 0, H = 0;  // N: the rows the sublayers ran on (B * L, or B)
};

// Inference through an encoder's layers (post-LN or pre-LN, chained as forward_inference describes) on its
// embeddings X [B, L, H], in place. key_mask: [B, L] (1 = real token, 0 = padding) or null (no padding).
// unpadded = false: the padded batch with key_mask as the attention key mask (the Hugging Face result at every
// position, padding included). unpadded = true and some padding: the real tokens are gathered (in row order,
// sentence after sentence, any mask pattern) and every layer runs on them only (Varlen); the rows of X at
// padded positions are then written 0, the real rows equal the padded call's. hidden_states: [NL + 1, B, L, H]
// or null: slot l + 1 receives layer l's output in the same layout (slot 0, the embeddings, is the caller's).
// score_bias: null, or [heads, L, L] added to every layer's attention scores for every batch row (MPNet's relative
// position bias, ops::AttentionMask::bias); it must depend on j - i only. Unpadded, each sentence reads it at its
// own positions (bias_len L), which equals the padded result when each row's real tokens are one run; a row with
// a hole in its mask makes the stack run padded (and still zero the padded rows). Thread-safe.
// first_token: null, or [B, H] that receives the last layer's output at position 0 of each row (X[:, 0] of the
// call without it, padded or unpadded as asked: unpadded, a row whose position 0 is padding gets 0). With post-LN
// layers and no hidden_states, the last layer then runs position 0 only (EncoderBlock::
// forward_inference_first_token) and X is left unspecified; otherwise the stack runs whole and first_token is
// copied from X.
void encoder_stack_inference(const std::vector<EncoderBlock>& layers, float* X, int64_t B, int64_t L,
                             const float* key_mask, bool unpadded, float* hidden_states = nullptr,
                             const float* score_bias = nullptr, float* first_token = nullptr);

// The training forward of an encoder's layers on x [B, L, H] (alive until backward), each layer's saving forward
// after the other (post-LN layers give back their outputs once read: EncoderBlock::release_output). Returns the
// last layer's output [B, L, H] (x when there are no layers), or [B, 1, H] with first_token_only (the last layer
// runs position 0's queries only: EncoderBlock::forward; a score bias in `mask`, [heads, L, L] shared by the
// batch and the layers, is read at row 0 there).
const float* encoder_stack_forward(std::vector<EncoderBlock>& layers, const Context& ctx, const float* x, int64_t B,
                                   int64_t L, const ops::AttentionMask& mask, bool first_token_only = false);
// Its backward: dout, the gradient of the last output (its shape); dx [n = B * L * H] written with the gradient of
// x. Parameter gradients are added to. dscore_bias: null, or [heads, L, L] to which the gradient of the forward's
// shared score bias is added (the sum over the layers, which all read it: MPNet's relative position bias).
void encoder_stack_backward(std::vector<EncoderBlock>& layers, const float* dout, float* dx, int64_t n,
                            float* dscore_bias = nullptr);

// Whether every row of key_mask [B, L] (1 = real token) holds its real tokens as one contiguous run (right or
// left padding, no holes): then positions relative inside a row are the same padded and unpadded.
bool real_tokens_contiguous(const float* key_mask, int64_t B, int64_t L);

// One decoder layer's cached keys and values for incremental decoding (decode/decoder_cache.h holds one per layer
// and the row indices).
struct LayerKV {
  Buf self_k, self_v;    // [rows used, H]: one row per (step, hypothesis), appended step after step
  Buf cross_k, cross_v;  // [sentences, Ls, H]: the encoder outputs' keys and values
};

// What one decoder step of a layer reads and writes besides its LayerKV.
struct StepArgs {
  int64_t rows = 0;                 // R: batch rows (hypotheses) this step
  int64_t base = 0;                 // buffer row of this step's first new key/value (rows base .. base + R - 1)
  ops::StepKeys self, cross;        // index arrays and lengths; the k/v pointers are the layer's, set by step()
  float* probs_self = nullptr;      // [R, heads, self.kv_len] or null
  float* probs_cross = nullptr;     // [R, heads, cross.kv_len] or null
  Buf* scratch = nullptr;           // kNumStepScratch buffers, reused
};
enum StepScratch { kStepH, kStepQ, kStepQKV, kStepCtx, kStepA, kStepFfn, kNumStepScratch };

struct DecoderBlock {
  MultiHeadAttention attention1, attention2;  // masked self-attention; attention over the encoder outputs
  LayerNorm norm1, norm2, norm3;
  FeedForward ffn;
  bool norm_first = false;

  // Saving forward: x [B, Lt, H], enc [B, Ls, H] (alive until backward); the result is `out`.
  void forward(const Context& ctx, const float* x, const float* enc, int64_t B, int64_t Lt, int64_t Ls,
               const ops::AttentionMask& self_mask, const ops::AttentionMask& enc_mask);
  Buf out;
  // dx [B, Lt, H] += d out / d x; denc [B, Ls, H] += d out / d enc.
  void backward(const float* dout, float* dx, float* denc);

  // Incremental decoding: kv.cross_k / cross_v = the cross-attention keys/values of enc [N, H].
  void start(const Context& ctx, LayerKV& kv, const float* enc, int64_t N) const;
  // One step in place on x [R, H]: appends this step's self-attention keys/values (kv.self_k/v grow to
  // base + R rows), attends over the cache, and applies the three sublayers as forward does at inference.
  void step(const Context& ctx, float* x, LayerKV& kv, StepArgs& a) const;

  Residual r1, r2, r3;
  Buf a1, Z1, a2, Z2, f, dZ1, dZ2, d_a1, d_a2, d_f;
  int64_t N = 0, H = 0;
};

}  // namespace tfm::nn
