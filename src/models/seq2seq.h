// transformer_seq2seq: the encoder-decoder Transformer of document 002 (d2l.ai), trainable.
//
// Encoder: X = dropout(embedding(src) * sqrt(num_hiddens) + P), P the sinusoidal encoding
//   P[pos, 2i] = sin(pos / 10000^(2i/d)), P[pos, 2i+1] = cos(...); blocks of
//   Y = AddNorm(X, MHA(X, X, X, src_valid_lens)); X = AddNorm(Y, FFN(Y)), AddNorm(X, Y) = LayerNorm(dropout(Y) + X).
// Decoder: same embedding and positions; blocks of masked self-attention (query i sees keys 0..i) -> AddNorm ->
//   attention over the encoder outputs with src_valid_lens -> AddNorm -> FFN -> AddNorm; then dense to the vocab.
// MHA is d2l's: W_q, W_k, W_v, W_o without bias, dropout on the attention weights.
// Parameter names are the PyTorch state_dict names of reference_modules.EncoderDecoder.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/gemm.h"
#include "nn/params.h"

namespace tfm {

struct Seq2SeqConfig {
  int64_t num_hiddens = 32;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t ffn_num_hiddens = 64;
  double dropout = 0.1;
  int64_t num_steps = 10;        // tokens per sequence in training and the decoding limit
  int64_t src_vocab_size = 0;
  int64_t tgt_vocab_size = 0;
  int64_t max_len = 1000;        // rows of the positional-encoding table (d2l's max_len)
  // "absolute" or "d2l_step" (see PositionMode). Absent in a config.json: "d2l_step", so a model exported from
  // the d2l reference translates as its predict_seq2seq does; `tfm train` writes "absolute".
  std::string decode_positions = "d2l_step";
  // Options beyond the d2l model; the defaults are d2l's behaviour.
  bool norm_first = false;         // pre-LN blocks x + dropout(f(LN(x))), plus a final LayerNorm ("encoder.ln",
                                   // "decoder.ln") after each stack
  bool shared_embeddings = false;  // one [vocab, H] matrix for source and target embeddings and the output
                                   // projection (joint vocabulary; stored once as "encoder.embedding.weight")
  bool attention_bias = false;     // biases in W_q, W_k, W_v, W_o
  std::string activation = "relu"; // FFN activation: "relu" or "gelu"

  // Validates: positive sizes, num_hiddens divisible by num_heads and even, dropout in [0, 1).
  static Seq2SeqConfig from_json(const nlohmann::json& j, const std::string& file);
  static Seq2SeqConfig load(const std::string& path);
  nlohmann::json to_json() const;
};

// One teacher-forced minibatch. All arrays row-major int64.
struct Seq2SeqBatch {
  const int64_t* src = nullptr;            // [B, Ls] source ids
  const int64_t* src_valid_len = nullptr;  // [B]
  const int64_t* dec_input = nullptr;      // [B, Lt] <bos> followed by labels[:, :-1]
  const int64_t* labels = nullptr;         // [B, Lt]
  const int64_t* tgt_valid_len = nullptr;  // [B]
  int64_t batch = 0, src_len = 0, tgt_len = 0;
  // d2l's loss divides each sequence's summed token loss by its padded length (num_steps). A batch trimmed to its
  // longest valid row keeps the same loss by passing the untrimmed length here; 0 means tgt_len.
  int64_t loss_len = 0;
};

struct LossResult {
  double loss_sum = 0;        // d2l MaskedSoftmaxCELoss summed over the batch: sum_b mean_t(mask * CE)
  double token_loss_sum = 0;  // sum of masked per-token CE
  int64_t num_tokens = 0;     // valid target tokens
};

// Decoder state for incremental decoding: per layer the projected self-attention keys/values of every step so
// far and the projected encoder keys/values (computed once per source sentence).
//
// Beam search reorders rows at every step; nothing is copied for that. Self-attention keys/values are appended,
// step after step, to one growing buffer per layer (`kv_rows_used` rows of H floats); row r of the batch reads
// its key/value of step s at buffer row kv_index[r * capacity + s]. Encoder keys/values stay one block per source
// sentence; row r reads block cross_row[r]. reorder_cache only permutes these small index arrays.
struct DecoderCache {
  int64_t batch = 0, src_len = 0, steps = 0, capacity = 0;
  std::vector<int64_t> src_valid_len;                 // [batch] (of cross_row's sentence)
  std::vector<std::vector<float>> self_k, self_v;     // per layer [kv_rows_used (growing), H]
  std::vector<std::vector<float>> cross_k, cross_v;   // per layer [sentences, Ls, H]
  std::vector<int64_t> kv_index;                      // [batch, capacity] buffer row of each step's key/value
  std::vector<int64_t> cross_row;                     // [batch] encoder block of each row
  int64_t kv_rows_used = 0;
  std::vector<std::vector<float>> scratch;            // decode_step work buffers (reused, not reallocated)
};

// How incremental decoding numbers positions. kAbsolute: step t adds P[t] (what training sees).
// kD2lStep: every step adds P[0], as d2l's predict_seq2seq does (it feeds one token at a time and its
// PositionalEncoding adds P[:, :1]); needed to reproduce that reference's translations exactly.
enum class PositionMode { kAbsolute, kD2lStep };

class Seq2SeqModel {
 public:
  explicit Seq2SeqModel(const Seq2SeqConfig& config);
  ~Seq2SeqModel();
  const Seq2SeqConfig& config() const { return config_; }
  nn::ParamStore& params() { return params_; }

