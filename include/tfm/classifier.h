/// @file tfm/classifier.h
/// Hugging Face task heads of every encoder family (BERT, RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT, ...) read
/// from a checkpoint folder (config.json with architectures and id2label,
/// model.safetensors, tokenizer files), as the transformers pipelines compute them: sequence classification and
/// cross-encoders (Classifier: `tfm classify`, `tfm rerank`, the server's /predict and /rerank), token
/// classification (TokenClassifier: `tfm classify` on a BertForTokenClassification folder) and masked-LM filling
/// (MaskFiller: `tfm fill-mask`).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tfm/array.h"
#include "tfm/encoder.h"
#include "tfm/pipeline.h"
#include "tfm/tokenizer.h"

namespace tfm {

/// The task head of a checkpoint (each family's modeling_*.py layout: BERT's pooler + classifier, RoBERTa's
/// classifier.dense + out_proj on <s>, DistilBERT's pre_classifier, ...).
enum class TaskHead {
  SequenceClassification,  ///< BertForSequenceClassification: classifier(pooler_output), also cross-encoders
  TokenClassification,     ///< BertForTokenClassification: classifier(last_hidden_state) per token
  MaskedLM,                ///< BertForMaskedLM / BertForPreTraining: the prediction head over the vocabulary
  QuestionAnswering,       ///< BertForQuestionAnswering: qa_outputs(last_hidden_state) -> start, end logits
};
/// "sequence classification", "token classification", "masked language modelling (fill-mask)".
const char* task_head_name(TaskHead head);
/// The head of `model_dir`: from config.json "architectures", else from its tensors. Throws
/// tfm::FileNotFoundError for a missing folder, std::runtime_error for a missing or malformed config.json or
/// model.safetensors and when the folder has no task head ("... has no task head (architectures BertModel ...)").
TaskHead detect_task_head(const std::string& model_dir);

struct ClassifierOptions {
  /// OpenMP threads (kernels and oneDNN GEMMs) of each call, set on the calling thread (0 = the process default:
  /// OMP_NUM_THREADS, else all cores).
  int threads = 0;
  /// Compute type of the encoder body, as EncoderOptions::dtype: "fp32", "bf16", "int8", or "" (default: as the
  /// folder stores it, int8 for a `tfm convert --dtype int8` folder, else fp32). The head itself (classifier,
  /// masked-LM transform and decoder) computes in fp32. Any other value throws std::invalid_argument.
  std::string dtype;
};

struct ClassifyOptions {
  /// "" (default): the pipeline's choice (none for problem_type "regression", sigmoid for one label or multi-label
  /// problems, softmax otherwise; a cross-encoder's configured activation wins); "softmax", "sigmoid" or "none"
  /// (raw logits).
  std::string function;
  int64_t max_length = 0;   ///< truncate texts to this many tokens (0 = error when over max_position_embeddings)
  int64_t batch_size = 32;  ///< texts per forward pass
  /// Second texts of (text, text_pair) inputs, as the pipeline's {"text", "text_pair"} (BERT: [CLS] text [SEP]
  /// text_pair [SEP]): empty, or one per text ("" for a text without one). Truncation with max_length is
  /// longest_first.
  std::vector<std::string> text_pairs;
};

/// Zero-shot classification with an NLI head (ZeroShotClassificationPipeline).
struct ZeroShotOptions {
  std::string hypothesis_template = "This example is {}.";  ///< "{}" is replaced by each candidate label
  /// false: the labels' entailment logits softmaxed together (scores sum to 1); true: each label's entailment
  /// against contradiction on its own.
  bool multi_label = false;
  int64_t max_length = 0;   ///< truncate each (sequence, hypothesis) pair (longest_first; 0 = error when over)
  int64_t batch_size = 32;  ///< pairs per forward pass
};

/// One text's result: every label with its score, best first (ties keep the config.json order).
struct Classification {
  std::vector<std::string> labels;  ///< [num_labels], config.json id2label ("LABEL_i" where it has none)
  std::vector<float> scores;        ///< [num_labels], of the score function
  const std::string& label() const { return labels.front(); }  ///< the best label (`tfm classify`'s "label")
  float score() const { return scores.front(); }                ///< its score
};

struct RerankOptions {
  bool raw_scores = false;  ///< the logit (two labels: logit 1 - logit 0), no activation
  int64_t top_k = 0;        ///< keep the best top_k (0 = all); < 0 throws std::invalid_argument
  int64_t max_length = 0;   ///< truncate each (query, passage) pair to this many tokens, longest first (0 = error
                            ///< when a pair is over max_position_embeddings)
  int64_t batch_size = 32;  ///< pairs per forward pass
};

/// One passage of Classifier::rerank: its position in the input and its score.
struct RankedPassage {
  int64_t index = 0;
  float score = 0;
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
  /// Zero-shot classification of each sequence over `candidate_labels` (ZeroShotClassificationPipeline): each
  /// (sequence, hypothesis_template with the label) pair through the NLI head, scored by tfm::zero_shot_result
  /// with the entailment id of entailment_id(). Throws std::invalid_argument for no sequences or labels, an empty
  /// sequence or label, a template without "{}", pairs over max_position_embeddings without max_length;
  /// std::runtime_error when the head has fewer than 2 labels.
  std::vector<ZeroShotResult> zero_shot(const std::vector<std::string>& sequences,
                                        const std::vector<std::string>& candidate_labels,
                                        const ZeroShotOptions& options = {}) const;
  /// The entailment label's id (tfm::entailment_id of labels()): -1 when no label starts with "entail", and
  /// zero_shot() then takes the last label, as the pipeline does (after its warning).
  int64_t entailment_id() const;
  /// The head's logits [texts.size(), num_labels] float32 (same errors).
  FloatArray logits(const std::vector<std::string>& texts, const ClassifyOptions& options = {}) const;
  /// Logits of already tokenized inputs (tokenizer().encode() / encode_pair(); a pair is one input),
  /// [batch.size(), num_labels] float32, in one forward pass. Throws std::invalid_argument for an empty batch or
  /// input, or an input longer than max_position_embeddings().
  FloatArray logits(const std::vector<TextEncoding>& batch) const;
  /// Scores of one row of logits [num_labels] under `function` (ClassifyOptions::function: "" = the pipeline's
  /// default, "softmax", "sigmoid" or "none"), [num_labels] in label order. Throws std::invalid_argument for an
  /// unknown function.
  std::vector<float> scores(const float* logits, const std::string& function = "") const;
  /// A cross-encoder's relevance score of one (query, passage) pair from its logits [num_labels], as rerank(),
  /// sentence-transformers' CrossEncoder.rank and text-embeddings-inference's /rerank score it: one label, its
  /// activation (sigmoid unless config.json names another); two labels, the softmax probability of label 1. With
  /// raw_scores: the logit (two labels: logit 1 - logit 0). Throws std::runtime_error when the head has more than
  /// two labels (not a cross-encoder).
  float rerank_score(const float* logits, bool raw_scores = false) const;
  /// Ranks passages for a query with a cross-encoder, as sentence-transformers' CrossEncoder.rank and `tfm rerank`
  /// do: each (query, passage) pair scored (one label: its activation, sigmoid unless config.json names another;
  /// two labels: the softmax probability of label 1), best first (ties keep the input order). Throws
  /// std::invalid_argument for an empty query or passage list, an empty passage, invalid UTF-8, a pair over
  /// max_position_embeddings without max_length, top_k < 0, max_length in 1..2 or < 0, batch_size < 1;
  /// std::runtime_error when the head has more than two labels (not a cross-encoder).
  std::vector<RankedPassage> rerank(const std::string& query, const std::vector<std::string>& passages,
                                    const RerankOptions& options = {}) const;
  /// The folder's tokenizer (pairs: encode_pair; truncation at max_position_embeddings() is the caller's).
  const Tokenizer& tokenizer() const;
  int64_t max_position_embeddings() const;  ///< tokens an input may have (RoBERTa: max_position_embeddings - pad_token_id - 1)
  const std::string& dtype() const;          ///< the body's compute type: "fp32", "bf16" or "int8"

