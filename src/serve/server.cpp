#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <thread>

#include "io/json_util.h"
#include "serve/connection.h"
#include "serve/server_core.h"
#include "tfm/error.h"
#include "tfm/pipeline.h"
#include "serve/worker_pool.h"
#include "tfm/model_info.h"

namespace tfm::serve {

using nlohmann::json;

namespace {

volatile std::sig_atomic_t g_signal = 0;

}  // namespace

Server::Server(const ServeOptions& o) : o_(o) {
  const std::string config_path = o.model + "/config.json";
  const json cj = load_json_file(config_path);
  // The family registry says what the folder is (and refuses an unsupported one, as every command does).
  const ModelInfo info = inspect_model(o.model);
  model_type_ = info.model_type;
  translation_ = info.translation;
  // Any family the library loads is served; its check names the supported model types.
  if (!translation_) Encoder::check_config(config_path);
  if (!o.extra_models.empty() && !translation_)
    throw std::runtime_error("several --model folders are served only for translation; " + o.model + " is a " +
                             model_type_ + " folder");
  if (translation_ && !o.pooling.empty())
    throw std::runtime_error("--pooling is for encoders (embeddings); " + o.model + " is a translation model (" +
                             model_type_ + ")");
  // What the folder is served as (/info model_kind, the start-up lines): a sequence-classification head is a
  // classifier, or a reranker (cross-encoder) with one label, as text-embeddings-inference names them; the other
  // heads by their pipeline task.
  model_kind_ = translation_ ? "translation" : "embedding";
  if (!translation_) {
    try {
      const TaskHead head = detect_task_head(o.model);
      if (head == TaskHead::SequenceClassification) {
        const auto labels = cj.find("id2label");
        const int64_t n = labels != cj.end() && labels->is_object() ? (int64_t)labels->size()
                                                                     : cj.value("num_labels", (int64_t)2);
        model_kind_ = n == 1 ? "reranker" : "classifier";
      } else if (head == TaskHead::TokenClassification) {
        model_kind_ = "token-classification";
      } else if (head == TaskHead::MaskedLM) {
        model_kind_ = "fill-mask";
      } else if (head == TaskHead::QuestionAnswering) {
        model_kind_ = "question-answering";
      }
    } catch (const std::exception&) {  // no head (or unreadable): load() reports a broken folder
    }
  }
  if (translation_) {
    source_lang_ = !o.source_lang.empty() ? o.source_lang : !info.source_lang.empty() ? info.source_lang : "en";
    target_lang_ = !o.target_lang.empty() ? o.target_lang : !info.target_lang.empty() ? info.target_lang : "fr";
    pairs_.push_back({o.model, source_lang_, target_lang_, nullptr, {}});
  }
  for (const std::string& dir : o.extra_models) {
    const std::string path = dir + "/config.json";
    const ModelInfo extra = inspect_model(dir);
    if (extra.model_type != model_type_)
      throw std::runtime_error(path + ": model_type '" + extra.model_type +
                               "'; every --model of a translation server must be a " + model_type_ + " folder");
    const std::string &s = extra.source_lang, &t = extra.target_lang;
    if (s.empty() || t.empty())
      throw std::runtime_error(dir + ": no language pair: give source_lang and target_lang in its config.json or "
                               "name the folder SRC-TGT (en-fr)");
    for (const Pair& p : pairs_)
      if (p.source == s && p.target == t)
        throw std::runtime_error("--model " + p.model + " and --model " + dir + " both translate " + s + " -> " + t);
    pairs_.push_back({dir, s, t, nullptr, {}});
  }
  if (!o.langid.empty()) {
    if (!translation_)
      throw std::runtime_error("--langid detects the source language of translation requests; " + o.model +
                               " is a " + model_type_ + " folder");
    langid_ = std::make_unique<LanguageIdentifier>(LanguageIdentifier::load(o.langid));
  }
  limits_.max_client_batch_size = o.max_client_batch_size;
  limits_.max_input_chars = o.payload_limit;
  started_ = (int64_t)std::time(nullptr);
  model_id_ = o.model;
  while (model_id_.size() > 1 && model_id_.back() == '/') model_id_.pop_back();
  if (auto p = model_id_.rfind('/'); p != std::string::npos) model_id_ = model_id_.substr(p + 1);
}

int Server::run() {
  // SIGTERM/SIGINT set a flag that the waiter thread polls (a handler, not a signal mask: OpenMP's threads may
  // already exist and would take the default action).
  struct sigaction sa {};
  sa.sa_handler = [](int sig) { g_signal = sig; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  // A thread per open connection, started as connections come (serve/worker_pool.h): idle keep-alive clients
  // never keep a new one waiting; the concurrency limit is the guard's per-request 429.
  const size_t max_threads = (size_t)std::min<int64_t>(o_.max_concurrent_requests, 1 << 16) + 1024;
  svr_.new_task_queue = [max_threads] { return new WorkerPool(max_threads); };
  svr_.set_payload_max_length((size_t)o_.payload_limit);
  svr_.set_keep_alive_max_count(1000);
  svr_.set_tcp_nodelay(true);  // headers and body go out as two writes: Nagle + delayed ACK would add ~40 ms
  // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server share a port in use. The
  // listening socket is the last one this sees before the bind succeeds (it is called for each address tried).
  int listen_fd = -1;
  svr_.set_socket_options([&listen_fd](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = sock;
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
  // Debian's cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into the library): 64
  // clients connecting at once overflowed it, and the dropped connections retried their SYN 1 s and 3 s later
  // (wrk's p99 of 2.8-5.7 s at concurrency 64 on a small model, against 58-105 ms inside the server). listen()
  // again on the bound socket raises it; the kernel caps it at net.core.somaxconn.
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  // "listening on" only once the model is loaded and the options checked against it: a server that then refuses
  // to start (a broken folder, --max-batch-tokens below the input limit) never says it listens. Until then
  // /health answers 503 on the bound port.
  const char* kind = model_kind_.c_str();
  std::fprintf(stderr, "bound to http://%s:%d; loading the %s model %s (/health answers 503 until it is ready)\n",
               o_.host.c_str(), port, kind, o_.model.c_str());
  std::fflush(stderr);

  std::atomic<bool> done{false};
  std::string load_error;
  std::thread loader([&] {
    try {
      load();
      std::fprintf(stderr, "listening on http://%s:%d (%s model %s, ready)\n", o_.host.c_str(), port, kind,
                   o_.model.c_str());
      std::fflush(stderr);
      ready_ = true;
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

void Server::load() {
  debug_delay();
  if (translation_) {
    for (Pair& p : pairs_) {
      p.backend = std::make_unique<TranslationBackend>(p.model, o_.threads, o_.dtype);
      p.languages = p.backend->languages();  // M2M100 / NLLB: every pair of these
    }
    translator_ = pairs_.front().backend.get();
    check_langid();
  } else if (std::filesystem::exists(o_.model + "/modules.json")) {
    embedder_ = load_sentence_transformer_embedding(o_.model, o_.pooling, o_.prompt_name, o_.no_prompt, o_.threads,
                                                    o_.dtype);
  } else {
    // A sequence-classification checkpoint (classifier or cross-encoder) answers /predict and /rerank.
    // A masked-LM checkpoint answers /embed_sparse (SPLADE).
    std::optional<TaskHead> head;
    try {
      head = detect_task_head(o_.model);
    } catch (const std::exception&) {  // no head (or unreadable): the embedder's load reports a broken folder
    }
    const bool has_head = head == TaskHead::SequenceClassification;
    if (has_head) head_ = std::make_unique<Classifier>(o_.model, ClassifierOptions{o_.threads, o_.dtype});
    if (head == TaskHead::MaskedLM)
      sparse_ = std::make_unique<MaskFiller>(o_.model, ClassifierOptions{o_.threads, o_.dtype});
    if (head == TaskHead::TokenClassification)
      tagger_ = std::make_unique<TokenClassifier>(o_.model, ClassifierOptions{o_.threads, o_.dtype});
    if (head == TaskHead::QuestionAnswering)
      qa_ = std::make_unique<QuestionAnswerer>(o_.model, ClassifierOptions{o_.threads, o_.dtype});
    try {
      embedder_ = load_encoder_embedding(o_.model, o_.pooling.empty() ? "mean" : o_.pooling, o_.threads, o_.dtype);
    } catch (const std::exception& e) {
      if (!head_ && !sparse_ && !tagger_ && !qa_) throw;
      embed_error_ = e.what();  // the head still serves /predict and /rerank
    }
  }
  if (head_) head_max_length_ = head_->max_position_embeddings();
  if (sparse_) head_max_length_ = std::max(head_max_length_, sparse_->max_position_embeddings());
  if (tagger_) head_max_length_ = std::max(head_max_length_, tagger_->max_position_embeddings());
  if (qa_) head_max_length_ = std::max(head_max_length_, qa_->max_position_embeddings());
  // The compute type of the Linear layers: --dtype, else an encoder folder from `tfm convert --dtype int8` runs in
  // int8 (as its file is stored: metadata tfm_dtype), everything else in fp32.
  if (!o_.dtype.empty()) {
    dtype_ = o_.dtype;
  } else if (!translation_) {
    try {
      dtype_ = stored_dtype(o_.model);
    } catch (const FileNotFoundError&) {  // weights elsewhere (a hub snapshot): fp32, as loaded
    }
  }
  int64_t max_source = 0;
  for (const Pair& p : pairs_) max_source = std::max(max_source, p.backend->max_source_tokens());
  max_input_length_ = translation_ ? max_source
                      : embedder_  ? embedder_->max_input_length()
                                   : head_max_length_;
  max_input_length_ = std::max(max_input_length_, head_max_length_);
  if (o_.max_batch_tokens < max_input_length_)
    throw std::runtime_error("--max-batch-tokens " + std::to_string(o_.max_batch_tokens) +
                             " is smaller than the model's max input length " + std::to_string(max_input_length_));
  warm_up();
  queue_ = std::make_unique<BatchQueue>(o_.max_batch_tokens, [this](std::vector<Task*>& b) { run_batch(b); },
                                        &metrics_);
}

void Server::warm_up() {
  for (int pass = 0; pass < 2; ++pass) {
    if (embedder_) {
      const TokenizedInput t = embedder_->tokenize("warm up", true, 0);
      (void)embedder_->embed({&t});
    }
    if (head_) (void)head_->logits(std::vector<std::string>{"warm up"});
    if (sparse_) (void)sparse_->sparse_embed({sparse_->tokenizer().encode("warm up")});
  }
}

void Server::run_batch(std::vector<Task*>& batch) {
  debug_delay();
  const BatchKey& key = batch[0]->key;
  using Op = BatchKey::Op;
  if (key.op == Op::Embed || key.op == Op::EmbedAll) {
    const std::string prompt = prompt_of_slot(key.prompt_slot);
    std::vector<TokenizedInput> inputs(batch.size());
    std::vector<const TokenizedInput*> ptrs;
    for (size_t i = 0; i < batch.size(); ++i) {
      inputs[i].ids = batch[i]->ids;
      inputs[i].token_type_ids = batch[i]->token_type_ids;
      ptrs.push_back(&inputs[i]);
    }
    auto out = key.op == Op::Embed ? embedder_->embed(ptrs, prompt) : embedder_->embed_all(ptrs);
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->vector = std::move(out[i]);
  } else if (key.op == Op::Sparse) {
    std::vector<TextEncoding> enc(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      enc[i].input_ids = batch[i]->ids;
      enc[i].token_type_ids = batch[i]->token_type_ids;
    }
    const FloatArray v = sparse_->sparse_embed(enc);
    const int64_t V = v.size(1);
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->vector.assign(v.data() + i * V, v.data() + (i + 1) * V);
  } else if (key.op == Op::Logits) {
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
  } else if (key.op == Op::Attention) {
    for (Task* t : batch) t->json = translator_->attention(t->ids, key.beam_size).dump();
  } else if (key.op == Op::Generation) {
    std::pair<size_t, TranslateOptions> c;
    {
      std::lock_guard<std::mutex> lock(custom_mu_);
      c = custom_.at(key.generation);
    }
    std::vector<const std::vector<int64_t>*> src;
    for (Task* t : batch) src.push_back(&t->ids);
    bool prefix = false;
    for (Task* t : batch) prefix |= !t->target_prefix.empty();
    if (prefix)
      for (Task* t : batch) c.second.target_prefix.push_back(t->target_prefix);
    std::vector<Translation> out;
    try {
      out = pairs_[c.first].backend->translate(src, c.second);
    } catch (const std::invalid_argument& e) {  // an option the Translator refuses (sampling with a beam, ...)
      throw validation_error(e.what());
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i]->text = std::move(out[i].text);
      for (size_t h = 1; h < out[i].hypotheses.size(); ++h)
        batch[i]->alternatives.push_back(std::move(out[i].hypotheses[h].text));
    }
  } else {  // Op::Translate
    std::vector<const std::vector<int64_t>*> src;
    for (Task* t : batch) src.push_back(&t->ids);
    auto out = pairs_[key.pair].backend->translate(src, key.beam_size);
    for (size_t i = 0; i < batch.size(); ++i) batch[i]->text = std::move(out[i]);
  }
}

std::function<bool()> Server::client_gone(const httplib::Request& req) {
  return client_gone_check(req.remote_addr, req.remote_port, req.local_port);
}

Server::StageTimes& Server::stage_times() {
  thread_local StageTimes t;
  return t;
}

std::chrono::steady_clock::time_point& Server::request_start() {
  thread_local std::chrono::steady_clock::time_point t = std::chrono::steady_clock::now();
  return t;
}

void Server::observe_tokenization(double seconds) {
  metrics_.observe_tokenization(seconds);
  stage_times().tokenize_s = seconds;
}

void Server::run_queued(std::vector<Task>& tasks, const httplib::Request& req) {
  const RunTimes t = queue_->run(tasks, client_gone(req));
  StageTimes& st = stage_times();
  st.queue_s = std::max(st.queue_s, 0.0) + t.queue_s;  // a route may run the queue more than once
  st.inference_s = std::max(st.inference_s, 0.0) + t.inference_s;
  st.ran = std::chrono::steady_clock::now();
}

httplib::Server::Handler Server::guard(Handler h, bool model_route) {
  return [this, h, model_route](const httplib::Request& req, httplib::Response& res) {
    struct OpenAiErrors {  // OpenAI's routes answer errors in OpenAI's shape
      const httplib::Request& req;
      httplib::Response& res;
      ~OpenAiErrors() {
        if (openai_route(req.path) && res.status >= 400) to_openai_error(res);
        if (res.status == 422 && libretranslate_route(req.path)) res.status = 400;  // LibreTranslate's status
      }
    } openai_errors{req, res};
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
    ignored_fields().clear();
    try {
      h(req, res);
      warn_ignored(res);
    } catch (const ApiError& e) {
      send_error(res, e.status, e.type, e.what());
    } catch (const std::invalid_argument& e) {
      send_error(res, 422, "validation", e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, "backend", e.what());
    }
  };
}

void Server::warn_ignored(httplib::Response& res) {
  std::vector<std::string>& fields = ignored_fields();
  if (fields.empty()) return;
  // RFC 7234's Warning (299: a persistent warning), the field names quoted short and printable.
  std::string names;
  for (size_t i = 0; i < fields.size() && i < 8; ++i) {
    std::string n = excerpt(fields[i]);
    for (char& c : n)
      if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f || c == '"' || c == '\\') c = '?';
    names += (names.empty() ? "" : ", ") + n;
  }
  if (fields.size() > 8) names += " and " + std::to_string(fields.size() - 8) + " more";
  res.set_header("Warning", "299 tfm \"unknown fields ignored: " + names + "\"");
  fields.clear();
}

bool Server::authorized(const httplib::Request& req) const {
  if (o_.api_key.empty()) return true;
  // LibreTranslate answers /languages without a key: its clients list the languages before they translate.
  if (req.path == "/languages") return true;
  std::string got = req.get_header_value("Authorization");
  const std::string want = "Bearer " + o_.api_key;
  if (got.empty() && libretranslate_route(req.path)) {  // LibreTranslate clients send the key as the api_key field
    json j = parse_shallow(json_body(req, true));
    for (const char* field : {"api_key", "apiKey"})  // apiKey: the libretranslate npm client's name
      if (got.empty() && j.is_object() && j.contains(field) && j[field].is_string() && !j[field].empty())
        got = "Bearer " + j[field].get<std::string>();
  }
  if (got.size() != want.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff |= (unsigned char)(got[i] ^ want[i]);
  return diff == 0;
}

int64_t Server::prompt_slot(const std::string& name) {
  std::lock_guard<std::mutex> lock(prompt_mu_);
  for (size_t i = 0; i < prompt_slots_.size(); ++i)
    if (prompt_slots_[i] == name) return (int64_t)i;
  prompt_slots_.push_back(name);
  return (int64_t)prompt_slots_.size() - 1;
}

std::string Server::prompt_of_slot(int64_t slot) {
  std::lock_guard<std::mutex> lock(prompt_mu_);
  return slot > 0 && slot < (int64_t)prompt_slots_.size() ? prompt_slots_[slot] : std::string();
}

void Server::add(const std::string& method, const std::string& path, const std::string& summary, httplib::Server::Handler h) {
  route_table_[path][method] = RouteDoc{summary, method == "POST"};
  handlers_[method + " " + path] = h;
  std::string pattern = path;  // "{name}": one path segment
  for (size_t a; (a = pattern.find('{')) != std::string::npos;) pattern.replace(a, pattern.find('}', a) - a + 1, "([^/]+)");
  if (method == "GET")
    svr_.Get(pattern, std::move(h));
  else
    svr_.Post(pattern, std::move(h));
}

std::string Server::route_of(const std::string& path) const {
  if (route_table_.count(path)) return path;
  for (const auto& [route, methods] : route_table_) {
    const size_t brace = route.find('{');
    if (brace == std::string::npos || path.compare(0, brace, route, 0, brace) != 0) continue;
    if (path.size() > brace && path.find('/', brace) == std::string::npos) return route;
  }
  return "";
}

void Server::not_for_this_model(const std::string& path, const std::string& needs) {
  auto h = [this, path, needs](const httplib::Request&, httplib::Response& res) {
    send_error(res, 404, "not_found",
               path + " needs " + needs + "; this server runs " + (model_kind_ == "embedding" ? "an " : "a ") +
                   model_kind_ + " model (" + model_type_ + ")");
  };
  svr_.Post(path, guard(h, false));
}

std::string Server::allow_header(const std::string& path) const {
  std::string allow;
  auto it = route_table_.find(route_of(path));
  if (it == route_table_.end()) return allow;
  for (const auto& [m, d] : it->second) {
    allow += (allow.empty() ? "" : ", ") + m;
    if (m == "GET") allow += ", HEAD";
  }
  return allow + ", OPTIONS";
}

void Server::routes() {
  hooks();
  for (auto group : kRouteGroups) (this->*group)();
}

int run_server(const ServeOptions& options) {
  Server s(options);
  return s.run();
}

}  // namespace tfm::serve