  // d2l's initialisation: Xavier-uniform Linear weights; Linear biases U(+-1/sqrt(fan_in)); embeddings N(0, 1);
  // LayerNorm weight 1, bias 0 (the last three are PyTorch's defaults).
  void init(Rng& rng);
  // Reads every parameter from a safetensors file; throws naming the file and tensor on a missing tensor, a
  // shape mismatch, or an unexpected extra tensor.
  void load(const std::string& safetensors_path);
  void save(const std::string& safetensors_path);

  // Packs every Linear weight for inference in `dtype` (ops/gemm.h PackedLinear: oneDNN matmul on weights
  // reordered once; bf16 / int8 dynamic quantisation) so encode, start_decoding and decode_step run on them.
  // Embeddings, LayerNorm, softmax and the output projection (decoder.dense) stay fp32, the latter unless
  // quantize_output_projection (then it runs in `dtype` too: a third of a beam step's products). Call after load();
  // forward_backward / forward_logits keep using the parameters, and changing them needs another call.
  // Throws std::runtime_error when this CPU has no oneDNN kernel for `dtype`.
  void prepare_inference(ops::ComputeType dtype, bool quantize_output_projection = false);
  // Precision of forward_backward's Linear products: F32 (default) or BF16 (inputs and weights rounded to bf16,
  // fp32 accumulation and outputs; parameters, gradients and optimizer state stay fp32). Throws
  // std::invalid_argument for I8 and std::runtime_error (one line) for BF16 on a CPU without bf16 instructions.
  void set_precision(ops::ComputeType precision);
  ops::ComputeType precision() const;
  // Teacher-forced forward, masked softmax cross-entropy, backward. Parameter gradients are accumulated (+=).
  // dropout_rng: null disables dropout (eval), otherwise masks are drawn from it. label_smoothing in [0, 1).
  // token_mean: loss = mean over valid target tokens (instead of d2l's per-sequence mean summed over the batch);
  // LossResult.loss_sum is then that mean. token_denominator > 0 divides by it instead of this batch's valid
  // tokens (data-parallel training: each rank's shard divides by the global batch's count, so the summed
  // gradients are the global batch's).
  LossResult forward_backward(const Seq2SeqBatch& batch, Rng* dropout_rng, float label_smoothing = 0.0f,
                              bool token_mean = false, int64_t token_denominator = 0);
  // Teacher-forced forward without dropout or gradients. Returns logits [B, Lt, tgt_vocab_size].
  Tensor forward_logits(const Seq2SeqBatch& batch);

  // Encoder outputs [B, Ls, num_hiddens] (no dropout). attention_weights, when non-null, receives each layer's
  // weights [num_layers][B, heads, Ls, Ls].
  Tensor encode(const int64_t* src, const int64_t* src_valid_len, int64_t B, int64_t Ls,
                std::vector<Tensor>* attention_weights = nullptr);
  // Prepares `cache` for up to max_steps decoder steps over enc_out [B, Ls, H].
  void start_decoding(DecoderCache& cache, const Tensor& enc_out, const int64_t* src_valid_len, int64_t max_steps);
  // One decoder step for tokens [B]: appends to the cache and writes logits [B, tgt_vocab_size].
  // cross_attention, when non-null, receives each layer's cross-attention weights [B, heads, 1, Ls].
  void decode_step(DecoderCache& cache, const int64_t* tokens, float* logits, PositionMode mode,
                   std::vector<std::vector<float>>* cross_attention = nullptr);
  // Keeps cache rows `rows` (new row r = old row rows[r]); for beam search.
  static void reorder_cache(DecoderCache& cache, const std::vector<int64_t>& rows, int64_t hidden);

 private:
  struct Impl;
  void forward_train(const Seq2SeqBatch& batch, Rng* rng);
  const float* encoder_forward(const int64_t* src, const int64_t* src_valid_len, int64_t B, int64_t Ls, Rng* rng);
  Seq2SeqConfig config_;
  nn::ParamStore params_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
