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
  /// the accepted ones; a CPU without a oneDNN kernel for it throws std::runtime_error.
  std::string dtype;
  /// OpenMP / BLAS threads of each call, set on the calling thread (0 = all cores).
  int threads = 0;
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
  /// A sentence-transformers folder also takes its other modes ("max", "mean_sqrt_len", "weightedmean",
  /// "lasttoken", several joined by "+"), replacing its Pooling module's.
  std::string pooling;
  /// Divide each embedding by its L2 norm (sentence-transformers Normalize). Unset: as the folder's modules.json
  /// says (Normalize module or not), false for a plain folder. false on a folder with a Normalize module throws
  /// std::invalid_argument (the module cannot be skipped).
  std::optional<bool> normalize;
  /// Truncate texts to this many tokens (0: a sentence-transformers folder's max_seq_length; for a plain folder an
  /// error when a text is over the model's limit).
  int64_t max_length = 0;
  int64_t batch_size = 32;        ///< texts per forward pass
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

  /// last_hidden_state [batch, length, hidden_size] float32. Throws std::invalid_argument when batch or length
  /// is < 1, length > max_position_embeddings, or an id or mask value is out of range (the message gives it).
  FloatArray forward(const EncoderInputs& inputs) const;
  /// forward() on a tokenizer's batch.
  FloatArray forward(const TokenBatch& batch) const;
  /// One vector per text, [texts.size(), embedding_dim()] float32: tokenize (special tokens added), forward, pool.
  /// A folder with modules.json runs its sentence-transformers pipeline as SentenceTransformer.encode() does
  /// (default prompt, lowercasing, max_seq_length truncation, Pooling, Dense, Normalize; computed in fp32 whatever
  /// the dtype). Throws std::invalid_argument for an empty list, an unknown pooling, text over the model's length
  /// (unless max_length), invalid UTF-8; std::runtime_error when the folder has no tokenizer.
  FloatArray embed(const std::vector<std::string>& texts, const EmbedOptions& options = {}) const;

  /// The folder's tokenizer. Throws std::runtime_error when it has none.
  const Tokenizer& tokenizer() const;
  bool has_tokenizer() const;
  std::string model_type() const;  ///< "bert" or "transformer_encoder"
  int64_t hidden_size() const;
  /// Width of embed()'s vectors with default options: the sentence-transformers pipeline's output (after Dense),
  /// else hidden_size.
  int64_t embedding_dim() const;
  bool is_sentence_transformer() const;  ///< the folder has modules.json
  int64_t vocab_size() const;
  int64_t max_position_embeddings() const;  ///< tokens
  const std::string& dtype() const;  ///< the compute type used: "fp32", "bf16" or "int8" (aliases normalised)
  int threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
