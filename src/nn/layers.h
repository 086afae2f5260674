// The basic modules: Linear, LayerNorm, the position-wise feed-forward network. Each is a struct of parameters
// (nn/params.h) with its forward and backward side by side (llm.c style).
//
// Accumulation rule (all of nn/): parameter gradients add (+=); activation gradients are written (=) unless a
// function says it adds.
//
// Two kinds of forward:
//  - forward(ctx, ...) keeps what backward needs in the module (training; also inference that wants attention
//    maps). Not thread-safe: one call at a time per module.
//  - forward_inference(...) const saves nothing and writes only the caller's buffers; thread-safe.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "nn/params.h"
#include "ops/activation.h"
#include "ops/dropout.h"
#include "ops/gemm.h"

namespace tfm::nn {

using Buf = std::vector<float>;

// Scratch shared by the training passes of every module on this thread: a buffer needed only during one
// backward (activation gradients) or only inside one forward is taken from a per-thread pool and given back when
// the pass is done, so a deep model's transients take one layer's worth of memory instead of one per layer,
// and the next layer reuses the same pages (no allocation in the steady state).
// take_scratch: b sized n, its contents unspecified (reused storage of at least n floats from the pool when
// there is some, else b's own or a new allocation). give_scratch: b's storage back to the pool; b is left empty.
float* take_scratch(Buf& b, int64_t n);
void give_scratch(Buf& b);
// A dropout's mask written into scratch (take_scratch(scratch, d.n); give it back after use), or null when d is
// undefined (no dropout): what training keeps is the draw, not the mask (ops::dropout_draw / dropout_fill).
const float* dropout_mask_scratch(Buf& scratch, const ops::DropoutDraw& d);

// How a saving forward runs.
struct Context {
  Rng* rng = nullptr;     // dropout masks are drawn from it; null: no dropout (evaluation)
  float dropout = 0.0f;   // p of every dropout of the model but the attention probabilities'
  float attention_dropout = -1.0f;  // p on the attention probabilities (BERT attention_probs_dropout_prob); < 0: dropout
  bool grad = false;      // a forward for backward (training): parameter products in each Linear's `precision`
  bool packed = false;    // Linear products on the packed inference weights where a Linear has them (Linear::pack)
  bool dropping() const { return rng && dropout > 0.0f; }
  float attention_p() const { return attention_dropout >= 0.0f ? attention_dropout : dropout; }
  bool attention_dropping() const { return rng && attention_p() > 0.0f; }
};

// torch.nn.Linear: y = x W^T + b. weight [out_features, in_features], bias [out_features] or none.
// The compute type lives here: training products run in `precision` (fp32, or bf16 inputs and weights with fp32
// accumulation, ops/gemm_bf16.h) on the fp32 parameters; inference products run on `packed` (weights reordered
// once for oneDNN in fp32, bf16 or int8, ops/gemm.h PackedLinear) when pack() made it.
struct Linear {
  Param weight, bias;
  int64_t in_features = 0, out_features = 0;
  ops::ComputeType precision = ops::ComputeType::F32;  // of the parameter products (F32 or BF16)
  ops::PackedLinear packed;                            // inference weights; undefined until pack()
  // bf16 training: the forward's input as converted to bf16, reused by backward (converted once a step), unless
  // the forward was told not to keep it. Written by a training forward (ctx.grad, precision BF16), which is
  // therefore not thread-safe. The weight's bf16 copy is not kept here: one buffer per thread serves every Linear
  // (written by the forward, and again by the backward unless no other product came between), so that a step
  // does not hold a bf16 copy of every weight (170 MB at BERT-base).
  struct Bf16Operands {
    std::vector<uint16_t> inp;  // [N, in_features]
    const float* inp_src = nullptr;
    int64_t N = -1;
  };
  mutable Bf16Operands bf16_saved;

