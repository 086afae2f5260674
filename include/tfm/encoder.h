/// @file tfm/encoder.h
/// Encoder-only models: Hugging Face BERT (BertModel) and the pre-LN tutorial encoder ("transformer_encoder"),
/// loaded from a folder with config.json, model.safetensors and, for text input, tokenizer.json or vocab.txt.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tfm/array.h"
#include "tfm/tokenizer.h"

namespace tfm {

struct EncoderOptions {
  /// Compute type of the Linear layers (oneDNN): "fp32" (or "float32"); "bf16" (or "bfloat16": weights and
  /// input rows rounded to bf16, fp32 accumulation); "int8" (dynamic quantisation: s8 weights, one scale per
  /// output row, each GEMM input row quantised at run time with its own scale (per tensor with the
  /// environment variable TFM_INT8_ACT=tensor); int32 accumulation). Embeddings, LayerNorm and softmax stay
  /// fp32. "" (default): as the folder stores it, int8 for a folder from `tfm convert --dtype int8` (weights
  /// used as stored), else fp32; such a folder asked for "fp32" or "bf16" is dequantised (w = q * scale) and
  /// computes in that type. dtype() reports the type used. Any other value throws std::invalid_argument naming
  /// the accepted ones. On a CPU without native bf16 / int8 products the weights of that type are multiplied in
  /// fp32 (tfm::native_dtype).
  std::string dtype;
  /// OpenMP threads (kernels and oneDNN GEMMs) of each call, set on the calling thread (0 = the process default:
  /// OMP_NUM_THREADS, else all cores).
  int threads = 0;
  /// Default pooling of embed(): "" = a sentence-transformers folder's own Pooling module, else "mean"; any of
  /// EmbedOptions::pooling's modes (for a sentence-transformers folder replacing its Pooling module's; another
  /// value throws std::invalid_argument, see check_pooling()).
  std::string pooling;
  /// sentence-transformers folders: the prompt of config_sentence_transformers.json that tokenize() and embed()
  /// prepend ("" = its default_prompt_name; an unknown name throws std::invalid_argument), or none with no_prompt.
  /// Ignored for a plain folder.
  std::string prompt_name;
  bool no_prompt = false;
  /// sentence-transformers folders (below) also take a literal prompt (replacing prompt_name), a Normalize step
  /// added when the folder has none, and a truncation length in tokens (0 = sentence_bert_config.json
  /// max_seq_length, else min(model_max_length, max_position_embeddings)).
  std::string prompt;
  bool normalize = false;
  int64_t max_seq_length = 0;
  /// What embed() and tokenize() run: "auto" (a folder's modules.json pipeline when it has one, else plain
  /// pooling), "none" (ignore modules.json: pool last_hidden_state as for a plain folder) or
  /// "sentence_transformers" (the pipeline only, SentenceTransformer semantics, also for a plain folder with
  /// `pooling` set, as `tfm embed`; forward() and forward_all() then throw std::runtime_error). Another value throws
  /// std::invalid_argument.
  std::string pipeline = "auto";
  /// config.json to read instead of model_dir/config.json ("" = the folder's).
  std::string config_path;
  /// true: random weights instead of model_dir/model.safetensors, seeded by `seed`, for demos and tests without a
  /// checkpoint: a Hugging Face family as its model class initialises itself (BertModel(config): matrices
  /// N(0, initializer_range), the pad token's embedding row 0, biases 0, LayerNorm 1 / 0); transformer_encoder
  /// with PyTorch's default initialisation.
  bool random_weights = false;
  uint64_t seed = 0;
  /// false: the folder's tokenizer is not loaded (a caller that tokenizes with its own tfm::Tokenizer saves the
  /// second load, about 10 ms for a 30,522-token WordPiece vocabulary); tokenize(), embed() of texts and
  /// tokenizer() then throw std::runtime_error as for a folder without tokenizer files.
  bool load_tokenizer = true;
};

struct ForwardOptions {
  bool output_hidden_states = false;  ///< also every layer's output (HF output_hidden_states=True); implies all_positions
  /// Compute padded positions too, as Hugging Face does (every position of every row attends the row's real
  /// tokens). false (default): with padding in the batch the layers run on the real tokens only (faster), and
  /// last_hidden_state is 0 where attention_mask is 0; real positions and pooler_output are the same up to float
  /// rounding.
  bool all_positions = false;
};

/// What forward_all() returns (Hugging Face BaseModelOutputWithPooling).
struct EncoderOutputs {
  FloatArray last_hidden_state;  ///< [batch, length, hidden_size]
  /// With output_hidden_states: [num_hidden_layers + 1, batch, length, hidden_size], the embedding output first;
  /// else empty.
  FloatArray hidden_states;
  /// BERT with pooler weights: [batch, hidden_size], tanh(dense(last_hidden_state[:, 0])); else empty.
  FloatArray pooler_output;
};

/// Token ids of a batch, row-major [batch, length] int64, read in place (no copy) during forward().
struct EncoderInputs {
  const int64_t* input_ids = nullptr;       ///< [batch, length] ids in [0, vocab_size)
  const int64_t* attention_mask = nullptr;  ///< [batch, length] 1 = attend, 0 = padding; null = all ones
  const int64_t* token_type_ids = nullptr;  ///< [batch, length] segment ids in [0, type_vocab_size); null = zeros
  int64_t batch = 0, length = 0;
};

struct EmbedOptions {
  /// "" (default): a sentence-transformers folder's own Pooling module (modules.json), else "mean".
  /// "mean": average of last_hidden_state over the tokens with attention_mask 1 (special tokens included, as
  /// sentence-transformers' Pooling(pooling_mode_mean_tokens) computes it); "cls": the [CLS] (first) token's vector.
  /// Also sentence-transformers' other modes ("max", "mean_sqrt_len", "weightedmean", "lasttoken"), or several
  /// joined by "+" (their vectors concatenated in the order cls, max, mean, mean_sqrt_len, weightedmean,
  /// lasttoken), on a plain folder as on a sentence-transformers one (replacing its Pooling module's).
  std::string pooling;
  /// Divide each embedding by its L2 norm (sentence-transformers Normalize). Unset: as the folder's modules.json
  /// says (Normalize module or not), false for a plain folder. false on a folder with a Normalize module skips
  /// that module (as text-embeddings-inference's "normalize": false does).
  std::optional<bool> normalize;
  /// sentence-transformers folders: the prompt of config_sentence_transformers.json "prompts" to prepend, as
  /// SentenceTransformer.encode(prompt_name=...). "" (default): the Encoder's (EncoderOptions::prompt_name /
  /// no_prompt). A name the folder does not have, or any name for a plain folder, throws std::invalid_argument.
  std::string prompt_name;
  /// Matryoshka truncation (sentence-transformers truncate_dim): keep the first `dimensions` values of each
  /// embedding, then L2-normalise if normalising. 0: all embedding_dim() values. < 0 or > embedding_dim() throws
  /// std::invalid_argument (tfm::check_dimensions).
  int64_t dimensions = 0;
  /// Truncate texts to this many tokens (0: a sentence-transformers folder's max_seq_length; for a plain folder an
  /// error when a text is over the model's limit).
  int64_t max_length = 0;
  /// Batching (tfm::length_batches, as `tfm embed` batches and with its defaults): texts sorted by token count
  /// and cut into batches of at most batch_size texts and batch_tokens padded tokens (texts x the longest), so
  /// that little padding is computed. Each text's vector depends only on its batch: the same texts with the same
  /// two limits give the same numbers here, through `tfm embed` and through Python's Encoder.embed. < 1 throws
  /// std::invalid_argument.
  int64_t batch_size = 128;
  int64_t batch_tokens = 16384;
};

/// What an encoder's config.json describes, read and validated as Encoder's constructor does (sizes bounded, the
/// weights' memory checked against the machine's), without reading any weights.
struct EncoderConfigInfo {
  std::string model_type;  ///< "bert" (also when config.json has none) or "transformer_encoder"
  int64_t vocab_size = 0, hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0;
  int64_t max_position_embeddings = 0;  ///< tokens
};

/// Thread-safety: an Encoder is immutable after construction (weights are read-only, mapped from the file); every
/// const method may be called from several threads at once, each call using `threads` threads of its own.
class Encoder {
 public:
  /// Loads `model_dir`/config.json and model.safetensors (mapped, used in place), and the tokenizer when the
  /// folder has one. Throws tfm::FileNotFoundError for a missing folder or file, std::invalid_argument for an
  /// unsupported dtype or threads < 0, std::runtime_error for a malformed config or weights (missing tensor,
  /// shape mismatch; the message names file and tensor).
  explicit Encoder(const std::string& model_dir, const EncoderOptions& options = {});
  ~Encoder();
  Encoder(Encoder&&) noexcept;
  Encoder& operator=(Encoder&&) noexcept;

