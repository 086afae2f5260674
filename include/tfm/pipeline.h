/// @file tfm/pipeline.h
/// What every face (the CLI, tfm serve, Python) does around a model call, written once: length-bucketed batching
/// under a token budget, Matryoshka dimensions, L2 normalisation, the compute type a folder stores,
/// and the rules on options that several faces take (dimensions, length_penalty, the tokenizer's vocabulary).
/// As text-embeddings-inference's core owns its post-processing, the faces parse and print only. Rerank scores are
/// tfm::Classifier::rerank_score (tfm/classifier.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tfm/array.h"

namespace tfm {

/// Limits of one batch of sequences. 0 = no limit. A sequence longer than max_tokens still forms a batch of its own.
struct BatchLimits {
  int64_t max_tokens = 0;       ///< padded tokens: rows x the longest row's length
  int64_t max_rows = 0;         ///< sequences
  int64_t max_real_tokens = 0;  ///< the sum of the rows' lengths (padding excluded)
};

/// A batch being filled under BatchLimits: fits() says whether a sequence of `length` tokens may join (always for
/// the first), add() takes it. The one rule of what fits a batch, used by length_batches() and by the server's
/// queue (which fills its batches round robin over the waiting requests).
class BatchBudget {
 public:
  explicit BatchBudget(const BatchLimits& limits) : limits_(limits) {}
  bool fits(int64_t length) const;
  void add(int64_t length);
  int64_t rows() const { return rows_; }
  int64_t longest() const { return longest_; }
  int64_t real_tokens() const { return real_; }

 private:
  BatchLimits limits_;
  int64_t rows_ = 0, longest_ = 0, real_ = 0;
};

/// Batches of similar length: the indices of `lengths` (tokens per sequence) stably sorted by length, cut greedily
/// into consecutive runs under `limits` (BatchBudget). Every index appears once; batches are returned shortest
/// first, each in ascending length (ties in input order). `tfm embed`, tfm::Encoder::embed, `tfm translate` and
/// tfm::Translator batch with it, so a text gets the same batch, and the same numbers, through each of them.
/// Throws std::invalid_argument for a negative length or limit.
std::vector<std::vector<size_t>> length_batches(const std::vector<int64_t>& lengths, const BatchLimits& limits);

/// Matryoshka truncation's rule (sentence-transformers truncate_dim): `dimensions` from 1 to `embedding_size`.
/// Throws std::invalid_argument "dimensions must be >= 1 and at most the embedding size D, got X". Callers whose
/// options use 0 for "all values" check only a value they were given.
void check_dimensions(int64_t dimensions, int64_t embedding_size);

/// Divides `v` ([n] float32) by its L2 norm (accumulated in double; a zero vector stays zero), as
/// torch.nn.functional.normalize and sentence-transformers' Normalize module do.
void l2_normalize(float* v, int64_t n);

/// Embeddings [N, D] as a request asks for them: the first `dimensions` values of each row (0 = all; else
/// check_dimensions), then L2-normalised when `normalize`. Returns `embeddings` itself when nothing changes.
FloatArray truncate_dimensions(const FloatArray& embeddings, int64_t dimensions, bool normalize);
/// The same for one vector.
std::vector<float> truncate_dimensions(std::vector<float> embedding, int64_t dimensions, bool normalize);

/// The compute type a model loaded from the folder with dtype "" (as stored) computes in: "int8" for a folder from
/// `tfm convert --dtype int8` (safetensors metadata tfm_dtype), else "fp32" (bf16-stored weights are widened).
/// Reads the safetensors header of DIR (or DIR/0_Transformer for a sentence-transformers folder), no weights.
/// Throws tfm::FileNotFoundError when neither holds weights.
std::string stored_dtype(const std::string& dir);

/// A folder's tokenizer must not produce ids outside the model's embedding table. Throws std::runtime_error
/// "<where>: tokenizer vocabulary (N tokens) is larger than config.json vocab_size (M)" when it would.
void check_tokenizer_vocab(const std::string& where, int64_t tokenizer_vocab_size, int64_t config_vocab_size);

}  // namespace tfm