  // "<vb>.weight" [out, in] and, when has_bias, "<vb>.bias" [out].
  static Linear load(const Vars& vb, int64_t in, int64_t out, bool has_bias = true);
  // An inference-only Linear: the Linears under `parts` (same in_features, `out` rows each) stacked along
  // out_features and packed in `ct`; their file pages are released. fp32 weights for ct F32 are checked for
  // NaN / Inf in place and packed only at their second use (ops::PackedLinear::lazy: the first forward multiplies
  // by the file's pages, and a model that runs once never copies them). Parts stored prequantised by
  // `tfm convert --dtype int8` (I8 + "<name>_scale") are used as stored for ct int8, and dequantised
  // (w = q * scale of the row) and packed in `ct` otherwise.
  // has_bias false: the parts have no "<name>.bias" (bias-free projections: ModernBERT, Llama-style layers).
  static Linear load_packed(const std::vector<Vars>& parts, int64_t in, int64_t out, ops::ComputeType ct,
                            bool has_bias = true);
  // An inference-only Linear packed from weight [out, in] and bias [out] (or null), both copied.
  static Linear from_weights(const float* weight, const float* bias, int64_t in, int64_t out, ops::ComputeType ct);
  // Packs the parameters for inference in `ct` (they stay, for training). Throws std::runtime_error when this CPU
  // has no oneDNN kernel for `ct`.
  void pack(ops::ComputeType ct);

  // out: [N, out_features] = act(inp [N, in_features] W^T + b), written. Packed weights when ctx.packed (and
  // defined), the activation then fused into the product; otherwise the parameters, in `precision` when
  // ctx.grad and in fp32 otherwise. keep_bf16_input false (bf16 training): the input's bf16 copy is not kept for
  // backward, which converts the input it is given again (a caller that recomputes the input saves its memory).
  void forward(const Context& ctx, float* out, const float* inp, int64_t N, ops::Epilogue act = ops::Epilogue::None,
               bool keep_bf16_input = true) const;
  // Inference: the packed product when pack() made one, else the fp32 parameters (nothing saved; thread-safe).
  void forward_inference(float* out, const float* inp, int64_t N, ops::Epilogue act = ops::Epilogue::None) const {
    Context ctx;
    ctx.packed = true;
    forward(ctx, out, inp, N, act);
  }
  // The same, reading `prepared` instead of inp when it holds inp [N, in_features] in input_type() (the same
  // result, without the product's own conversion pass); otherwise inp. prepared may be null.
  void forward_inference(float* out, const float* inp, int64_t N, ops::Epilogue act,
                         const ops::PreparedInput* prepared) const;
  // The type in which this Linear's inference product wants its input prepared (ops::PackedLinear::input_type()):
  // F32 (nothing to prepare) when unpacked.
  ops::ComputeType input_type() const { return packed.input_type(); }
  // dinp [N, in] = dout W (added when accumulate, written otherwise; skipped when null);
  // dweight += dout^T inp; dbias += column sums of dout. inp: the forward's input [N, in].
  void backward(float* dinp, const float* dout, const float* inp, int64_t N, bool accumulate = true) const;
  // dinp [N, in] = dout W (written) alone, no parameter gradient: with backward(nullptr, ...) for those, the
  // input gradient may then overwrite the forward input's buffer. fp32 precision only (std::logic_error otherwise).
  void backward_input(float* dinp, const float* dout, int64_t N) const;
  // Whether backward on (inp, N) would use the bf16 copy the last training forward saved (precision BF16 and
  // that forward's operand): inp is then not read, and may be scratch that no longer holds it.
  bool saved_input(const float* inp, int64_t N) const {
    return precision == ops::ComputeType::BF16 && inp && bf16_saved.inp_src == inp && bf16_saved.N == N;
  }
};

// torch.nn.LayerNorm over the last dimension: weight, bias [C].
struct LayerNorm {
  Param weight, bias;
  int64_t C = 0;
  float eps = 1e-5f;
  // Saved by forward for backward.
  const float* x = nullptr;
  Buf mean, rstd;
  int64_t N = 0;

