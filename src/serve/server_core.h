// The server behind run_server: the loaded model(s), the batching queue, the request guard and the route table.
// Routes come in groups, one file each (routes_meta.cpp, routes_embed.cpp, routes_classify.cpp,
// routes_translate.cpp); a group is a member function that registers its routes with add() and is listed in
// Server::kRouteGroups. Every group is registered on every server: a group that does not apply to the model
// answers its paths with 404 saying what they need (not_for_this_model).
#pragma once
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "serve/backends.h"
#include "serve/batch_queue.h"
#include "serve/html_text.h"
#include "serve/http_util.h"
#include "serve/metrics.h"
#include "serve/requests.h"
#include "serve/server.h"
#include "tfm/classifier.h"
#include "tfm/language_id.h"

namespace tfm::serve {

// English names of ISO 639-1 codes, as LibreTranslate's /languages gives them (routes_translate.cpp); other codes
// as they are.
std::string language_name(const std::string& code);

class Server {
 public:
  explicit Server(const ServeOptions& o);
  int run();

 private:
  using json = nlohmann::json;
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  // server.cpp: loading, batches, the guard every model route runs behind.
  void load();
  // Loaded weights are multiplied where they lie on their first use and packed on the second (load once, run
  // once: a one-sentence `tfm encode` never packs). A server packs them before it reports ready, by running each
  // encoder twice on a short input, so that its first requests take no longer than the rest.
  void warm_up();
  // Runs on the queue's worker thread: the only thread that touches the model.
  void run_batch(std::vector<Task*>& batch);
  // The request's connection check for the batching queue: a request whose client has disconnected is dropped
  // before its batch runs (serve/connection.h).
  static std::function<bool()> client_gone(const httplib::Request& req);

  // Where a request's time went, for its access-log line; per connection thread, reset as each request starts.
  // Negative: the request had no such stage.
  struct StageTimes {
    double tokenize_s = -1, queue_s = -1, inference_s = -1;
    std::chrono::steady_clock::time_point ran;  // when its last batch finished
  };
  static StageTimes& stage_times();
  static std::chrono::steady_clock::time_point& request_start();
  void observe_tokenization(double seconds);
  // Runs a request's tasks through the queue (BatchQueue::run), noting its queue and model time.
  void run_queued(std::vector<Task>& tasks, const httplib::Request& req);

  // Wraps a handler: API key, readiness, the concurrency limit, errors as JSON.
  httplib::Server::Handler guard(Handler h, bool model_route);
  bool authorized(const httplib::Request& req) const;
  // Names the request's ignored fields (serve/requests.h ignored_fields) in a Warning header.
  static void warn_ignored(httplib::Response& res);

  // The batch-key slot of a prompt name ("" = the server's own prompt: slot 0).
  int64_t prompt_slot(const std::string& name);
  std::string prompt_of_slot(int64_t slot);

  // Every route this server answers: path -> methods (405 with Allow for another method; /openapi.json).
  struct RouteDoc {
    std::string summary;
    bool has_body = false;
  };
  std::map<std::string, std::map<std::string, RouteDoc>> route_table_;
  std::map<std::string, httplib::Server::Handler> handlers_;  // "METHOD path" -> the handler add() registered
  void add(const std::string& method, const std::string& path, const std::string& summary,
           httplib::Server::Handler h);
  // POST `path` answered 404: it needs `needs`, which this server's model is not.
  void not_for_this_model(const std::string& path, const std::string& needs);
  std::string allow_header(const std::string& path) const;
  // The route_table_ entry answering `path` ("/v1/models/{model}" for /v1/models/x), "" when none.
  std::string route_of(const std::string& path) const;