  /// Writes the folder of an Encoder built with EncoderOptions::random_weights, so that Encoder(dir) computes the
  /// same outputs: config.json (the one it was built from, its architectures naming the base model class:
  /// BertForMaskedLM -> BertModel), model.safetensors (every parameter, under the names
  /// the loader reads) and the tokenizer files of its folder. Atomic: written to DIR.tmp-<pid> next to it and
  /// renamed onto `dir`, which must be absent or an empty folder. Throws std::logic_error for an Encoder loaded
  /// from a checkpoint, std::runtime_error when `dir` is not empty or cannot be written.
  void save(const std::string& dir) const;

  /// Reads `config_path`. Throws tfm::FileNotFoundError for a missing file, std::runtime_error for a malformed,
  /// unsupported or too large config (the message names the file and key).
  static EncoderConfigInfo read_config(const std::string& config_path);

  /// last_hidden_state [batch, length, hidden_size] float32. With padding in the batch (attention_mask 0) the
  /// layers run on the real tokens only: real positions equal Hugging Face's up to float rounding, and padded
  /// positions hold 0 (forward_all with ForwardOptions::all_positions gives Hugging Face's values there too).
  /// Throws std::invalid_argument when batch or length is < 1, length > max_position_embeddings, or an id or mask
  /// value is out of range (the message gives it).
  FloatArray forward(const EncoderInputs& inputs) const;
  /// forward() on a tokenizer's batch.
  FloatArray forward(const TokenBatch& batch) const;
  /// forward() with the pooler output and, with output_hidden_states, every layer's output (same errors). Padded
  /// positions hold 0 as in forward() unless options.all_positions or output_hidden_states.
  EncoderOutputs forward_all(const EncoderInputs& inputs, const ForwardOptions& options = {}) const;
  /// One vector per text, [texts.size(), embedding_dim()] float32: tokenize (special tokens added), forward, pool.
  /// A folder with modules.json runs its sentence-transformers pipeline as SentenceTransformer.encode() does
  /// (default prompt, lowercasing, max_seq_length truncation, Pooling, Dense, Normalize; the Transformer module in
  /// dtype(), Pooling / Dense / Normalize in fp32). Throws std::invalid_argument for an empty list, an unknown pooling, text over the model's length
  /// (unless max_length), invalid UTF-8; std::runtime_error when the folder has no tokenizer.
  FloatArray embed(const std::vector<std::string>& texts, const EmbedOptions& options = {}) const;

