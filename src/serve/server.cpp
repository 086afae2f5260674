#include "serve/server.h"

#include <httplib.h>
#include <pthread.h>
#include <sys/socket.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include <filesystem>
#include <numeric>

#include "io/json_util.h"
#include "io/safetensors.h"
#include "tfm/classifier.h"
#include "serve/backends.h"
#include "serve/batch_queue.h"
#include "serve/connection.h"
#include "serve/metrics.h"
#include "serve/requests.h"
#include "serve/web_page.h"

namespace tfm::serve {

using nlohmann::json;

namespace {

volatile std::sig_atomic_t g_signal = 0;

constexpr int64_t kOpEmbed = 1, kOpEmbedAll = 2, kOpAttention = 3, kOpLogits = 4, kOpTranslate = 100;  // + beam_size

// TFM_SERVE_DEBUG_DELAY_MS: tests only. Sleeps this long before loading the model and before each batch, so a
// test can see /health 503, a full server (429) and SIGTERM with a request in flight without racing.
void debug_delay() {
  static const long ms = [] {
    const char* e = std::getenv("TFM_SERVE_DEBUG_DELAY_MS");
    return e ? std::strtol(e, nullptr, 10) : 0L;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 60000L)));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& type, const std::string& message) {
  send_json(res, status, {{"error", message}, {"error_type", type}});
}

std::vector<float> l2_normalized(std::vector<float> v) {
  double s = 0;
  for (float x : v) s += (double)x * x;
  const double n = std::sqrt(s);
  if (n > 0)
    for (float& x : v) x = (float)(x / n);
  return v;
}

class Server {
 public:
  explicit Server(const ServeOptions& o) : o_(o) {
    const std::string config_path = o.model + "/config.json";
    const json cj = load_json_file(config_path);
    model_type_ = json_string_or(cj, "model_type", "bert", config_path);
    translation_ = model_type_ == "transformer_seq2seq";
    if (!translation_ && model_type_ != "bert" && model_type_ != "transformer_encoder" && model_type_ != "roberta" &&
        model_type_ != "xlm-roberta" && model_type_ != "camembert" && model_type_ != "mpnet")
      throw std::runtime_error(config_path + ": model_type '" + model_type_ +
                               "' cannot be served (bert, roberta, xlm-roberta, camembert, mpnet, transformer_encoder or "
                               "transformer_seq2seq)");
    source_lang_ = !o.source_lang.empty() ? o.source_lang : json_string_or(cj, "source_lang", "en", config_path);
    target_lang_ = !o.target_lang.empty() ? o.target_lang : json_string_or(cj, "target_lang", "fr", config_path);
    limits_.max_client_batch_size = o.max_client_batch_size;
    limits_.max_input_chars = o.payload_limit;
    model_id_ = o.model;
    while (model_id_.size() > 1 && model_id_.back() == '/') model_id_.pop_back();
    if (auto p = model_id_.rfind('/'); p != std::string::npos) model_id_ = model_id_.substr(p + 1);
  }

  int run() {
    // SIGTERM/SIGINT set a flag that the waiter thread polls (a handler, not a signal mask: OpenMP's threads may
    // already exist and would take the default action).
    struct sigaction sa {};
    sa.sa_handler = [](int sig) { g_signal = sig; };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);

