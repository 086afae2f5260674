// How a family lays out its task heads: the tensors and the small computation between the encoder output and the
// logits, as each family's modeling_*.py writes its *ForSequenceClassification / *ForTokenClassification /
// *ForMaskedLM. A family provides one FamilyHeads (a function in its own file: bert_heads(), roberta_heads(),
// distilbert_heads(), ...) named by its ModelFamily entry (models/registry.h), which models/heads.cpp
// family_heads() finds by config.json model_type; the rest (labels, batching, scoring, decoding) is shared by every
// family in models/heads.
#pragma once
#include <optional>
#include <vector>

#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "nn/layers.h"

namespace tfm {

enum class HeadKind {
  SequenceClassification,  // logits [B, num_labels] from one vector per sequence
  TokenClassification,     // logits [B, L, num_labels] per token
  MaskedLM,                // logits [P, vocab_size] at masked positions
  QuestionAnswering,       // span logits [B, L, 2] per token: start, end (*ForQuestionAnswering's qa_outputs)
};
const char* head_kind_name(HeadKind k);  // "sequence classification", ...

// What a sequence-classification head reads from the encoder.
enum class HeadInput {
  PoolerOutput,  // EncoderOutput::pooler_output (BERT: tanh(pooler.dense(h[:, 0])), computed by the encoder)
  FirstToken,    // last_hidden_state[:, 0] (<s> / [CLS]: RoBERTa, DistilBERT)
  MeanTokens,    // mean of last_hidden_state over attention_mask == 1 (ModernBERT classifier_pooling "mean")
};

// One step of a head: y [N, out] = norm(act(linear(x [N, in]))); act and norm optional, in that order.
struct HeadStage {
  nn::Linear linear;                  // fp32 parameters (unpacked; the heads are small next to the body)
  bool tanh = false;                  // tanh after the linear (RoBERTa's classifier.dense)
  std::optional<ops::Activation> act; // else this activation, if any (gelu, relu, ...)
  std::optional<nn::LayerNorm> norm;  // then this LayerNorm, if any
};

// A loaded head: `input` (sequence classification only), then the stages in order; the last stage's out_features
// is num_labels (classification) or vocab_size (masked LM).
struct HeadLayout {
  HeadInput input = HeadInput::FirstToken;
  std::vector<HeadStage> stages;
  bool tied_decoder = false;  // masked LM: the last stage's weight is the word-embedding matrix (not stored)
};

// A family's heads.
struct FamilyHeads {
  // The head the tensors hold, for a config.json without "architectures"; nullopt when they hold none.
  std::optional<HeadKind> (*detect)(const CheckpointWeights& weights) = nullptr;
  // Loads the head of `kind` (the body is loaded separately by make_encoder). Throws std::runtime_error naming the
  // missing tensor or the shape mismatch (WeightSource::get's messages).
  HeadLayout (*load)(HeadKind kind, const EncoderConfig& config, CheckpointWeights& weights) = nullptr;
};

namespace detail {
// Helpers for the family loaders.
// "<prefix>.weight" [out, in] and "<prefix>.bias" [out] under the first of `prefixes` that is stored, its row
// count read from the file (classifiers: out = num_labels). Throws std::runtime_error naming the tensor (and the
// other names tried) when it is missing or not [*, in].
nn::Linear load_head_linear(CheckpointWeights& w, const std::vector<std::string>& prefixes, int64_t in);
// A decoder over the vocabulary: "<weight_name>" [V, H] if stored, else the word embeddings `tied_name` (or its
// aliases) [V, H] (*tied set true); bias `bias_name` [V] (or its aliases). Each list: the name, then aliases.
nn::Linear load_vocab_decoder(CheckpointWeights& w, const std::vector<std::string>& weight_names,
                              const std::vector<std::string>& tied_names, const std::vector<std::string>& bias_names,
                              int64_t vocab_size, int64_t hidden_size, bool* tied);
// "<prefix>.weight" / ".bias" [C], also as gamma / beta.
nn::LayerNorm load_head_layer_norm(CheckpointWeights& w, const std::string& prefix, int64_t C, float eps);
// The extractive question-answering head every family that has one stores the same way (BertForQuestionAnswering,
// RobertaForQuestionAnswering, DistilBertForQuestionAnswering, MPNetForQuestionAnswering): "qa_outputs.weight"
// [2, H] and "qa_outputs.bias" [2] over last_hidden_state; logits[..., 0] start, logits[..., 1] end. Throws
// std::runtime_error naming the tensor when it is missing or not [2, H].
HeadLayout load_qa_outputs_head(CheckpointWeights& w, int64_t hidden_size);
// Whether the checkpoint holds qa_outputs.weight.
bool has_qa_outputs(const CheckpointWeights& w);
// Whether any of the names is stored.
bool has_any(const CheckpointWeights& w, const std::vector<std::string>& names);
}  // namespace detail

}  // namespace tfm