  /// Pooled embeddings of texts already tokenized by tokenize() (special tokens added, any lengths), batched as
  /// embed(texts) batches them (batch_size, batch_tokens), [encodings.size(), embedding_dim()] float32 in input
  /// order; `tfm embed` runs this. Options as embed(inputs, options) takes them, plus the batch limits. Throws
  /// std::invalid_argument for an empty list or encoding, an id outside the vocabulary, an encoding longer than
  /// max_position_embeddings, pooling or max_length given.
  FloatArray embed(const std::vector<TextEncoding>& encodings, const EmbedOptions& options = {}) const;

  /// Pooled embeddings of an already tokenized batch (rows right-padded; a row ends at its last attention_mask 1),
  /// [batch, embedding_dim()] float32, not normalised unless the folder's pipeline ends in Normalize: the
  /// sentence-transformers pipeline (Pooling, Dense, Normalize) on each row, or for a plain folder the options'
  /// pooling (sentence-transformers' mean over attention_mask 1, or [CLS]). Throws what forward() throws.
  FloatArray embed(const EncoderInputs& inputs) const;
  /// embed(inputs) with per-call options: normalize (unset: as embed(inputs)), prompt_name (a
  /// sentence-transformers folder whose Pooling excludes the prompt needs to know its length; the ids must hold the
  /// prompt, see tokenize(text, options, prompt_name)) and dimensions. pooling, max_length, batch_size and
  /// batch_tokens are not for pre-tokenized inputs: a non-default value throws std::invalid_argument, as the errors
  /// of EmbedOptions and forward() do.
  FloatArray embed(const EncoderInputs& inputs, const EmbedOptions& options) const;
  /// Token embeddings of an already tokenized batch, [batch, length, hidden_size] float32: last_hidden_state, or
  /// for a sentence-transformers folder its Transformer module's output (before Pooling; as
  /// text-embeddings-inference's /embed_all). Padded positions hold no meaningful values.
  FloatArray token_embeddings(const EncoderInputs& inputs) const;
  /// One text as embed() reads it: for a sentence-transformers folder its pipeline's tokenization (prompt,
  /// do_lower_case, cut to max_seq_length; with max_length 0 and add_special_tokens a longer text is returned at its
  /// full length, so the caller can refuse it), else tokenizer().encode(). Offsets are in `text` (prompt tokens
  /// have none). Throws std::invalid_argument for invalid UTF-8, std::runtime_error without a tokenizer.
  TextEncoding tokenize(const std::string& text, const TokenizeOptions& options = {}) const;
  /// tokenize() with another prompt of a sentence-transformers folder (EmbedOptions::prompt_name; "" = the
  /// Encoder's). Throws std::invalid_argument for an unknown name, or any name for a plain folder.
  TextEncoding tokenize(const std::string& text, const TokenizeOptions& options, const std::string& prompt_name) const;
  /// The prompt names of a sentence-transformers folder's config_sentence_transformers.json (sorted; empty for a
  /// plain folder).
  std::vector<std::string> prompt_names() const;

