// Request bodies of `tfm serve`, parsed and validated before anything reaches the model. Field names and
// shapes follow the APIs existing clients speak: text-embeddings-inference (/embed, /embed_all, /tokenize),
// OpenAI (/v1/embeddings) and LibreTranslate (/translate).
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tfm/pipeline.h"

namespace tfm::serve {

// An HTTP error answered as {"error": message, "error_type": type}.
struct ApiError : std::runtime_error {
  int status;
  std::string type;
  ApiError(int status_, std::string type_, const std::string& message)
      : std::runtime_error(message), status(status_), type(std::move(type_)) {}
};

// 422 "validation" (bad field), 413 "payload_too_large" (more inputs than the limit).
ApiError validation_error(const std::string& message);

// Fields of the requests parsed on this thread that their route does not take ("parameters.x" inside a Hugging
// Face `parameters` object): ignored, as text-embeddings-inference and LibreTranslate ignore them; the server
// clears the list before each request and names them in a Warning header and its access log.
std::vector<std::string>& ignored_fields();

// JSON nesting ([ and { outside strings) deeper than kMaxJsonDepth: a request is refused with a 422 before it is
// parsed, since parsing and walking a 200,000-deep body overflowed a server thread's stack.
constexpr int kMaxJsonDepth = 64;
// Throws ApiError 422 (validation) when `body` nests deeper than kMaxJsonDepth.
void check_json_depth(std::string_view body);

// A request value as error messages quote it: the value itself when it has at most 80 bytes, else its first 80
// bytes (cut back to a whole UTF-8 character) + "... (N more bytes)", so that an error answer stays short
// whatever the request held.
std::string excerpt(std::string_view value);

struct RequestLimits {
  int64_t max_client_batch_size = 32;  // inputs per request; more -> 413
  int64_t max_input_chars = 1 << 20;   // characters per input string; more -> 413
};

// Which route an embedding request is for: the fields each takes (any other is ignored: ignored_fields). /embed,
// /embed_all and /embed_sparse also take them in the Hugging Face Inference API's shape, {"inputs", "parameters":
// {...}} (a field given both ways with different values is 422).
enum class EmbedRoute {
  Embed,       // TEI /embed: inputs, normalize, truncate, truncation_direction, prompt_name, dimensions (+ our
               // precision, ranges)
  EmbedAll,    // TEI /embed_all: inputs, truncate, truncation_direction, prompt_name
  EmbedSparse, // TEI /embed_sparse: inputs, truncate, truncation_direction, prompt_name
  OpenAI,      // OpenAI /v1/embeddings: input, model, user, encoding_format, dimensions (+ TEI's truncate,
               // truncation_direction, prompt_name; our precision, ranges)
};

// /embed, /embed_all, /embed_sparse ("inputs"), /v1/embeddings ("input"). An input is a string or, as TEI and
// OpenAI accept, a list of token ids (used as given: special tokens are not added).
struct EmbedRequest {
  std::vector<std::string> inputs;                 // "" where the input is token ids
  std::vector<std::vector<int64_t>> token_ids;     // [inputs.size()], empty where the input is a string
  bool single = false;             // "inputs" was one input (a string or one list of ids), not a list of them
  bool normalize = true;           // L2-normalise the pooled vector (TEI default; OpenAI: always)
  std::optional<bool> truncate;    // unset: the server's --auto-truncate
  bool truncate_left = false;      // "truncation_direction": "Left" (TEI; default "Right")
  std::optional<std::string> prompt_name;  // sentence-transformers prompt; unset: the server's
  int64_t dimensions = 0;          // Matryoshka: keep this many values, then normalise (0: all)
  bool base64 = false;             // OpenAI "encoding_format": "base64" (little-endian float32, or the bytes of
                                   // a quantised precision)
  // /embed, /v1/embeddings: sentence-transformers' precision (quantize_embeddings), a field of our own: "float32"
  // (default), "int8", "uint8" (per-dimension ranges from `ranges` [2, D] or else the request's embeddings),
  // "binary", "ubinary" (packed sign bits, D / 8 integers).
  EmbeddingPrecision precision = EmbeddingPrecision::Float32;
  std::vector<float> ranges;       // "ranges": [[min of each dimension], [max of each]] (int8 / uint8), or empty
  std::string model;               // /v1/embeddings "model" (echoed back)
  bool has_token_ids() const {
    for (const auto& t : token_ids)
      if (!t.empty()) return true;
    return false;
  }
};
// Throws ApiError: 422 on malformed JSON, a missing or mistyped field, an empty list, an empty string or
// list of ids, a negative id; 413 when the list is longer than max_client_batch_size or a string longer than
// max_input_chars.
EmbedRequest parse_embed_request(std::string_view body, const RequestLimits& limits, EmbedRoute route);

// TEI /similarity: {"inputs": {"source_sentence": str, "sentences": [str]}, "parameters"?: {"truncate",
// "truncation_direction", "prompt_name"}} -> the cosine similarity of each sentence's embedding to the source's.
struct SimilarityRequest {
  std::string source_sentence;
  std::vector<std::string> sentences;
  std::optional<bool> truncate;
  bool truncate_left = false;
  std::optional<std::string> prompt_name;
};
SimilarityRequest parse_similarity_request(std::string_view body, const RequestLimits& limits);

// /tokenize: "inputs" string or list, "add_special_tokens" (default true), "prompt_name" (TEI).
struct TokenizeRequest {
  std::vector<std::string> inputs;
  bool single = false;
  bool add_special_tokens = true;
  std::optional<std::string> prompt_name;
};
TokenizeRequest parse_tokenize_request(std::string_view body, const RequestLimits& limits);

// text-embeddings-inference /decode: "ids" (a list of ids, or a list of lists), "skip_special_tokens" (true).
struct DecodeRequest {
  std::vector<std::vector<int64_t>> ids;
  bool single = false;
  bool skip_special_tokens = true;
};
DecodeRequest parse_decode_request(std::string_view body, const RequestLimits& limits);

// LibreTranslate /translate: "q" string or list, "source", "target", optional "beam_size" (1..max_beam_size),
// "format" ("text" only), "alternatives" (0..max_beam_size - 1: the beam's next best hypotheses after the
// translation, num_return_sequences = alternatives + 1, the beam at least that wide), "api_key" (the server's key
// when it has one). A JSON object, or the same fields as a form (application/x-www-form-urlencoded or
// multipart/form-data) turned into one by form_to_json; a body that starts with '{' is JSON whatever its
// Content-Type (`curl -d '{...}'` labels it a form), as for every route.
struct TranslateRequest {
  std::vector<std::string> q;
  bool single = false;
  std::string source, target;
  std::string format = "text";  // LibreTranslate's "text" or "html" (tags kept, the text between them translated)
  int64_t beam_size = 0;  // 0 (not given): the model's default (generation_config.json's num_beams, or greedy)
  int64_t alternatives = 0;
  std::string api_key;
  std::optional<bool> truncate;  // unset: the server's --auto-truncate
  // Generation fields (CTranslate2 / Hugging Face names, as tfm::TranslateOptions): "sampling_topk",
  // "sampling_topp", "sampling_temperature", "seed", "seed_per_sentence", "repetition_penalty",
  // "no_repeat_ngram_size", "min_length",
  // "target_prefix" (a string for every q, or a list aligned with q), "length_penalty", "early_stopping" (true,
  // false or "never"), "forced_eos" (true / false), "max_new_tokens" (tfm::TranslateOptions::max_steps), "bad_words" (target texts) and
  // "bad_words_ids" (lists of target ids). `generation` is true when any is given.
  bool generation = false;
  int64_t sampling_topk = 1, no_repeat_ngram_size = 0, min_length = 0, max_new_tokens = 0;
  double sampling_topp = 1, sampling_temperature = 1, repetition_penalty = 1;
  double length_penalty = NAN;  // NaN: the model's
  std::string early_stopping;   // "" (the model's), "true", "false", "never"
  int forced_eos = -1;          // "forced_eos": -1 (the model's), 0 (false), 1 (true)
  std::vector<std::string> bad_words;
  std::vector<std::vector<int64_t>> bad_words_ids;
  uint64_t seed = 0;
  bool seed_per_sentence = false;  // TranslateOptions::seed_per_sentence
  std::vector<std::string> target_prefix;  // empty or [q.size()]
};
// A form's fields as a JSON object: numbers ("beam_size", "alternatives") as numbers, "truncate" as a boolean,
// everything else as strings; a field given twice is a list of its values ("q").
std::string form_to_json(const std::vector<std::pair<std::string, std::string>>& fields);
TranslateRequest parse_translate_request(std::string_view body, const RequestLimits& limits, int64_t max_beam_size);

// text-embeddings-inference /predict: "inputs" is a string (one text), a list of two strings (one (text, text_pair)
// pair, as TEI reads it), a list of other length of strings (a batch of texts), or a list of lists of one or two
// strings (a batch of texts / pairs); "raw_scores" (default false: the head's activation), "truncate".
// Also the Hugging Face Inference API's text-classification shape: {"inputs", "parameters": {"top_k",
// "function_to_apply", "truncate", ...}}.
struct PredictRequest {
  std::vector<std::string> texts, pairs;  // pairs empty, or [texts.size()] with "" for a text without a pair
  bool single = false;                    // answer one list of {score, label}, not a list of lists
  bool raw_scores = false;
  std::string function;                   // "function_to_apply": "sigmoid", "softmax", "none" ("" the head's own;
                                          // raw_scores: "none")
  int64_t top_k = 0;                      // the best top_k labels of each input (0: all)
  bool hf_inference = false;              // sent with `parameters`: answered as the Inference API does, a list
                                          // of labels per input even for one input
  std::optional<bool> truncate;
};
PredictRequest parse_predict_request(std::string_view body, const RequestLimits& limits);

// text-embeddings-inference /rerank: "query", "texts" (non-empty list), "raw_scores", "return_text", "truncate".
struct RerankRequest {
  std::string query;
  std::vector<std::string> texts;
  bool raw_scores = false, return_text = false;
  std::optional<bool> truncate;
};
// Zero-shot classification, the Hugging Face Inference API's shape: {"inputs": text or [texts], "parameters":
// {"candidate_labels": [labels] or "a, b", "multi_label", "hypothesis_template"}} (the parameters also accepted at
// the top level), "truncate".
struct ZeroShotRequest {
  std::vector<std::string> texts;
  bool single = false;  // `inputs` was one string: answer one object
  std::vector<std::string> candidate_labels;
  std::string hypothesis_template = "This example is {}.";
  bool multi_label = false;
  std::optional<bool> truncate;
};
ZeroShotRequest parse_zero_shot_request(std::string_view body, const RequestLimits& limits);
// Whether a /predict body asks for zero-shot classification (a candidate_labels field or parameter).
bool asks_zero_shot(std::string_view body);

// Extractive question answering, the Hugging Face Inference API's shape: {"inputs": {"question", "context"} or a list
// of them, "parameters": {"top_k", "doc_stride", "max_answer_len", "max_seq_len", "handle_impossible_answer",
// "align_to_words"}} (the parameters also accepted at the top level; max_question_len and padding, which only the
// pipeline's slow-tokenizer path reads, are ignored).
struct QuestionAnsweringRequest {
  std::vector<std::pair<std::string, std::string>> inputs;  // (question, context)
  bool single = false;  // `inputs` was one object: answer its answer(s) alone
  QuestionAnsweringOptions options;
};
QuestionAnsweringRequest parse_question_answering_request(std::string_view body, const RequestLimits& limits);

// Token classification and fill-mask at /predict, the Hugging Face Inference API's shapes: {"inputs": text or
// [texts], "parameters": {"aggregation_strategy", "ignore_labels"}} / {"inputs", "parameters": {"top_k"}}.
struct TaskInputsRequest {
  std::vector<std::string> texts;
  bool single = false;
  std::string aggregation_strategy = "none";
  std::optional<std::vector<std::string>> ignore_labels;
  int64_t top_k = 5;
  std::optional<bool> truncate;
};
TaskInputsRequest parse_token_classification_request(std::string_view body, const RequestLimits& limits);
TaskInputsRequest parse_fill_mask_request(std::string_view body, const RequestLimits& limits);

RerankRequest parse_rerank_request(std::string_view body, const RequestLimits& limits);

// /attention (web page): {"q": string, "beam_size"?: 1..max_beam_size} ("source" and "target" taken, unused).
struct AttentionRequest {
  std::string q;
  int64_t beam_size = 0;  // 0: the model's default, as /translate
};
AttentionRequest parse_attention_request(std::string_view body, const RequestLimits& limits, int64_t max_beam_size);

}  // namespace tfm::serve

