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
#include <utility>
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

// ------------------------------------------------------------------------------------------ embedding quantisation

/// sentence-transformers' `precision` of encode() / quantize_embeddings (sentence_transformers/quantization.py).
enum class EmbeddingPrecision {
  Float32,  ///< the embeddings as they are
  Int8,     ///< per dimension: trunc((x - min) / ((max - min) / 255) - 128) as int8
  Uint8,    ///< per dimension: trunc((x - min) / ((max - min) / 255)) as uint8
  Binary,   ///< packed sign bits (np.packbits(x > 0)) - 128 as int8: D / 8 values a row
  Ubinary,  ///< packed sign bits as uint8 (np.packbits(x > 0)): D / 8 values a row
};
/// "float32", "int8", "uint8", "binary" or "ubinary". Throws std::invalid_argument naming them for anything else.
EmbeddingPrecision parse_precision(const std::string& name);
const char* precision_name(EmbeddingPrecision precision);
/// True for int8 and uint8 (they need ranges).
bool precision_needs_ranges(EmbeddingPrecision precision);
/// Values per row of a quantised embedding of `dim` values: dim, or ceil(dim / 8) packed bytes for (u)binary.
int64_t quantized_dim(EmbeddingPrecision precision, int64_t dim);

/// The ranges quantize_embeddings computes from calibration embeddings (or, without them, from the embeddings
/// themselves): [2, D] row-major, the minimum of each dimension over the rows, then the maximum (np.vstack((
/// np.min(e, axis=0), np.max(e, axis=0)))). `embeddings` [rows, D] float32. Throws std::invalid_argument for no rows
/// or D < 1.
std::vector<float> embedding_ranges(const float* embeddings, int64_t rows, int64_t dim);

/// One embedding quantised as quantize_embeddings does it in float32 on x86-64, written to `out`
/// (quantized_dim(precision, dim) bytes; int8 values as two's complement). `ranges` [2, D] (embedding_ranges) for
/// int8 / uint8, unused otherwise. int8 / uint8: step = (max - min) / 255, q = (x - min) / step (int8: q - 128),
/// then numpy's cast: truncation towards zero to a 32-bit integer, its low byte; so a value outside the ranges
/// wraps around (300 -> 44) and NaN, infinities and a zero step (a dimension constant over the calibration rows)
/// give 0, as numpy does (quantize_embeddings does not clip). (u)binary: bit 7 - (k % 8) of byte k / 8 is x[k] > 0
/// (np.packbits, big bit order); a row of D not a multiple of 8 is padded with 0 bits (np.packbits(axis=-1); for
/// such D quantize_embeddings itself packs the flattened array across rows). float32 copies the 4-byte values.
/// Returns how many values fell outside [0, 255] before the cast (int8 / uint8: wrapped or NaN; else 0).
int64_t quantize_embedding(const float* embedding, int64_t dim, EmbeddingPrecision precision, const float* ranges,
                           uint8_t* out);

/// Embeddings at a precision: `values` row-major [rows, quantized_dim] of `precision`'s element type (float32: 4
/// bytes each, little-endian; else one byte each, int8 as two's complement).
struct QuantizedEmbeddings {
  EmbeddingPrecision precision = EmbeddingPrecision::Float32;
  int64_t rows = 0, dim = 0;    ///< dim: quantized_dim(precision, D)
  std::vector<uint8_t> values;  ///< [rows, dim] elements
  int64_t out_of_range = 0;     ///< int8 / uint8: values that wrapped (see quantize_embedding)
  /// The .npy descr of the element type: "<f4", "|i1" (int8, binary) or "|u1" (uint8, ubinary).
  const char* npy_descr() const;
  /// Element (r, k) as a number (float32 value, or the int8 / uint8 integer).
  double at(int64_t r, int64_t k) const;
};
/// sentence_transformers.quantization.quantize_embeddings(embeddings, precision, ranges): `embeddings` [rows, D]
/// float32; `ranges` [2, D] (embedding_ranges of calibration embeddings) or empty: for int8 / uint8 the ranges of
/// `embeddings` themselves (as quantize_embeddings without ranges or calibration_embeddings). Throws
/// std::invalid_argument for ranges of another size, no rows for int8 / uint8 without ranges, or D < 1.
QuantizedEmbeddings quantize_embeddings(const float* embeddings, int64_t rows, int64_t dim,
                                        EmbeddingPrecision precision, const std::vector<float>& ranges = {});

