// Hugging Face BERT task heads read from the checkpoint: BertForSequenceClassification (also cross-encoders),
// BertForTokenClassification and BertForMaskedLM (transformers/models/bert/modeling_bert.py), with the labels of
// config.json, plus the post-processing the pipelines apply (labels, offsets, decoding).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/encoder.h"
#include "nn/layers.h"
#include "text/bert_tokenizer.h"

namespace tfm {

enum class HeadKind {
  SequenceClassification,  // logits = classifier(pooler_output): "classifier.weight" [num_labels, H]
  TokenClassification,     // logits = classifier(last_hidden_state) per token
  MaskedLM,                // logits = decoder(LayerNorm(act(transform.dense(h)))) + cls.predictions.bias
};
const char* head_kind_name(HeadKind k);  // "sequence classification", ...

// How a cross-encoder / classifier turns logits into scores.
enum class ScoreFunction { Sigmoid, Softmax, None };

// The parts of config.json the heads use.
struct HeadConfig {
  std::vector<std::string> architectures;  // e.g. "BertForSequenceClassification"
  std::vector<std::string> id2label;       // [num_labels]; "LABEL_i" where config.json has none
  std::string problem_type;                // "", "single_label_classification", "multi_label_classification", ...
  // Cross-encoder activation: config.json "sentence_transformers": {"activation_fn": "...Sigmoid"} (v3) or
  // "sbert_ce_default_activation_function"; empty if neither.
  std::string activation_fn;
  // The pipeline default: sigmoid for one label or multi-label problems, softmax otherwise; a cross-encoder's
  // named activation wins (Sigmoid / Identity -> None / Softmax).
  ScoreFunction default_score_function() const;
};

// The head a checkpoint folder holds, read as TaskModel::load reads it. Throws std::runtime_error when the folder
// has none ("... has no task head (architectures BertModel ...)").
HeadKind detect_head_kind(const std::string& dir);

// A BERT body with one task head, from DIR/config.json, DIR/model.safetensors and the tokenizer files.
class TaskModel {
 public:
  // The head is chosen from config.json "architectures" (...ForSequenceClassification, ...ForTokenClassification,
  // ...ForMaskedLM / ...ForPreTraining), or from the tensors when architectures is absent. Body tensor names are
  // accepted with or without the "bert." prefix. Throws std::runtime_error naming the folder when it has no
  // head of kind `want` ("... is a BertForMaskedLM checkpoint: it has no sequence classification head"), or when
  // a tensor the head needs is missing (sequence classification needs the pooler).
  static TaskModel load(const std::string& dir, HeadKind want);

  // Sequence classification: [B, num_labels]. token_type_ids may be undefined.
  Tensor sequence_logits(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask) const;
  // Token classification: [B, L, num_labels].
  Tensor token_logits(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask) const;
  // Masked LM at the given positions: positions [P] of (b, l) pairs -> [P, vocab_size].
  Tensor mlm_logits(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                    const std::vector<std::pair<int64_t, int64_t>>& positions) const;

  HeadKind kind() const { return kind_; }
  const HeadConfig& head_config() const { return head_; }
  int64_t num_labels() const { return (int64_t)head_.id2label.size(); }
  const BertTokenizer& tokenizer() const { return *tokenizer_; }
  const EncoderConfig& encoder_config() const { return encoder_->config(); }
  // True when the decoder weight is the word-embedding matrix (not stored in the file).
  bool tied_decoder() const { return tied_; }
  // Whether tokenizer_config.json asks decode() to clean up spaces (clean_up_tokenization_spaces, default true).
  bool clean_up_tokenization_spaces() const { return cleanup_; }

 private:
  TaskModel() = default;
  HeadKind kind_ = HeadKind::SequenceClassification;
  HeadConfig head_;
  std::shared_ptr<EncoderModel> encoder_;
  std::shared_ptr<BertTokenizer> tokenizer_;
  nn::Linear classifier_, transform_, decoder_;
  nn::LayerNorm transform_ln_;
  ops::Activation act_ = ops::Activation::Gelu;
  bool tied_ = false, cleanup_ = true;
};

// Batches of encodings as [B, L] int64 tensors, right-padded with pad_id (mask 0).
struct BatchTensors {
  Tensor input_ids, token_type_ids, attention_mask;
};
BatchTensors make_batch(const std::vector<Encoding>& enc, int64_t pad_id);

// Softmax / sigmoid / identity of logits[n] into scores[n] (softmax over the n values).
std::vector<float> apply_score_function(const float* logits, int64_t n, ScoreFunction f);

// tokenizer.decode(tokens, skip_special_tokens) of a BERT tokenizer: special tokens dropped (only [PAD] when
// skip_special_tokens is false, as the fill-mask pipeline filters padding), "##" pieces joined, other pieces
// separated by a space; with cleanup, " ." -> "." etc. (clean_up_tokenization).
std::string decode_wordpieces(const BertTokenizer& tok, const std::vector<std::string>& tokens, bool cleanup,
                              bool skip_special_tokens = true);

// Character (code point) offsets [start, end) of each token of `enc` (the encoding of `text` alone) in `text`,
// as Hugging Face's offset_mapping gives them; (0, 0) for special tokens.
std::vector<std::pair<int64_t, int64_t>> token_offsets(const BertTokenizer& tok, const std::string& text,
                                                       const Encoding& enc);

}  // namespace tfm
