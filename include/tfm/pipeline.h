/// @file tfm/pipeline.h
/// What every face (the CLI, tfm serve, Python) does around a model call, written once: length-bucketed batching
/// under a token budget, Matryoshka dimensions, L2 normalisation, the compute type a folder stores,
/// and the rules on options that several faces take (dimensions, length_penalty, the tokenizer's vocabulary).
/// As text-embeddings-inference's core owns its post-processing, the faces parse and print only. Rerank scores are
/// tfm::Classifier::rerank_score (tfm/classifier.h).
#pragma once
#include <cstdint>
#include <functional>
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

// ------------------------------------------------------------------------------------------ text classification

/// One label with its score.
struct LabelScore {
  std::string label;
  float score = 0;
};

/// The text-classification pipeline's ranking (TextClassificationPipeline.postprocess with top_k given): every
/// label with its score (`labels[i]`, `scores[i]`), best first (ties keep the label order), the first `top_k`
/// (0 = all; more than the labels = all). Throws std::invalid_argument when the sizes differ or top_k < 0.
std::vector<LabelScore> rank_labels(const std::vector<std::string>& labels, const std::vector<float>& scores,
                                    int64_t top_k = 0);

// ------------------------------------------------------------------------------------------ zero-shot

/// Candidate labels given as one string, as the zero-shot pipeline's argument handler splits them: on ",", each
/// stripped of whitespace, empty ones dropped. Throws std::invalid_argument when none is left.
std::vector<std::string> split_candidate_labels(const std::string& labels);
/// `hypothesis_template` with its first "{}" replaced by `label` (Python's str.format of the pipeline). Throws
/// std::invalid_argument when the template has no "{}" (the pipeline's "The provided hypothesis_template ... was
/// not able to be formatted with the target labels").
std::string format_hypothesis(const std::string& hypothesis_template, const std::string& label);
/// The entailment label's id as ZeroShotClassificationPipeline.entailment_id finds it: the first label (by id)
/// whose lower-cased name starts with "entail"; -1 when none does (the pipeline then uses the last label).
int64_t entailment_id(const std::vector<std::string>& id2label);

/// One sequence's zero-shot answer, as the pipeline returns it: the candidate labels best first with their scores.
struct ZeroShotResult {
  std::string sequence;
  std::vector<std::string> labels;  ///< [candidate labels], best first
  std::vector<float> scores;        ///< [candidate labels], of `labels`
};
/// ZeroShotClassificationPipeline.postprocess over the NLI logits of (sequence, hypothesis of each label):
/// `logits` [candidate_labels.size(), num_labels] row-major. multi_label (or a single label): per label the softmax
/// of [contradiction, entailment] logits (contradiction = the last label when entailment is 0, else label 0),
/// its entailment probability; otherwise the softmax of the entailment logits over the labels. `entailment` as
/// entailment_id (-1 = the last label). Labels sorted by score, best first (ties keep the given order). Throws
/// std::invalid_argument for no labels or num_labels < 2.
ZeroShotResult zero_shot_result(const std::string& sequence, const std::vector<std::string>& candidate_labels,
                                const float* logits, int64_t num_labels, int64_t entailment, bool multi_label);

// ------------------------------------------------------------------------------------------ token classification

/// The token-classification pipeline's aggregation_strategy.
enum class AggregationStrategy {
  None,     ///< every token with its best label
  Simple,   ///< tokens grouped into entities by their B-/I- tags
  First,    ///< words (a token and its subword pieces) take the label of their first piece, then grouped
  Average,  ///< words take the best label of their pieces' mean scores, then grouped
  Max,      ///< words take the label of their most confident piece, then grouped
};
/// "none", "simple", "first", "average" or "max". Throws std::invalid_argument naming them for anything else.
AggregationStrategy parse_aggregation_strategy(const std::string& name);

/// One tagged token (aggregation none) or entity group (other strategies), as the token-classification pipeline
/// returns it.
struct TokenTag {
  std::string entity;  ///< the best label (id2label); for a group its entity_group: the label without "B-" / "I-"
  float score = 0;     ///< that label's score; for a group the mean of its words' scores
  int64_t index = 0;   ///< position of the token in the encoding ([CLS] = 0); -1 for a group (the pipeline has none)
  /// The vocabulary piece ("##" continues a word; an unknown-token piece: the text it stands for); for a group
  /// its pieces joined by the tokenizer's decoder (convert_tokens_to_string).
  std::string word;
  int64_t start = 0, end = 0;  ///< character (code point) offsets [start, end) in the text
  bool group() const { return index < 0; }
};