    const int pool = (int)std::min<int64_t>(o_.max_concurrent_requests + 8, 1024);
    svr_.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
    svr_.set_payload_max_length((size_t)o_.payload_limit);
    svr_.set_keep_alive_max_count(1000);
    svr_.set_tcp_nodelay(true);  // headers and body go out as two writes: Nagle + delayed ACK would add ~40 ms
    // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server share a port in use.
    svr_.set_socket_options([](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    routes();
    int port = o_.port;
    if (port == 0) {
      port = svr_.bind_to_any_port(o_.host);
      if (port < 0) throw std::runtime_error("cannot listen on " + o_.host + " (any port)");
    } else if (!svr_.bind_to_port(o_.host, port)) {
      throw std::runtime_error("cannot listen on " + o_.host + ":" + std::to_string(port) +
                               " (in use, or not an address of this machine)");
    }
    std::fprintf(stderr, "listening on http://%s:%d (%s model %s)\n", o_.host.c_str(), port,
                 translation_ ? "translation" : "embedding", o_.model.c_str());
    std::fflush(stderr);

    std::atomic<bool> done{false};
    std::string load_error;
    std::thread loader([&] {
      try {
        load();
        ready_ = true;
        std::fprintf(stderr, "model ready\n");
      } catch (const std::exception& e) {
        load_error = e.what();
        while (!svr_.is_running() && !done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        svr_.stop();
      }
    });
    std::thread waiter([&] {
      while (!done) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const int sig = g_signal;
        if (sig == SIGTERM || sig == SIGINT) {
          std::fprintf(stderr, "%s: no new connections; finishing requests in flight\n",
                       sig == SIGTERM ? "SIGTERM" : "SIGINT");
          while (!svr_.is_running() && !done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          svr_.stop();
          return;
        }
      }
    });
    svr_.listen_after_bind();  // returns after stop(), once the worker threads have finished their requests
    done = true;
    loader.join();
    waiter.join();
    if (queue_) queue_->stop();
    if (!load_error.empty()) throw std::runtime_error(load_error);
    std::fprintf(stderr, "stopped\n");
    return 0;
  }

 private:
  void load() {
    debug_delay();
    if (translation_) {
      translator_ = std::make_unique<TranslationBackend>(o_.model, o_.threads);
    } else if (std::filesystem::exists(o_.model + "/modules.json")) {
      embedder_ = load_sentence_transformer_embedding(o_.model, o_.pooling, o_.prompt_name, o_.no_prompt, o_.threads);
    } else {
      // A sequence-classification checkpoint (classifier or cross-encoder) answers /predict and /rerank.
      bool has_head = false;
      try {
        has_head = detect_task_head(o_.model) == TaskHead::SequenceClassification;
      } catch (const std::exception&) {  // no head (or unreadable): the embedder's load reports a broken folder
      }
      if (has_head) head_ = std::make_unique<Classifier>(o_.model, ClassifierOptions{o_.threads});
      try {
        embedder_ = load_encoder_embedding(o_.model, o_.pooling.empty() ? "mean" : o_.pooling, o_.threads);
      } catch (const std::exception& e) {
        if (!head_) throw;
        embed_error_ = e.what();  // the head still serves /predict and /rerank
      }
    }
    if (head_) head_max_length_ = head_->max_position_embeddings();
    // The compute type of the Linear layers: an encoder folder from `tfm convert --dtype int8` runs in int8 (as
    // its file is stored: metadata tfm_dtype), everything else in fp32.
    if (!translation_) {
      std::string st = o_.model + "/model.safetensors";
      std::error_code ec;
      if (!std::filesystem::exists(st, ec)) st = o_.model + "/0_Transformer/model.safetensors";
      if (std::filesystem::exists(st, ec)) {
        const SafeTensors file = SafeTensors::open(st);
        const nlohmann::json& meta = file.metadata();
        if (meta.is_object() && meta.contains("tfm_dtype") && meta["tfm_dtype"] == "int8") dtype_ = "int8";
      }
    }
    max_input_length_ = translation_ ? translator_->max_source_tokens()
                        : embedder_  ? embedder_->max_input_length()
                                     : head_max_length_;
    max_input_length_ = std::max(max_input_length_, head_max_length_);
    if (o_.max_batch_tokens < max_input_length_)
      throw std::runtime_error("--max-batch-tokens " + std::to_string(o_.max_batch_tokens) +
                               " is smaller than the model's max input length " + std::to_string(max_input_length_));
    queue_ = std::make_unique<BatchQueue>(o_.max_batch_tokens, [this](std::vector<Task*>& b) { run_batch(b); },
                                          &metrics_);
  }

  // Runs on the queue's worker thread: the only thread that touches the model.
  void run_batch(std::vector<Task*>& batch) {
    debug_delay();
    const int64_t key = batch[0]->key;
    if (key == kOpEmbed || key == kOpEmbedAll) {
      std::vector<TokenizedInput> inputs(batch.size());
      std::vector<const TokenizedInput*> ptrs;
      for (size_t i = 0; i < batch.size(); ++i) {
        inputs[i].ids = batch[i]->ids;
        inputs[i].token_type_ids = batch[i]->token_type_ids;
        ptrs.push_back(&inputs[i]);
      }
      auto out = key == kOpEmbed ? embedder_->embed(ptrs) : embedder_->embed_all(ptrs);
      for (size_t i = 0; i < batch.size(); ++i) batch[i]->vector = std::move(out[i]);
    } else if (key == kOpLogits) {
      std::vector<TextEncoding> enc(batch.size());
      for (size_t i = 0; i < batch.size(); ++i) {
        enc[i].input_ids = batch[i]->ids;
        enc[i].token_type_ids = batch[i]->token_type_ids;
      }
      const FloatArray logits = head_->logits(enc);
      const int64_t C = head_->num_labels();
      for (size_t i = 0; i < batch.size(); ++i) {
        const float* p = logits.data() + i * C;
        for (int64_t c = 0; c < C; ++c)
          if (!std::isfinite(p[c])) throw ApiError(500, "backend", "the classifier produced a non-finite value");
        batch[i]->vector.assign(p, p + C);
      }
    } else if (key == kOpAttention) {
      for (Task* t : batch) t->json = translator_->attention(t->ids).dump();
    } else {
      std::vector<const std::vector<int64_t>*> src;
      for (Task* t : batch) src.push_back(&t->ids);
      auto out = translator_->translate(src, key - kOpTranslate);
      for (size_t i = 0; i < batch.size(); ++i) batch[i]->text = std::move(out[i]);
    }
  }

  // The request's connection check for the batching queue: a request whose client has disconnected is dropped
  // before its batch runs (serve/connection.h).
  static std::function<bool()> client_gone(const httplib::Request& req) {
    return client_gone_check(req.remote_addr, req.remote_port, req.local_port);
  }

  // Wraps a handler: API key, readiness, the concurrency limit, errors as JSON.
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  httplib::Server::Handler guard(Handler h, bool model_route) {
    return [this, h, model_route](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req))
        return send_error(res, 401, "unauthorized", "missing or wrong API key: send Authorization: Bearer <key>");
      struct InFlight {
        std::atomic<int64_t>* n = nullptr;
        ~InFlight() {
          if (n) --*n;
        }
      } slot;
      if (model_route) {
        if (!ready_) return send_error(res, 503, "unhealthy", "the model is still loading");
        if (++in_flight_ > o_.max_concurrent_requests) {
          --in_flight_;
          return send_error(res, 429, "overloaded",
                            "more than " + std::to_string(o_.max_concurrent_requests) +
                                (o_.max_concurrent_requests == 1 ? " request" : " requests") +
                                " in flight (--max-concurrent-requests); retry later");
        }
        slot.n = &in_flight_;
      }
      try {
        h(req, res);
      } catch (const ApiError& e) {
        send_error(res, e.status, e.type, e.what());
      } catch (const std::invalid_argument& e) {
        send_error(res, 422, "validation", e.what());
      } catch (const std::exception& e) {
        send_error(res, 500, "backend", e.what());
      }
    };
  }