  const std::vector<std::string>& labels() const;  ///< id2label, [num_labels]
  int64_t num_labels() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TagOptions {
  std::string function = "softmax";  ///< "softmax", "sigmoid" or "none"
  bool all_tokens = false;           ///< keep every token (or group): ignore_labels empty
  /// The pipeline's aggregation_strategy: "none" (tokens), "simple", "first", "average" or "max" (entity groups).
  std::string aggregation_strategy = "none";
  /// Labels (none) or entity groups (other strategies) left out, the pipeline's default ["O"].
  std::vector<std::string> ignore_labels = {"O"};
};

/// Thread-safety: immutable after construction; tag() may be called from several threads.
class TokenClassifier {
 public:
  /// Throws as Classifier's constructor, std::runtime_error when the folder has no token classification head.
  explicit TokenClassifier(const std::string& model_dir, const ClassifierOptions& options = {});
  ~TokenClassifier();
  TokenClassifier(TokenClassifier&&) noexcept;
  TokenClassifier& operator=(TokenClassifier&&) noexcept;

  /// Per input (tokenizer().encode() of one text, offsets included) its tokens but the special ones, with their
  /// best label (aggregation "none"); one forward pass. An unknown-token piece keeps its vocabulary string (the
  /// overload with texts gives the text it stands for). Throws std::invalid_argument for an empty batch or input,
  /// an input longer than max_position_embeddings(), an unknown function, or another aggregation strategy.
  std::vector<std::vector<TokenTag>> tag(const std::vector<TextEncoding>& batch, const TagOptions& options = {}) const;
  /// The token-classification pipeline over `texts` and their encodings (batch[i] = tokenizer().encode(texts[i])):
  /// TokenClassificationPipeline.gather_pre_entities (an unknown-token piece takes the text it stands for; a
  /// piece is a subword when the tokenizer has a continuing_subword_prefix and the piece is longer or shorter than
  /// its text, else when no space precedes it), then tfm::aggregate_entities with options.aggregation_strategy
  /// and ignore_labels (none when all_tokens). Throws as tag(), and when the sizes differ.
  std::vector<std::vector<TokenTag>> tag(const std::vector<TextEncoding>& batch, const std::vector<std::string>& texts,
                                         const TagOptions& options = {}) const;