// ------------------------------------------------------------------------------------------ semantic search

/// One hit of a search: the corpus row and its score (cosine, rescored dot product; or with a Hamming search
/// without rescoring, the Hamming distance, lower = closer).
struct SearchHit {
  int64_t corpus_id = 0;
  double score = 0;
};

/// How semantic_search scores a corpus at each precision (sentence-transformers' semantic_search for float32,
/// semantic_search_faiss / semantic_search_usearch with exact indexes for quantised corpora).
struct SearchOptions {
  int64_t top_k = 10;  ///< hits per query (fewer when the corpus is smaller); >= 1
  /// Binary / ubinary corpus: the Hamming search keeps top_k * rescore_multiplier candidates, then rescores them
  /// (semantic_search_faiss / usearch's `rescore_multiplier`); >= 1.
  int64_t rescore_multiplier = 2;
  /// Binary / ubinary corpus: false = no rescoring (hits by Hamming distance, the score the distance).
  bool rescore = true;
  /// Binary / ubinary corpus: the int8 / uint8 embeddings of the same corpus (quantize_embeddings of the same
  /// float rows): the candidates are rescored by query . int8 row (the int8 rescoring of sentence-transformers'
  /// embedding-quantization retrieval demo) instead of query . unpackbits(row) (semantic_search_faiss). Null: the
  /// bits.
  const QuantizedEmbeddings* rescore_embeddings = nullptr;
};

/// Exact top-k search of float32 `queries` [Q, D] over `corpus` [N, D or D / 8] at its precision, best first,
/// ties by the lower corpus id:
/// - float32: cosine similarity (sentence_transformers.util.semantic_search);
/// - int8 / uint8: the dot product of the float query with the integer row (quantised rows scored as
///   semantic_search_faiss / usearch rescore them);
/// - binary / ubinary: the query's sign bits (packbits(q > 0)) against the rows by Hamming distance, the
///   top_k * rescore_multiplier closest (ties by corpus id), then rescored by the float query's dot product with
///   the unpacked bits (0 / 1) or with options.rescore_embeddings' rows, and cut to top_k; without rescoring the
///   top_k closest by distance.
/// Throws std::invalid_argument for a dimension mismatch (naming both), top_k or rescore_multiplier < 1, or
/// rescore_embeddings that are not int8 / uint8 rows of the corpus's length.
std::vector<std::vector<SearchHit>> semantic_search(const float* queries, int64_t num_queries, int64_t dim,
                                                    const QuantizedEmbeddings& corpus, const SearchOptions& options);

// ------------------------------------------------------------------------------------------ long inputs

/// `tfm embed --chunk`: the windows a long text's content tokens (special tokens and a prompt excluded) are cut
/// into, as Hugging Face tokenizers' truncation with return_overflowing_tokens and `stride` cuts them: [start, end)
/// offsets, the first starting at 0, each `content` tokens long (the last one what is left), each next one starting
/// `stride` tokens before the previous one ends (content - stride after its start), the last one the first that
/// reaches the end; one window [0, tokens) when the text fits. Throws std::invalid_argument unless
/// 0 <= stride < content, or for tokens < 0.
std::vector<std::pair<int64_t, int64_t>> chunk_windows(int64_t tokens, int64_t content, int64_t stride);

/// A document's embedding from its windows' embeddings `windows` [n, D] (each as embed() gives it): their
/// element-wise mean (`max` false) or maximum, then L2-normalised when `normalize` (a pipeline that ends in
/// Normalize keeps unit vectors). Written to `out` [D]. Throws std::invalid_argument for n < 1.
void pool_windows(const float* windows, int64_t n, int64_t dim, bool max, bool normalize, float* out);

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