  // Registers the hooks (CORS, OPTIONS, errors, access log) and every route group.
  void routes();
  // The route groups, in registration order. Adding a group: its file, its declaration here, its entry here.
  void meta_routes();       // routes_meta.cpp: /, /health, /metrics, /info, /openapi.json, /v1/models; hooks
  void embed_routes();      // routes_embed.cpp: /embed, /embed_all, /v1/embeddings, /similarity, /embed_sparse,
                            // /tokenize, /decode
  void classify_routes();   // routes_classify.cpp: /predict, /rerank, /zero-shot-classification,
                            // /question-answering
  void translate_routes();  // routes_translate.cpp: /translate, /attention, /languages
  void libretranslate_routes();  // routes_libretranslate.cpp: /detect, /frontend/settings, /translate_file,
                                 // /download_file/NAME, /suggest
  static constexpr void (Server::*kRouteGroups[])() = {&Server::meta_routes, &Server::embed_routes,
                                                       &Server::classify_routes, &Server::translate_routes,
                                                       &Server::libretranslate_routes};

  // routes_meta.cpp
  void hooks();  // pre-routing, CORS, OPTIONS, error handler, access log
  json openapi() const;  // OpenAPI 3.0 description of route_table_
  // The route answering POST / and /invocations (as text-embeddings-inference routes them): the model's task.
  std::string task_route() const;
  json info() const;

  // routes_embed.cpp
  // Cuts `t` to `limit` tokens from the left, as tokenizers' TruncationDirection::Left: the leading and trailing
  // special tokens stay, the text's first tokens go.
  static void truncate_left(TokenizedInput& t, int64_t limit);
  // Tokenizes every input for the encoder (token-id inputs used as given), 422 over the limit unless truncating
  // (from the right, or the left with truncation_direction Left). `limit`: 0 = the server's max input length.
  std::vector<Task> embed_tasks(const EmbedRequest& r, BatchKey::Op op, const char* field, int64_t vocab_size,
                                int64_t limit = 0,
                                const std::function<TokenizedInput(const std::string&, int64_t)>& tokenize = {});
  std::vector<Task> embed_tasks(const EmbedRequest& r, BatchKey::Op op, const char* field);
  // A pooled vector as the request asks: the first `dimensions` values (Matryoshka, as sentence-transformers'
  // truncate_dim), then L2-normalised when `normalize`.
  static std::vector<float> finish(std::vector<float> v, int64_t dimensions, bool normalize);
  void check_dimensions(const EmbedRequest& r) const;
  void need_embedder() const;

  // routes_classify.cpp
  // A sequence-classification head, or 501 naming what the folder holds instead.
  void need_head(const std::string& path) const;
  // Tokenizes (text, pair) inputs for the head (422 over max_position_embeddings unless truncating).
  std::vector<Task> logit_tasks(const std::vector<std::string>& texts, const std::vector<std::string>* pairs,
                                bool truncate, bool single, const char* field);
  // /predict on a token-classification folder (the pipeline's entities, aggregation_strategy, ignore_labels) and
  // on a masked-LM folder (fill-mask: top_k candidates per [MASK]), in the Hugging Face Inference API's shapes;
  // zero-shot classification with an NLI head (/zero-shot-classification, or /predict with candidate_labels).
  void predict_tokens(const httplib::Request& req, httplib::Response& res);
  void predict_fill_mask(const httplib::Request& req, httplib::Response& res);
  void zero_shot(const httplib::Request& req, httplib::Response& res);
  // /question-answering with a *ForQuestionAnswering folder (tfm::QuestionAnswerer, one call at a time).
  void question_answering(const httplib::Request& req, httplib::Response& res);
  // Encodes texts for a head with offsets (422 over `limit` tokens unless truncating).
  std::vector<TextEncoding> head_encodings(const Tokenizer& tok, const std::vector<std::string>& texts, bool truncate,
                                           int64_t limit, bool single);

  // routes_translate.cpp
  // The pair serving source -> target ("auto": the first pair into target), or 422 naming the pairs served.
  size_t route(const std::string& source, const std::string& target) const;
  // Translates texts[i] from sources[i] into r.target through the queue, with r's beam size, alternatives and
  // generation fields; origin[i]: the index in r.q it comes from (for messages and target_prefix). The tasks hold
  // the translations (text, alternatives).
  std::vector<Task> translate_texts(const TranslateRequest& r, const std::vector<std::string>& texts,
                                    const std::vector<std::string>& sources, const std::vector<size_t>& origin,
                                    const httplib::Request& req);

