// `tfm serve`: HTTP routes over one batching queue in front of an embedding or translation model.
// Encoders answer text-embeddings-inference's /embed, /embed_all, /tokenize and OpenAI's /v1/embeddings (with a
// sentence-transformers folder's pipeline when it has modules.json), and /predict and /rerank when the folder
// holds a BertForSequenceClassification head (classifier or cross-encoder);
// and /similarity, /embed_sparse (SPLADE) when the folder holds a BertForMaskedLM head;
// transformer_seq2seq models answer LibreTranslate's /translate (JSON or form bodies) and /languages. Every server
// answers /, /info, /health, /metrics and /openapi.json (the routes, OpenAPI 3). Each request field is honoured or
// refused with 422 (serve/requests.h). Errors are {"error": message, "error_type": type} (/v1/embeddings: OpenAI's
// {"error": {"message", "type", "param", "code"}}); a wrong method on a route is 405 with Allow.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfm::serve {

struct ServeOptions {
  std::string model;                 // model folder
  // Translation: more model folders (tfm serve --model en-fr/ --model fr-en/): /translate routes by source and
  // target as LibreTranslate does; each folder's languages come from its config.json (source_lang, target_lang),
  // else from a folder name ending in "-SRC-TGT" (opus-mt-en-fr, en-fr).
  std::vector<std::string> extra_models;
  std::string host = "127.0.0.1";    // loopback unless told otherwise
  int port = 8080;                   // 0: any free port (printed at start)
  int64_t max_batch_tokens = 16384;  // padded tokens per model batch (inputs x longest input)
  int64_t max_concurrent_requests = 128;  // model requests in flight; more -> 429
  int64_t max_client_batch_size = 32;     // inputs per request; more -> 413
  int64_t payload_limit = 2000000;        // request body bytes; more -> 413
  bool auto_truncate = false;             // cut over-long inputs instead of answering 422
  std::string api_key;                    // non-empty: every route but / and /health needs Authorization: Bearer KEY
  std::string pooling;                    // encoders: tfm::EmbedOptions::pooling's modes ("": mean, or a
                                          // sentence-transformers folder's own Pooling module)
  std::string prompt_name;                // sentence-transformers folders: prompt (default: the folder's default)
  bool no_prompt = false;                 // sentence-transformers folders: ignore default_prompt_name
  int64_t max_beam_size = 8;              // translation: largest accepted beam_size
  std::string source_lang, target_lang;   // translation: language codes (default: config.json or "en" / "fr")
  std::string langid;                     // translation: a `tfm langid train` file for /detect and source "auto"
  std::string cors_allow_origin;          // non-empty: Access-Control-Allow-Origin on every answer ("*" or an
                                          // origin such as https://example.com), and CORS preflights answered
  bool access_log = true;                 // one line per request on stderr
  int threads = 0;                        // OpenMP threads of the model thread (0: OMP_NUM_THREADS, else all cores)
  std::string dtype;                      // encoders: compute type of the Linear layers, "fp32" / "bf16" / "int8"
                                          // ("": as the folder stores it, int8 after `tfm convert --dtype int8`)
};

// Binds the socket, loads the model in the background (/health answers 503 until it is ready), serves until
// SIGTERM or SIGINT, then stops accepting, finishes the requests in flight and returns 0. Prints
// "bound to http://HOST:PORT; loading ..." to stderr once the socket is bound, and "listening on
// http://HOST:PORT" once the model is loaded and the options are checked against it (never when it then fails).
// Throws std::runtime_error when the folder is not a model folder, the address cannot be bound, an option does not
// fit the model (--max-batch-tokens below its input limit), or the model fails to load.
int run_server(const ServeOptions& options);

}  // namespace tfm::serve
