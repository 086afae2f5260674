/// @file tfm/classifier.h
/// Sequence classification with a Hugging Face BertForSequenceClassification folder (config.json with id2label,
/// model.safetensors with the pooler and classifier, tokenizer files), as `tfm classify` and the transformers
/// text-classification pipeline compute it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tfm/array.h"

namespace tfm {

struct ClassifierOptions {
  int threads = 0;  ///< OpenMP / BLAS threads of each call, set on the calling thread (0 = all cores)
};

struct ClassifyOptions {
  /// "" (default): the pipeline's choice (sigmoid for one label or multi-label problems, softmax otherwise; a
  /// cross-encoder's configured activation wins); "softmax", "sigmoid" or "none" (raw logits).
  std::string function;
  int64_t max_length = 0;   ///< truncate texts to this many tokens (0 = error when over max_position_embeddings)
  int64_t batch_size = 32;  ///< texts per forward pass
};

/// One text's result: every label with its score, best first (ties keep the config.json order).
struct Classification {
  std::vector<std::string> labels;  ///< [num_labels], config.json id2label ("LABEL_i" where it has none)
  std::vector<float> scores;        ///< [num_labels], of the score function
  const std::string& label() const { return labels.front(); }  ///< the best label (`tfm classify`'s "label")
  float score() const { return scores.front(); }                ///< its score
};

/// Thread-safety: immutable after construction; classify() and logits() may be called from several threads.
class Classifier {
 public:
  /// Throws tfm::FileNotFoundError for a missing folder or file, std::runtime_error when the folder has no
  /// sequence classification head (the message names what it has) or is malformed, std::invalid_argument for
  /// threads < 0.
  explicit Classifier(const std::string& model_dir, const ClassifierOptions& options = {});
  ~Classifier();
  Classifier(Classifier&&) noexcept;
  Classifier& operator=(Classifier&&) noexcept;

  /// One Classification per text. Throws std::invalid_argument for an empty list, an empty text, invalid UTF-8,
  /// a text over max_position_embeddings (without max_length), an unknown function or batch_size < 1.
  std::vector<Classification> classify(const std::vector<std::string>& texts, const ClassifyOptions& options = {}) const;
  /// The head's logits [texts.size(), num_labels] float32 (same errors).
  FloatArray logits(const std::vector<std::string>& texts, const ClassifyOptions& options = {}) const;

  const std::vector<std::string>& labels() const;  ///< id2label, [num_labels]
  int64_t num_labels() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
