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
#include <functional>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/gemm.h"
#include "nn/params.h"
#include "nn/transformer_block.h"

namespace tfm {

class SafeTensors;
class SafeTensorsWeights;

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
  std::string activation = "relu"; // FFN activation: "relu" or "gelu" ("swish" for Marian)
  // Hugging Face translation folders (models/hf_seq2seq.h): "marian" or "m2m_100" (also NLLB); "d2l" otherwise.
  // They name their tensors as transformers does and set the fields below.
  std::string family = "d2l";
  int64_t decoder_layers = 0;     // decoder blocks when they differ from num_layers (0: num_layers)
  bool scale_embedding = true;    // embeddings times sqrt(num_hiddens) (HF scale_embedding; d2l always)
  int64_t pad_token_id = -1;      // HF: the padding id (M2M100's positions start at pad_token_id + 1)

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

// How incremental decoding numbers positions. kAbsolute: step t adds P[t] (what training sees).
// kD2lStep: every step adds P[0], as d2l's predict_seq2seq does (it feeds one token at a time and its
// PositionalEncoding adds P[:, :1]); needed to reproduce that reference's translations exactly.
enum class PositionMode { kAbsolute, kD2lStep };

// The modules of the model, named as the reference's state_dict (module construction order).
struct Seq2SeqModules {
  nn::Embedding src_embedding, tgt_embedding;  // "encoder.embedding", "decoder.embedding" [vocab, H], scaled by
                                               // sqrt(H) (one weight when shared_embeddings)
  std::vector<nn::EncoderBlock> encoder;   // "encoder.blks.blockN"
  std::vector<nn::DecoderBlock> decoder;   // "decoder.blks.blockN"
  nn::LayerNorm encoder_norm, decoder_norm;  // pre-LN only: "encoder.ln", "decoder.ln"
  nn::Linear dense;                        // "decoder.dense" [tgt_vocab, H] (tied: weight = the embedding)
  std::vector<float> P;                    // [max_len, H] sinusoidal positional encoding (row t: position t)
};

class Seq2SeqModel {
 public:
  // A trainable model: every parameter in params() (values from init() or load()), gradients beside them.
  explicit Seq2SeqModel(const Seq2SeqConfig& config);
  // An inference-only model over a safetensors file (what Translator runs): no parameter store and no gradients;
  // every tensor is read in place from the mapped file (views), checked as load() checks it (missing tensor, shape,
  // NaN / Inf, an unexpected tensor, the tied copies of a Hugging Face folder, prequantised int8 weights
  // dequantised as load() does), and the mapping is kept for the model's life. prepare_inference() then packs the
  // Linear weights and releases their file pages (madvise), so the process holds one copy of each weight: the
  // packed one. Embeddings, LayerNorms and biases stay views (an embedding's pages are read in as its rows are
  // looked up; release_unpacked_pages() drops them again). forward_backward, forward_logits, init, load, save and
  // set_precision throw std::logic_error on such a model; encode and the decoding path (decode/decoder_cache.h)
  // need prepare_inference() first. Throws what load() throws, with the same messages (a tied matrix missing
  // under every name lists the other names tried).
  static std::unique_ptr<Seq2SeqModel> open(const Seq2SeqConfig& config, const std::string& safetensors_path);
  ~Seq2SeqModel();
  // Whether this model came from open() (no parameter store).
  bool inference_only() const { return file_ != nullptr; }
  // An inference-only model: drops the pages of the mapped file that lookups have read in since (the embedding
  // rows of the tokens seen; they are read again from the file when next needed), so a long run does not end up
  // holding the whole embedding matrix beside its packed copy. Nothing for a trainable model. Not thread-safe
  // against a running decode of the same model.
  void release_unpacked_pages() const;
  Seq2SeqModel(const Seq2SeqModel&) = delete;
  Seq2SeqModel& operator=(const Seq2SeqModel&) = delete;
  const Seq2SeqConfig& config() const { return config_; }
  nn::ParamStore& params() { return params_; }
  const Seq2SeqModules& modules() const { return m_; }

  // d2l's initialisation: Xavier-uniform Linear weights; Linear biases U(+-1/sqrt(fan_in)); embeddings N(0, 1);
  // LayerNorm weight 1, bias 0 (the last three are PyTorch's defaults).
  void init(Rng& rng);
  // Reads every parameter from a safetensors file; throws naming the file and tensor on a missing tensor, a
  // shape mismatch, or an unexpected extra tensor.
  void load(const std::string& safetensors_path);
  void save(const std::string& safetensors_path);

