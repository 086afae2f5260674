// Hugging Face task heads read from the checkpoint: *ForSequenceClassification (also cross-encoders),
// *ForTokenClassification and *ForMaskedLM of every encoder family (each family's layout in its own file, see
// models/head_layout.h), with the labels of config.json, plus the post-processing the pipelines apply (labels,
// offsets, decoding).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/encoder.h"
#include "models/head_layout.h"
#include "nn/layers.h"
#include "text/bert_tokenizer.h"

namespace tfm {

// The head layout of config.json model_type's family (models/registry.h ModelFamily::heads). Throws
// std::runtime_error naming the model types with heads for a family without them, family_of's refusal for a
// model_type no family answers.
FamilyHeads family_heads(const std::string& model_type, const std::string& file);

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
  // The pipeline default: none (the raw score) for problem_type "regression", sigmoid for one label or multi-label
  // problems, softmax otherwise; a cross-encoder's named activation wins (Sigmoid / Identity -> None / Softmax).
  ScoreFunction default_score_function() const;
};

// The head a checkpoint folder holds, read as TaskModel::load reads it. Throws std::runtime_error when the folder
// has none ("... has no task head (architectures BertModel ...)").
HeadKind detect_head_kind(const std::string& dir);

// config.json's problem_type: "" when absent or null, else one of PretrainedConfig's allowed_problem_types
// ("regression", "single_label_classification", "multi_label_classification"); another value, or one that is not
// a string, is std::runtime_error naming `file` (transformers raises ValueError for it too). An id2label that is
// present but not an object of id -> name (a list, a string) is refused the same way.
std::string checked_problem_type(const nlohmann::json& config, const std::string& file);

// An encoder body (make_encoder: any family) with one task head, from DIR/config.json, the checkpoint and the
// tokenizer files.
class TaskModel {
 public:
  // The head is chosen from config.json "architectures" (...ForSequenceClassification, ...ForTokenClassification,
  // ...ForMaskedLM / ...ForPreTraining), or from the tensors when architectures is absent; its layout from
  // model_type (family_heads). Body tensor names are accepted with or without the family's prefix ("bert.",
  // "roberta.", "distilbert."). Throws std::runtime_error naming the folder when it has no head of kind `want`
  // ("... is a BertForMaskedLM checkpoint: it has no sequence classification head"), or when a tensor the head
  // needs is missing (BERT's sequence classification needs the pooler).
  // dtype: the body's compute type (the heads run in fp32); none: as the folder stores it (int8 for a
  // `tfm convert --dtype int8` folder, else fp32). *resolved receives the type used.
  static TaskModel load(const std::string& dir, HeadKind want, std::optional<ops::ComputeType> dtype = std::nullopt,
                        ops::ComputeType* resolved = nullptr);

  // Sequence classification: [B, num_labels]. token_type_ids may be undefined.
  Tensor sequence_logits(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask) const;
  // Token classification: [B, L, num_labels]; question answering: [B, L, 2] (start, end logits).
  Tensor token_logits(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask) const;
  // Masked LM at the given positions: positions [P] of (b, l) pairs -> [P, vocab_size].
  Tensor mlm_logits(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                    const std::vector<std::pair<int64_t, int64_t>>& positions) const;

  // The tokenizer's mask token: tokenizer_config.json / special_tokens_map.json "mask_token", else "[MASK]" or
  // "<mask>" if the vocabulary has it; -1 when none.
  int64_t mask_token_id() const { return mask_id_; }
  const std::string& mask_token() const { return mask_token_; }
  // tokenizer.decode(ids, skip_special_tokens) as transformers does it (WordPiece: decode_wordpieces; other
  // tokenizers: the tokenizer.json decoder), then clean_up_tokenization when clean_up_tokenization_spaces.
  // Pad ids are dropped first, as the fill-mask pipeline does.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const;
  // tokenizer.decode([id]), the fill-mask pipeline's token_str (WordPiece: the token, "##" kept).
  std::string decode_token(int64_t id) const;

  // The longest input the body takes (EncoderConfig::max_input_tokens).
  int64_t max_input_tokens() const;
  HeadKind kind() const { return kind_; }
  const HeadConfig& head_config() const { return head_; }
  int64_t num_labels() const { return (int64_t)head_.id2label.size(); }
  const BertTokenizer& tokenizer() const { return *tokenizer_; }
  const EncoderConfig& encoder_config() const { return encoder_->config(); }
  // True when the decoder weight is the word-embedding matrix (not stored in the file).
  bool tied_decoder() const { return layout_->tied_decoder; }
  // Whether tokenizer_config.json asks decode() to clean up spaces (clean_up_tokenization_spaces, default true).
  bool clean_up_tokenization_spaces() const { return cleanup_; }

 private:
  TaskModel() = default;
  // Rows [N, in] through the head's stages -> [N, out].
  std::vector<float> run_stages(std::vector<float> x, int64_t N) const;

  HeadKind kind_ = HeadKind::SequenceClassification;
  HeadConfig head_;
  std::shared_ptr<EncoderModel> encoder_;
  std::shared_ptr<BertTokenizer> tokenizer_;
  std::shared_ptr<const HeadLayout> layout_;
  std::string mask_token_;
  int64_t mask_id_ = -1;
  bool cleanup_ = true;
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