  // routes_libretranslate.cpp
  // What a LibreTranslate /translate request translates: each q's source language (source "auto": detected) and
  // its text, or with format "html" the text nodes of its markup.
  struct LibreTranslateInput {
    std::vector<std::string> texts, sources;
    std::vector<size_t> origin;                // q index of each text
    std::vector<std::vector<HtmlPiece>> html;  // format "html": each q's pieces
    json detected;                             // source "auto": detectedLanguage of each q
  };
  LibreTranslateInput libretranslate_input(const TranslateRequest& r) const;
  // The /translate answer: translatedText (and alternatives, detectedLanguage) from the translated tasks.
  json libretranslate_output(const TranslateRequest& r, const LibreTranslateInput& in, std::vector<Task>& tasks,
                             bool alternatives) const;
  // The languages source "auto" may mean: those served into `target` ("": every source language served).
  std::vector<std::string> source_languages(const std::string& target) const;
  // LibreTranslate's detections of `text` among `candidates`, best first: [{"confidence": percent, "language"}].
  json detect_languages(const std::string& text, const std::vector<std::string>& candidates) const;
  // Once the models are loaded: --langid must know a served source language (warns about those it does not).
  void check_langid() const;

  ServeOptions o_;
  std::string model_type_, model_id_, source_lang_, target_lang_;
  std::string dtype_ = "fp32";  // compute type of the Linear layers (/info)
  int64_t started_ = 0;         // when the server started, Unix seconds (/v1/models "created")
  bool translation_ = false;
  std::string model_kind_;  // "translation", "embedding", "classifier" or "reranker" (/info model_kind)
  RequestLimits limits_;
  httplib::Server svr_;
  Metrics metrics_;
  std::atomic<bool> ready_{false};
  std::atomic<int64_t> in_flight_{0};
  int64_t max_input_length_ = 0;
  std::unique_ptr<EmbeddingModel> embedder_;
  struct Pair {
    std::string model, source, target;
    std::unique_ptr<TranslationBackend> backend;
    // A multilingual folder's language codes (M2M100 / NLLB, filled when it loads): it serves any source ->
    // target of them other than the fixed pairs, the target passed on as TranslateOptions::target_lang
    // (forced_bos_token_id). Empty: the pair source -> target only.
    std::vector<std::string> languages;
    bool speaks(const std::string& code) const {
      return std::find(languages.begin(), languages.end(), code) != languages.end();
    }
  };
  std::vector<Pair> pairs_;
  std::mutex custom_mu_;
  // Generation keys in flight: the pair and the options of each.
  std::map<int64_t, std::pair<size_t, TranslateOptions>> custom_;
  int64_t next_custom_ = 0;
  TranslationBackend* translator_ = nullptr;  // translation: one per --model, the first is translator_ (/attention)
  std::unique_ptr<TokenClassifier> tagger_;  // token classification, when the folder has that head
  std::unique_ptr<Classifier> head_;  // sequence classification / cross-encoder, when the folder has one
  std::unique_ptr<MaskFiller> sparse_;  // masked-LM head: /embed_sparse
  std::unique_ptr<QuestionAnswerer> qa_;  // question-answering head: /question-answering
  std::mutex qa_mu_;
  std::mutex prompt_mu_;
  std::vector<std::string> prompt_slots_{""};
  int64_t head_max_length_ = 0;
  std::string embed_error_;          // why a head folder cannot embed
  std::unique_ptr<BatchQueue> queue_;
  std::unique_ptr<LanguageIdentifier> langid_;  // --langid
  // /translate_file's results until /download_file fetches them (kept 30 minutes, 256 MiB at most in all).
  struct TranslatedFile {
    std::string name, content, content_type;
    std::chrono::steady_clock::time_point created;
  };
  std::mutex files_mu_;
  std::map<std::string, TranslatedFile> files_;
  size_t files_bytes_ = 0;
};

}  // namespace tfm::serve