  // Packs every Linear weight for inference in `dtype` (ops/gemm.h PackedLinear: oneDNN matmul on weights
  // reordered once; bf16 / int8 dynamic quantisation) so encode and incremental decoding
  // (decode/decoder_cache.h) run on them; the decoder's self-attention W_q, W_k, W_v also as one product.
  // Embeddings, LayerNorm, softmax and the output projection (decoder.dense) stay fp32, the latter unless
  // quantize_output_projection (then it runs in `dtype` too: a third of a beam step's products). Call after load();
  // forward_backward / forward_logits keep using the parameters, and changing them needs another call.
  // Throws std::runtime_error when this CPU has no oneDNN kernel for `dtype`.
  void prepare_inference(ops::ComputeType dtype, bool quantize_output_projection = false);
  // Precision of forward_backward's Linear products (each Linear's `precision`): F32 (default) or BF16 (inputs
  // and weights rounded to bf16, fp32 accumulation and outputs; parameters, gradients and optimizer state stay
  // fp32). Throws std::invalid_argument for I8 and std::runtime_error (one line) for BF16 on a CPU without bf16
  // instructions.
  void set_precision(ops::ComputeType precision);
  ops::ComputeType precision() const { return precision_; }
  // Teacher-forced forward, masked softmax cross-entropy, backward. Parameter gradients are accumulated (+=).
  // dropout_rng: null disables dropout (eval), otherwise masks are drawn from it. label_smoothing in [0, 1).
  // token_mean: loss = mean over valid target tokens (instead of d2l's per-sequence mean summed over the batch);
  // LossResult.loss_sum is then that mean. token_denominator > 0 divides by it instead of this batch's valid
  // tokens (data-parallel training: each rank's shard divides by the global batch's count, so the summed
  // gradients are the global batch's).
  // grads_ready, when set, is told during the backward pass that every gradient at flat offsets >= offset of
  // params().all_grad() is final (offsets decreasing, the last call 0), so a data-parallel trainer can start
  // summing them over the ranks while the rest runs (dist::BucketedAllReduce). A Hugging Face family's layout is
  // not in backward order: it hears only the final 0.
  LossResult forward_backward(const Seq2SeqBatch& batch, Rng* dropout_rng, float label_smoothing = 0.0f,
                              bool token_mean = false, int64_t token_denominator = 0,
                              const std::function<void(int64_t offset)>& grads_ready = nullptr);
  // Teacher-forced forward without dropout or gradients (fp32 products). Returns logits [B, Lt, tgt_vocab_size].
  Tensor forward_logits(const Seq2SeqBatch& batch);

  // Encoder outputs [B, Ls, num_hiddens] (no dropout). attention_weights, when non-null, receives each layer's
  // weights [num_layers][B, heads, Ls, Ls].
  Tensor encode(const int64_t* src, const int64_t* src_valid_len, int64_t B, int64_t Ls,
                std::vector<Tensor>* attention_weights = nullptr);
  // Decoder input of one step: x [B, H] = embedding(tokens) * sqrt(H) + P[pos]. Throws std::out_of_range for
  // an id outside the target vocabulary and std::invalid_argument for pos >= max_len.
  void embed_target_step(float* x, const int64_t* tokens, int64_t B, int64_t pos) const;
  // logits [B, tgt_vocab_size] of decoder outputs x [B, H] (the final LayerNorm first when pre-LN; x is then
  // overwritten).
  void project_output(float* logits, float* x, int64_t B) const;

 private:
  struct Train;  // activations saved by the teacher-forced forward
  void forward_train(const Seq2SeqBatch& batch, const nn::Context& ctx);
  const float* encoder_forward(const int64_t* src, const int64_t* src_valid_len, int64_t B, int64_t Ls,
                               const nn::Context& ctx);
  Seq2SeqModel(const Seq2SeqConfig& config, std::unique_ptr<SafeTensorsWeights> file);
  void build(const nn::Vars& vb);  // registers (store) or reads (file) the modules' parameters under their names
  void require_trainable(const char* what) const;
  friend void build_hf_seq2seq(Seq2SeqModel& model, const nn::Vars& vb);
  friend void hf_seq2seq_load_extras(Seq2SeqModel& model, const SafeTensors& st, const std::string& path,
                                     std::set<std::string>& seen);
  Seq2SeqConfig config_;
  nn::ParamStore params_;
  Seq2SeqModules m_;
  ops::ComputeType precision_ = ops::ComputeType::F32;
  std::unique_ptr<Train> t_;
  std::unique_ptr<SafeTensorsWeights> file_;  // open(): the mapped file the parameters are views into
};

}  // namespace tfm
