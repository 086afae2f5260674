// Request bodies of `tfm serve`, parsed and validated before anything reaches the model. Field names and
// shapes follow the APIs existing clients speak: text-embeddings-inference (/embed, /embed_all, /tokenize),
// OpenAI (/v1/embeddings) and LibreTranslate (/translate).
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

struct RequestLimits {
  int64_t max_client_batch_size = 32;  // inputs per request; more -> 413
  int64_t max_input_chars = 1 << 20;   // characters per input string; more -> 413
};

// /embed, /embed_all ("inputs"), /v1/embeddings ("input").
struct EmbedRequest {
  std::vector<std::string> inputs;
  bool single = false;             // "inputs" was a string, not a list
  bool normalize = true;           // L2-normalise the pooled vector (TEI default)
  std::optional<bool> truncate;    // unset: the server's --auto-truncate
  std::string model;               // /v1/embeddings "model" (echoed back)
};
// Throws ApiError: 422 on malformed JSON, a missing or mistyped field, an empty list or an empty string;
// 413 when the list is longer than max_client_batch_size or a string longer than max_input_chars.
// `field` is "inputs" (TEI) or "input" (OpenAI; then "encoding_format" must be absent or "float").
EmbedRequest parse_embed_request(std::string_view body, const RequestLimits& limits, const char* field = "inputs");

// /tokenize: "inputs" string or list, "add_special_tokens" (default true).
struct TokenizeRequest {
  std::vector<std::string> inputs;
  bool single = false;
  bool add_special_tokens = true;
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
// "format" ("text" only). JSON bodies only (Content-Type application/json or none).
struct TranslateRequest {
  std::vector<std::string> q;
  bool single = false;
  std::string source, target;
  int64_t beam_size = 0;  // 0 (not given): the model's default (generation_config.json's num_beams, or greedy)
  std::optional<bool> truncate;  // unset: the server's --auto-truncate
};
TranslateRequest parse_translate_request(std::string_view body, const RequestLimits& limits, int64_t max_beam_size);

// text-embeddings-inference /predict: "inputs" is a string (one text), a list of two strings (one (text, text_pair)
// pair, as TEI reads it), a list of other length of strings (a batch of texts), or a list of lists of one or two
// strings (a batch of texts / pairs); "raw_scores" (default false: the head's activation), "truncate".
struct PredictRequest {
  std::vector<std::string> texts, pairs;  // pairs empty, or [texts.size()] with "" for a text without a pair
  bool single = false;                    // answer one list of {score, label}, not a list of lists
  bool raw_scores = false;
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
RerankRequest parse_rerank_request(std::string_view body, const RequestLimits& limits);

// /attention (web page): {"q": string, "source"?: string}.
std::string parse_attention_request(std::string_view body, const RequestLimits& limits);

}  // namespace tfm::serve