  // "<vb>.weight" [C] and, when has_bias, "<vb>.bias" [C]; without it (nn.LayerNorm(bias=False), ModernBERT's
  // norm_bias false) the shift is a constant zero that gets no gradient.
  static LayerNorm load(const Vars& vb, int64_t C, float eps, bool has_bias = true);
  // The identity over C columns (nn.Identity in a norm's place: ModernBERT's layer 0 attn_norm): every forward
  // copies (or adds y + residual), backward passes the gradient through; no parameters.
  static LayerNorm identity(int64_t C);
  bool is_identity() const { return !weight.defined(); }
  // RMSNorm (Zhang & Sennrich 2019; LlamaRMSNorm, T5LayerNorm): y = x / sqrt(mean(x^2) + eps) * (offset + w),
  // no mean, no bias; offset 1 is Gemma's (1 + w) variant. "<vb>.weight" [C].
  static LayerNorm load_rms(const Vars& vb, int64_t C, float eps, float offset = 0.0f);
  bool rms = false;
  float rms_offset = 0.0f;
  // out, inp: [N, C]; in place allowed.
  void forward_inference(float* out, const float* inp, int64_t N) const;
  // out = LayerNorm(y + residual) in one pass; sum_out, when non-null, receives y + residual (the pre-LN
  // residual stream). out and sum_out may each alias y or residual.
  void add_forward_inference(float* out, float* sum_out, const float* y, const float* residual, int64_t N) const;
  // forward_inference (residual null) or add_forward_inference that also writes out's rows as the input of a
  // product taking ct (Linear::input_type()) into `prepared` (ops::layer_norm_forward_to; ct F32: plain call).
  void forward_inference_to(float* out, float* sum_out, const float* y, const float* residual, int64_t N,
                            ops::ComputeType ct, ops::PreparedInput& prepared) const;
  // Saving forward: inp [N, C] must stay alive until backward.
  void forward(float* out, const float* inp, int64_t N);
  // dinp [N, C] written (added when accumulate, through `scratch`); dweight, dbias accumulated.
  void backward(float* dinp, const float* dout, bool accumulate = false);
  Buf scratch;
};

// Position-wise feed-forward network: linear2(act(linear1(x))), dropout off (the reference modules' placement).
// gated (GLU variants, Shazeer 2020: GeGLU with act GELU, SwiGLU with SiLU; ModernBertMLP, Llama's MLP with its
// gate and up projections stacked): linear1 is [2I, H] and (a, g) = linear1(x) split in halves,
//   out = linear2(dropout(act(a) * g))                      (ops::glu_forward)
// with gate_dropout p on the gated product (ModernBERT's mlp_dropout; drawn when the Context has an rng).
struct FeedForward {
  Linear linear1, linear2;  // [I, H] and [H, I] (gated: [2I, H] and [H, I])
  ops::Activation act = ops::Activation::Relu;
  bool gated = false;
  float gate_dropout = 0.0f;
  // The floats of forward_inference's `hidden` per row: I, or 3I gated (linear1's 2I and the gated I).
  int64_t inference_hidden() const { return gated ? linear1.out_features * 3 / 2 : linear1.out_features; }
  // Saved for backward: x, and h = linear1(x) (ReLU: a = relu(h) in place instead). a (GELU / SiLU) and da are
  // scratch (take_scratch): backward computes act(h) again, with act'(h) in the same pass, for linear2's weight
  // gradient (in bf16 training too: linear2 keeps no bf16 copy of it, [N, I] per layer). With fp32 products
  // h is x W1^T without linear1's bias, h_bias: the bias is added where act(h + b) is computed (forward, and
  // backward's recomputation), one pass over [N, I] less each way than seeding h with it.
  const float* x = nullptr;
  Buf h, a, da;
  const float* h_bias = nullptr;
  int64_t N = 0;
  // Gated: h is linear1's output [N, 2I], g the gated product (after its dropout) [N, I], gdrop its dropout.
  Buf g, gmask;
  ops::DropoutDraw gdrop;