  /// The folder's tokenizer. Throws std::runtime_error when it has none.
  const Tokenizer& tokenizer() const;
  bool has_tokenizer() const;
  std::string model_type() const;  ///< "bert" or "transformer_encoder"
  int64_t hidden_size() const;
  int64_t num_hidden_layers() const;
  /// Width of embed()'s vectors with default options: the sentence-transformers pipeline's output (after Dense),
  /// else hidden_size times the number of pooling modes.
  int64_t embedding_dim() const;
  /// Checks a pooling as EmbedOptions::pooling takes it ("cls", "mean", "max", "mean_sqrt_len", "weightedmean",
  /// "lasttoken", or several joined by "+"); throws std::invalid_argument naming an unknown mode.
  static void check_pooling(const std::string& pooling);
  /// Checks that the config.json at `config_path` describes an encoder this library runs (model_type one of the
  /// supported families: bert, roberta, xlm-roberta, camembert, distilbert, ..., transformer_encoder; sizes
  /// valid), as the constructor would. Throws tfm::FileNotFoundError for a missing file, std::runtime_error naming
  /// the file, the bad key and, for an unknown model_type, the supported ones.
  static void check_config(const std::string& config_path);
  bool is_sentence_transformer() const;  ///< the folder has modules.json
  /// embed()'s pipeline: a plain folder's pooling ("mean", "max", "cls+mean", ...), or a sentence-transformers description
  /// ("Transformer(bert, max_seq_length 128) -> Pooling(mean) -> Normalize").
  std::string pooling() const;
  /// embed() with default options returns L2-normalised vectors: the sentence-transformers pipeline ends in
  /// Normalize (the folder's, or EncoderOptions::normalize); false for a plain folder's pooling.
  bool normalizes() const;
  /// Tokens per input, special tokens included: max_seq_length of a sentence-transformers folder, else
  /// min(max_position_embeddings, the tokenizer's model_max_length).
  int64_t max_input_length() const;
  int64_t vocab_size() const;
  int64_t max_position_embeddings() const;  ///< tokens
  const std::string& dtype() const;  ///< the compute type used: "fp32", "bf16" or "int8" (aliases normalised)
  int threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