  const std::vector<std::string>& labels() const;  ///< id2label, [num_labels]
  const Tokenizer& tokenizer() const;
  int64_t max_position_embeddings() const;  ///< as Classifier::max_position_embeddings
  const std::string& dtype() const;          ///< the body's compute type

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Extractive question answering with a *ForQuestionAnswering head (BERT, RoBERTa / XLM-R, DistilBERT, MPNet):
/// transformers' QuestionAnsweringPipeline (4.54-4.57, a fast tokenizer, question first).
class QuestionAnswerer {
 public:
  /// Throws as Classifier's constructor, std::runtime_error when the folder has no question-answering head.
  explicit QuestionAnswerer(const std::string& model_dir, const ClassifierOptions& options = {});
  ~QuestionAnswerer();
  QuestionAnswerer(QuestionAnswerer&&) noexcept;
  QuestionAnswerer& operator=(QuestionAnswerer&&) noexcept;

  /// The answers to `question` in `context`, best first (at most options.top_k): the pipeline's preprocess (the
  /// question first, the context truncated only_second into windows of max_seq_length tokens overlapping by
  /// doc_stride, tokenizers' return_overflowing_tokens), one forward pass over the windows, then
  /// tfm::question_answering_result. Start / end are code points of `context`. Throws std::invalid_argument for an
  /// empty question or context ("question cannot be empty", as the pipeline's ValueError), bad options,
  /// doc_stride larger than max_seq_length, a max_seq_length over max_position_embeddings(), or a question that
  /// leaves no room for the context.
  std::vector<QaAnswer> answer(const std::string& question, const std::string& context,
                               const QuestionAnsweringOptions& options = {}) const;

  const Tokenizer& tokenizer() const;
  int64_t max_position_embeddings() const;  ///< as Classifier::max_position_embeddings
  const std::string& dtype() const;          ///< the body's compute type

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One candidate for a [MASK], as the fill-mask pipeline returns it.
struct MaskCandidate {
  float score = 0;        ///< softmax probability over the vocabulary
  int64_t token = 0;      ///< vocabulary id
  std::string token_str;  ///< tokenizer.decode([token]) (WordPiece: the token itself, "##" kept; byte-level BPE: " Paris")
  /// The input with this token in place of the [MASK], decoded as tokenizer.decode(skip_special_tokens=True)
  /// (clean_up_tokenization_spaces as tokenizer_config.json says, default true); for an input with several
  /// masks with skip_special_tokens=False, as the pipeline does, so the other [MASK] tokens stay.
  std::string sequence;
};

/// Thread-safety: immutable after construction; fill() may be called from several threads.
class MaskFiller {
 public:
  /// Throws as Classifier's constructor, std::runtime_error when the folder has no masked-LM head or its tokenizer
  /// no mask token (tokenizer_config.json / special_tokens_map.json "mask_token", else [MASK] or <mask>). The decoder is tied to the word embeddings when the file does not store it.
  explicit MaskFiller(const std::string& model_dir, const ClassifierOptions& options = {});
  ~MaskFiller();
  MaskFiller(MaskFiller&&) noexcept;
  MaskFiller& operator=(MaskFiller&&) noexcept;

  /// Per input (tokenizer().encode()), per [MASK] in it (left to right), the top_k candidates best first (ties:
  /// lower id first); top_k is capped at the vocabulary size. One forward pass. Throws std::invalid_argument for
  /// an empty batch or input, an input without a mask token ("input 0 has no [MASK] token", as the fill-mask
  /// pipeline raises), an input longer than max_position_embeddings() or top_k < 1.
  std::vector<std::vector<std::vector<MaskCandidate>>> fill(const std::vector<TextEncoding>& batch,
                                                            int64_t top_k = 5) const;

  /// SPLADE pooling of the masked-LM logits (text-embeddings-inference's /embed_sparse, sentence-transformers'
  /// SpladePooling with "max"): per input (tokenizer().encode()) and vocabulary id, the max over the input's tokens
  /// of log(1 + relu(logit)); [batch.size(), vocab_size()] float32, mostly zeros. One forward pass. Throws
  /// std::invalid_argument as fill() does.
  FloatArray sparse_embed(const std::vector<TextEncoding>& batch) const;
  int64_t vocab_size() const;
  int64_t mask_token_id() const;
  const std::string& mask_token() const;  ///< "[MASK]" (BERT, DistilBERT), "<mask>" (RoBERTa family), ...
  const Tokenizer& tokenizer() const;
  int64_t max_position_embeddings() const;  ///< as Classifier::max_position_embeddings
  const std::string& dtype() const;          ///< the body's compute type

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