  // out: [N, H], x: [N, H] (alive until backward).
  void forward(const Context& ctx, float* out, const float* x, int64_t N);
  // dx [N, H] added to (+=). dout may alias dx: it is read entirely before dx is written. Consumes the saved
  // state: h may be overwritten (with act'(h), fp32), so a second backward needs a new forward.
  void backward(const float* dout, float* dx);
  // Inference on packed weights, the bias and activation fused into the first product; hidden: [N,
  // inference_hidden()] scratch.
  // xq: null, or x already in linear1's input type (used when it holds x). hq: null, or where the first product
  // writes its output in linear2's input type when linear2 takes one (ops::PackedLinear::forward_to: the
  // activation's output quantised or rounded in the same pass, no fp32 round trip); hidden is then scratch whose
  // contents are unspecified. The same result either way.
  void forward_inference(float* out, const float* x, float* hidden, int64_t N, const ops::PreparedInput* xq = nullptr,
                         ops::PreparedInput* hq = nullptr) const;
};

// An encoder's input embeddings (BertEmbeddings, ModernBertEmbeddings, ElectraEmbeddings):
//   out = project(dropout(norm(word[ids] + position[positions] + type[types])))
// position, type and project optional (undefined: absent); norm may be an identity. The sum is added in that
// order (word + position, then + type).
struct Embeddings {
  Param word, position, type;
  LayerNorm norm;
  Linear project;                 // ELECTRA's embeddings_project [H, E]; undefined: none
  int64_t vocab_size = 0, max_positions = 0, type_vocab_size = 0, dim = 0;
  bool train_position = true;     // false: the position table gets no gradient (DistilBERT's sinusoidal table)
  float dropout = -1.0f;          // p after the norm; < 0: the Context's dropout
  // Saved by forward.
  std::vector<int64_t> ids, positions, types;
  Buf sum, normed, out, drop, tmp;
  int64_t N = 0;

  // Saving forward on N tokens: ids [N] in [0, vocab_size) (std::out_of_range otherwise); positions [N] (null
  // with a position table: n % L for rows of L) and types [N] (null: 0), read when the tables exist. out holds
  // [N, dim] (or the projection's width) afterwards.
  void forward(const Context& ctx, const int64_t* ids, const int64_t* positions, const int64_t* types, int64_t N,
               int64_t L);
  // dout [N, out width], overwritten; the tables' gradients added to.
  void backward(float* dout);

  // Inference on N tokens (rows of L): out [N, out width] = project(norm(word[ids] + position[positions] +
  // type[types])), no dropout; the sum in forward's order, or word + type + position with type_first
  // (NomicBertEmbeddings' order). positions: [N] or null (n % L); types: [N] or null (0); both read only when the
  // table exists, all in range (the caller checked them). The tables may be loaded unchecked
  // (Vars::get_unchecked: reading a 30,000-row table only to check it took a tenth of a one-sentence encode), so
  // the rows gathered are checked instead: PyTorch propagates a bad row into the outputs of exactly the tokens that
  // use it, and this throws std::runtime_error "embedding table 'NAME': row R contains NaN or Inf at column C
  // (token n of the batch)" for the first such token (NAME: word_name, position_name, type_name); nothing when
  // only the sum overflowed. Thread-safe.
  void forward_inference(float* out, const int64_t* ids, const int64_t* positions, const int64_t* types, int64_t N,
                         int64_t L) const;
  bool type_first = false;
  const char* word_name = "embeddings.word_embeddings.weight";
  const char* position_name = "embeddings.position_embeddings.weight";
  const char* type_name = "embeddings.token_type_embeddings.weight";
};

// torch.nn.Embedding, scaled and with a position table added (d2l's TransformerEncoder: embedding(x) *
// sqrt(num_hiddens) + P), then dropout. weight: [vocab_size, dim].
struct Embedding {
  Param weight;
  int64_t vocab_size = 0, dim = 0;
  float scale = 1.0f;
  // Saved by forward.
  std::vector<int64_t> ids;
  Buf drop;
  int64_t N = 0;

  static Embedding load(const Vars& vb, int64_t vocab_size, int64_t dim, float scale = 1.0f);
  // out [B, L, dim] = weight[ids] * scale + positions[l] (positions: [>= L, dim]), then dropout (ctx).
  // ids: [B, L] in [0, vocab_size) (ops::embedding_forward throws otherwise).
  void forward(const Context& ctx, float* out, const int64_t* ids, int64_t B, int64_t L, const float* positions);
  // dout [B, L, dim] is overwritten (scaled in place); dweight += the scatter.
  void backward(float* dout);
  // One row per id, every row at the same position: out [N, dim] = weight[ids] * scale + position [dim].
  void forward_inference(float* out, const int64_t* ids, int64_t N, const float* position) const;
};

}  // namespace tfm::nn