/// One non-special token with its label scores: the pipeline's gather_pre_entities entry.
struct TokenScores {
  std::string word;           ///< the vocabulary piece, or the text an unknown token stands for
  std::vector<float> scores;  ///< [num_labels] softmax probabilities
  int64_t index = 0;          ///< position in the encoding
  int64_t start = 0, end = 0;  ///< code point offsets in the text
  bool is_subword = false;    ///< continues the word of the token before it
};

/// TokenClassificationPipeline.aggregate + group_entities + the ignore_labels filter over one text's tokens:
/// `id2label` [num_labels]; `ignore_labels` compared with entity (none) or entity_group (others);
/// `tokens_to_string` joins pieces into a word (the tokenizer's convert_tokens_to_string).
std::vector<TokenTag> aggregate_entities(const std::vector<TokenScores>& tokens,
                                         const std::vector<std::string>& id2label, AggregationStrategy strategy,
                                         const std::vector<std::string>& ignore_labels,
                                         const std::function<std::string(const std::vector<std::string>&)>& tokens_to_string);

// ------------------------------------------------------------------------------------------ question answering

/// The question-answering pipeline's parameters (QuestionAnsweringPipeline._sanitize_parameters, transformers
/// 4.54-4.57).
struct QuestionAnsweringOptions {
  int64_t top_k = 1;              ///< answers returned (fewer when fewer exist); >= 1
  int64_t doc_stride = 0;         ///< tokens shared by consecutive windows; 0: min(max_seq_length / 2, 128)
  int64_t max_seq_length = 0;     ///< tokens of each window, question and special tokens included; 0: min(the
                                  ///< tokenizer's model_max_length, 384)
  int64_t max_answer_length = 15; ///< tokens of an answer at most; >= 1
  bool handle_impossible_answer = false;  ///< also rank the null answer {score, 0, 0, ""} (the [CLS] span)
  bool align_to_words = true;     ///< widen an answer to whole words (the pre-tokenizer's words) of its window
};
/// Throws std::invalid_argument naming the option when top_k or max_answer_length is < 1, or doc_stride or
/// max_seq_length is < 0.
void check_question_answering_options(const QuestionAnsweringOptions& options);

/// One answer, as the pipeline returns it.
struct QaAnswer {
  /// start * end probability of its span; spans of one lower-cased text (over every window) add up, so a score
  /// may exceed 1. The null answer: the smallest [CLS] start * end probability over the windows.
  double score = 0;
  int64_t start = 0, end = 0;  ///< code point offsets [start, end) in the context
  std::string answer;          ///< context[start:end]
};

/// One window of (question, context part) as the model saw it.
struct QaWindow {
  std::vector<float> start_logits, end_logits;  ///< [L] the head's logits
  /// [L] 1 where a token may bound an answer, the pipeline's p_mask == 0 (and attention 1): the context's tokens
  /// and the [CLS] token(s); 0 for the question, separators and padding.
  std::vector<uint8_t> candidate;
  std::vector<int> sequence_ids;                        ///< [L] 1 = a context token
  std::vector<int64_t> words;                           ///< [L] word of each token in its text, -1 = special
  std::vector<std::pair<int64_t, int64_t>> offsets;     ///< [L] code points of the token in its text
};

/// QuestionAnsweringPipeline.postprocess over the windows of one (question, context): per window
/// select_starts_ends (logits outside `candidate` set to -10000, softmax, the null score start[0] * end[0]
/// recorded, position 0 zeroed) and decode_spans (the start * end probabilities of spans s <= e < s +
/// max_answer_length, the best top_k * 2 + 10 (top_k without align_to_words), both ends candidates); each span's
/// characters (align_to_words: from the start of the word of its first token to the end of the word of its last,
/// within the window; else the tokens' offsets); an answer whose text equals an earlier one's lower-cased takes
/// its score added to it; the null answer when handle_impossible_answer; all sorted by score (stable), the first
/// top_k. Spans of probability 0 are never answers (the pipeline may return such score-0 spans, in an
/// unspecified order, when a window has fewer positive spans than it looks at). Throws std::invalid_argument
/// for no windows, a window whose vectors differ in length, or bad options.
std::vector<QaAnswer> question_answering_result(const std::string& context, const std::vector<QaWindow>& windows,
                                                const QuestionAnsweringOptions& options);

/// A folder's tokenizer must not produce ids outside the model's embedding table. Throws std::runtime_error
/// "<where>: tokenizer vocabulary (N tokens) is larger than config.json vocab_size (M)" when it would.
void check_tokenizer_vocab(const std::string& where, int64_t tokenizer_vocab_size, int64_t config_vocab_size);

}  // namespace tfm