  bool authorized(const httplib::Request& req) const {
    if (o_.api_key.empty()) return true;
    const std::string got = req.get_header_value("Authorization"), want = "Bearer " + o_.api_key;
    if (got.size() != want.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff |= (unsigned char)(got[i] ^ want[i]);
    return diff == 0;
  }

  // Tokenizes every input for the encoder (422 over the limit unless truncating).
  std::vector<Task> embed_tasks(const EmbedRequest& r, int64_t op, const char* field) {
    need_embedder();
    if (op == kOpEmbedAll && !embedder_->has_token_embeddings()) embedder_->embed_all({});  // throws its 501
    const auto t0 = std::chrono::steady_clock::now();
    const bool truncate = r.truncate.value_or(o_.auto_truncate);
    std::vector<Task> tasks(r.inputs.size());
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      TokenizedInput t = embedder_->tokenize(r.inputs[i], true, truncate ? max_input_length_ : 0);
      if ((int64_t)t.ids.size() > max_input_length_)
        throw validation_error(std::string("`") + field + (r.single ? "" : "[" + std::to_string(i) + "]") +
                               "` has " + std::to_string(t.ids.size()) + " tokens, more than the model's limit of " +
                               std::to_string(max_input_length_) +
                               " (max_input_length); send \"truncate\": true or start the server with --auto-truncate");
      tasks[i].key = op;
      tasks[i].tokens = (int64_t)t.ids.size();
      tasks[i].ids = std::move(t.ids);
      tasks[i].token_type_ids = std::move(t.token_type_ids);
    }
    metrics_.observe_tokenization(seconds_since(t0));
    return tasks;
  }

  void need_embedder() const {
    if (!embedder_)
      throw ApiError(501, "not_implemented", "this classification checkpoint cannot embed: " + embed_error_);
  }

  // A sequence-classification head, or 501 naming what the folder holds instead.
  void need_head(const std::string& path) const {
    if (head_) return;
    throw ApiError(501, "not_implemented",
                   path + " needs a model with a sequence-classification / cross-encoder head "
                          "(config.json architectures BertForSequenceClassification); " +
                       o_.model + " has none, so it is served for /embed only");
  }

  // Tokenizes (text, pair) inputs for the head (422 over max_position_embeddings unless truncating).
  std::vector<Task> logit_tasks(const std::vector<std::string>& texts, const std::vector<std::string>* pairs,
                                bool truncate, bool single, const char* field) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Task> tasks(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string* pair = pairs && !pairs->empty() && !(*pairs)[i].empty() ? &(*pairs)[i] : nullptr;
      TokenizeOptions to;
      to.max_length = truncate ? head_max_length_ : 0;
      const TextEncoding e =
          pair ? head_->tokenizer().encode_pair(texts[i], *pair, to) : head_->tokenizer().encode(texts[i], to);
      if ((int64_t)e.input_ids.size() > head_max_length_)
        throw validation_error(std::string("`") + field + (single ? "" : "[" + std::to_string(i) + "]") + "` has " +
                               std::to_string(e.input_ids.size()) + " tokens, more than the model's limit of " +
                               std::to_string(head_max_length_) +
                               " (max_position_embeddings); send \"truncate\": true or start the server with "
                               "--auto-truncate");
      tasks[i].key = kOpLogits;
      tasks[i].tokens = (int64_t)e.input_ids.size();
      tasks[i].ids = e.input_ids;
      tasks[i].token_type_ids = e.token_type_ids;
    }
    metrics_.observe_tokenization(seconds_since(t0));
    return tasks;
  }

  void not_for_this_model(const std::string& path, const std::string& needs) {
    auto h = [this, path, needs](const httplib::Request&, httplib::Response& res) {
      send_error(res, 404, "not_found",
                 path + " needs " + needs + "; this server runs " +
                     (translation_ ? "a translation model (transformer_seq2seq)" : "an embedding model (" +
                                                                                        model_type_ + ")"));
    };
    svr_.Post(path, guard(h, false));
  }

  void routes() {
    svr_.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
      request_start() = std::chrono::steady_clock::now();
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413)
        send_error(res, 413, "payload_too_large",
                   "request body over " + std::to_string(o_.payload_limit) + " bytes (--payload-limit)");
      else if (res.status == 404)
        send_error(res, 404, "not_found", "no route " + req.method + " " + req.path);
      else
        send_error(res, res.status, "http", "HTTP error " + std::to_string(res.status));
    });
    svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const double ms = seconds_since(request_start()) * 1e3;
      static const std::vector<std::string> known = {
          "/", "/info", "/health", "/metrics", "/embed", "/embed_all", "/tokenize", "/decode", "/v1/embeddings",
          "/predict", "/rerank", "/translate", "/languages", "/attention"};
      const bool is_known = std::find(known.begin(), known.end(), req.path) != known.end();
      metrics_.count_request(is_known ? req.path : "other", res.status);
      if (!o_.access_log) return;
      char when[32];
      std::time_t now = std::time(nullptr);
      std::tm tm;
      gmtime_r(&now, &tm);
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
      std::fprintf(stderr, "%s %s \"%s %s\" %d %zu %.1fms\n", when, req.remote_addr.c_str(), req.method.c_str(),
                   req.path.c_str(), res.status, res.body.size(), ms);
    });

    // The page is static (no model data) and needs no key: a browser cannot send one for the page itself; its
    // scripts send the key typed into it.
    svr_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(web_page_html(), "text/html; charset=utf-8");
    });
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (ready_)
        send_json(res, 200, {{"status", "ok"}});
      else
        send_error(res, 503, "unhealthy", "the model is still loading");
    });
    svr_.Get("/metrics", guard([this](const httplib::Request&, httplib::Response& res) {
               res.set_content(metrics_.render(), "text/plain; version=0.0.4");
             }, false));
    svr_.Get("/info", guard([this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, info()); },
                            false));

    if (!translation_) {
      svr_.Post("/embed", guard([this](const httplib::Request& req, httplib::Response& res) {
                  EmbedRequest r = parse_embed_request(req.body, limits_, "inputs");
                  std::vector<Task> tasks = embed_tasks(r, kOpEmbed, "inputs");
                  queue_->run(tasks, client_gone(req));
                  json out = json::array();
                  for (Task& t : tasks) out.push_back(r.normalize ? l2_normalized(t.vector) : t.vector);
                  send_json(res, 200, out);
                }, true));
      svr_.Post("/embed_all", guard([this](const httplib::Request& req, httplib::Response& res) {
                  EmbedRequest r = parse_embed_request(req.body, limits_, "inputs");
                  std::vector<Task> tasks = embed_tasks(r, kOpEmbedAll, "inputs");
                  queue_->run(tasks, client_gone(req));
                  json out = json::array();
                  for (Task& t : tasks) {
                    // Token vectors are the encoder's width, which a sentence-transformers Dense may change.
                    const int64_t H = t.tokens ? (int64_t)t.vector.size() / t.tokens : 0;
                    json rows = json::array();
                    for (int64_t l = 0; l < t.tokens; ++l)
                      rows.push_back(std::vector<float>(t.vector.begin() + l * H, t.vector.begin() + (l + 1) * H));
                    out.push_back(rows);
                  }
                  send_json(res, 200, out);
                }, true));
      svr_.Post("/v1/embeddings", guard([this](const httplib::Request& req, httplib::Response& res) {
                  EmbedRequest r = parse_embed_request(req.body, limits_, "input");
                  std::vector<Task> tasks = embed_tasks(r, kOpEmbed, "input");
                  queue_->run(tasks, client_gone(req));
                  json data = json::array();
                  int64_t tokens = 0;
                  for (size_t i = 0; i < tasks.size(); ++i) {
                    data.push_back({{"object", "embedding"}, {"embedding", l2_normalized(tasks[i].vector)},
                                    {"index", i}});
                    tokens += tasks[i].tokens;
                  }
                  send_json(res, 200, {{"object", "list"}, {"data", data},
                                       {"model", r.model.empty() ? model_id_ : r.model},
                                       {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
                }, true));
      svr_.Post("/tokenize", guard([this](const httplib::Request& req, httplib::Response& res) {
                  TokenizeRequest r = parse_tokenize_request(req.body, limits_);
                  const auto t0 = std::chrono::steady_clock::now();
                  json out = json::array();
                  need_embedder();
                  for (const auto& text : r.inputs) {
                    TokenizedInput t = embedder_->tokenize(text, r.add_special_tokens, 0);
                    json toks = json::array();
                    for (size_t i = 0; i < t.ids.size(); ++i) {
                      // Character offsets in the text (Hugging Face's offset_mapping); null: no place in it.
                      json start = nullptr, stop = nullptr;
                      if (i < t.offsets.size() && t.offsets[i].first >= 0) {
                        start = t.offsets[i].first;
                        stop = t.offsets[i].second;
                      }
                      toks.push_back({{"id", t.ids[i]}, {"text", t.tokens[i]}, {"special", (bool)t.special[i]},
                                      {"start", start}, {"stop", stop}});
                    }
                    out.push_back(toks);
                  }
                  metrics_.observe_tokenization(seconds_since(t0));
                  send_json(res, 200, out);
                }, true));
      // text-embeddings-inference /decode: the text of each list of ids.
      svr_.Post("/decode", guard([this](const httplib::Request& req, httplib::Response& res) {
                  DecodeRequest r = parse_decode_request(req.body, limits_);
                  need_embedder();
                  json out = json::array();
                  for (const auto& ids : r.ids) out.push_back(embedder_->decode(ids, r.skip_special_tokens));
                  send_json(res, 200, out);
                }, true));
      // text-embeddings-inference /predict: per input every label with its score, best first.
      svr_.Post("/predict", guard([this](const httplib::Request& req, httplib::Response& res) {
                  need_head("/predict");
                  PredictRequest r = parse_predict_request(req.body, limits_);
                  std::vector<Task> tasks = logit_tasks(r.texts, &r.pairs, r.truncate.value_or(o_.auto_truncate),
                                                        r.single, "inputs");
                  queue_->run(tasks, client_gone(req));
                  const std::string fn = r.raw_scores ? "none" : "";  // "": the pipeline's default
                  const auto& labels = head_->labels();
                  json out = json::array();
                  for (Task& t : tasks) {
                    std::vector<float> sc = head_->scores(t.vector.data(), fn);
                    std::vector<size_t> order(sc.size());
                    std::iota(order.begin(), order.end(), 0);
                    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sc[a] > sc[b]; });
                    json one = json::array();
                    for (size_t k : order) one.push_back({{"score", sc[k]}, {"label", labels[k]}});
                    out.push_back(one);
                  }
                  send_json(res, 200, r.single ? out[0] : out);
                }, true));
      // text-embeddings-inference /rerank with a cross-encoder: [{index, score[, text]}] best first, scored as
      // sentence-transformers' CrossEncoder.rank does (one label: its activation; two: softmax of label 1).
      svr_.Post("/rerank", guard([this](const httplib::Request& req, httplib::Response& res) {
                  need_head("/rerank");
                  const int64_t C = head_->num_labels();
                  if (C > 2)
                    throw ApiError(400, "not_a_reranker",
                                   o_.model + " has " + std::to_string(C) +
                                       " labels; /rerank needs a cross-encoder with one (or two) labels (use /predict)");
                  RerankRequest r = parse_rerank_request(req.body, limits_);
                  std::vector<std::string> queries(r.texts.size(), r.query);
                  std::vector<Task> tasks =
                      logit_tasks(queries, &r.texts, r.truncate.value_or(o_.auto_truncate), false, "texts");
                  queue_->run(tasks, client_gone(req));
                  const std::string fn = r.raw_scores ? "none" : C == 2 ? "softmax" : "";  // "": the default
                  std::vector<float> scores;
                  for (Task& t : tasks) {
                    std::vector<float> sc = head_->scores(t.vector.data(), fn);
                    scores.push_back(C == 2 ? (r.raw_scores ? sc[1] - sc[0] : sc[1]) : sc[0]);
                  }
                  std::vector<size_t> order(scores.size());
                  std::iota(order.begin(), order.end(), 0);
                  std::stable_sort(order.begin(), order.end(),
                                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
                  json out = json::array();
                  for (size_t i : order) {
                    json e = {{"index", i}, {"score", scores[i]}};
                    if (r.return_text) e["text"] = r.texts[i];
                    out.push_back(e);
                  }
                  send_json(res, 200, out);
                }, true));
      not_for_this_model("/translate", "a translation model (transformer_seq2seq)");
      not_for_this_model("/attention", "a translation model (transformer_seq2seq)");
      svr_.Get("/languages", guard([this](const httplib::Request&, httplib::Response& res) {
                 send_error(res, 404, "not_found", "/languages needs a translation model; this server runs an "
                                                   "embedding model (" + model_type_ + ")");
               }, false));
    } else {
      svr_.Post("/translate", guard([this](const httplib::Request& req, httplib::Response& res) {
                  TranslateRequest r = parse_translate_request(req.body, limits_, o_.max_beam_size);
                  check_languages(r.source, r.target);
                  const auto t0 = std::chrono::steady_clock::now();
                  std::vector<Task> tasks(r.q.size());
                  for (size_t i = 0; i < r.q.size(); ++i) {
                    try {
                      tasks[i].ids = translator_->encode_source(r.q[i], r.truncate.value_or(o_.auto_truncate));
                    } catch (const ApiError& e) {
                      throw validation_error(std::string("`q") + (r.single ? "" : "[" + std::to_string(i) + "]") +
                                             "`: " + e.what());
                    }
                    tasks[i].key = kOpTranslate + r.beam_size;
                    tasks[i].tokens = (int64_t)tasks[i].ids.size();
                  }
                  metrics_.observe_tokenization(seconds_since(t0));
                  queue_->run(tasks, client_gone(req));
                  if (r.single) return send_json(res, 200, {{"translatedText", tasks[0].text}});
                  json out = json::array();
                  for (Task& t : tasks) out.push_back(t.text);
                  send_json(res, 200, {{"translatedText", out}});
                }, true));
      svr_.Post("/attention", guard([this](const httplib::Request& req, httplib::Response& res) {
                  std::string q = parse_attention_request(req.body, limits_);
                  std::vector<Task> tasks(1);
                  tasks[0].key = kOpAttention;
                  tasks[0].ids = translator_->encode_source(q, o_.auto_truncate);
                  tasks[0].tokens = (int64_t)tasks[0].ids.size();
                  queue_->run(tasks, client_gone(req));
                  res.set_content(tasks[0].json, "application/json");
                }, true));
      svr_.Get("/languages", guard([this](const httplib::Request&, httplib::Response& res) {
                 send_json(res, 200, json::array({{{"code", source_lang_}, {"name", source_lang_},
                                                   {"targets", {target_lang_}}}}));
               }, false));
      for (const char* path : {"/embed", "/embed_all", "/v1/embeddings", "/tokenize", "/decode", "/predict", "/rerank"})
        not_for_this_model(path, "an encoder model (bert, transformer_encoder)");
    }
  }

  void check_languages(const std::string& source, const std::string& target) const {
    if (source != "auto" && source != source_lang_)
      throw validation_error("`source` '" + source + "' is not supported: this model translates " + source_lang_ +
                             " -> " + target_lang_ + " (GET /languages)");
    if (target != target_lang_)
      throw validation_error("`target` '" + target + "' is not supported: this model translates " + source_lang_ +
                             " -> " + target_lang_ + " (GET /languages)");
  }

  json info() const {
    json j = {{"model_id", model_id_},
              {"model_type", model_type_},
              {"model_kind", translation_ ? "translation" : "embedding"},
              {"ready", ready_.load()},
              {"max_concurrent_requests", o_.max_concurrent_requests},
              {"max_batch_tokens", o_.max_batch_tokens},
              {"max_client_batch_size", o_.max_client_batch_size},
              {"payload_limit", o_.payload_limit},
              {"auto_truncate", o_.auto_truncate},
              {"max_input_length", ready_ ? json(max_input_length_) : json(nullptr)},
              {"dtype", ready_ ? json(dtype_) : json(nullptr)}};  // written by load() before ready_
    if (translation_) {
      j["source_lang"] = source_lang_;
      j["target_lang"] = target_lang_;
      j["max_beam_size"] = o_.max_beam_size;
      if (ready_) j["num_layers"] = translator_->num_layers(), j["num_heads"] = translator_->num_heads();
    } else {
      j["pooling"] = ready_ && embedder_ ? json(embedder_->pooling()) : json(o_.pooling.empty() ? "mean" : o_.pooling);
      if (ready_ && embedder_) j["hidden_size"] = embedder_->hidden_size();
      if (ready_ && head_) {
        j["head"] = task_head_name(TaskHead::SequenceClassification);
        j["labels"] = head_->labels();
      }
    }
    return j;
  }

  static std::chrono::steady_clock::time_point& request_start() {
    thread_local std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
    return t;
  }

  ServeOptions o_;
  std::string model_type_, model_id_, source_lang_, target_lang_;
  std::string dtype_ = "fp32";  // compute type of the Linear layers (/info)
  bool translation_ = false;
  RequestLimits limits_;
  httplib::Server svr_;
  Metrics metrics_;
  std::atomic<bool> ready_{false};
  std::atomic<int64_t> in_flight_{0};
  int64_t max_input_length_ = 0;
  std::unique_ptr<EmbeddingModel> embedder_;
  std::unique_ptr<TranslationBackend> translator_;
  std::unique_ptr<Classifier> head_;  // sequence classification / cross-encoder, when the folder has one
  int64_t head_max_length_ = 0;
  std::string embed_error_;          // why a head folder cannot embed
  std::unique_ptr<BatchQueue> queue_;
};

}  // namespace

int run_server(const ServeOptions& options) {
  Server s(options);
  return s.run();
}

}  // namespace tfm::serve
