#include "serve/server.h"

#include <httplib.h>
#include <pthread.h>
#include <sys/socket.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

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

// Batch keys: the operation plus kPromptSlot times the request's prompt slot (embedding with another prompt than the
// server's batches apart: a Pooling may exclude the prompt); kOpTranslate + pair * kPairStride + beam_size: one
// batch per language pair and beam size; kOpGeneration + n: the tasks of one /translate request with generation
// fields (their options in Server::custom_). An embedding server never makes translation keys and vice versa.
constexpr int64_t kOpEmbed = 1, kOpEmbedAll = 2, kOpAttention = 3, kOpLogits = 4, kOpSparse = 5, kOpTranslate = 100,
                  kPairStride = 1000, kOpGeneration = int64_t(1) << 40;
constexpr int64_t kPromptSlot = 1000;

// A translation folder's languages: config.json source_lang / target_lang, else a folder name ending in
// "-SRC-TGT" with 2- or 3-letter codes (opus-mt-en-fr, en-fr), else none ("").
std::pair<std::string, std::string> folder_languages(const std::string& dir, const json& cj, const std::string& path) {
  std::string s = json_string_or(cj, "source_lang", "", path), t = json_string_or(cj, "target_lang", "", path);
  if (!s.empty() && !t.empty()) return {s, t};
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  if (auto p = name.rfind('/'); p != std::string::npos) name = name.substr(p + 1);
  auto code = [](const std::string& c) {
    return (c.size() == 2 || c.size() == 3) &&
           std::all_of(c.begin(), c.end(), [](char ch) { return ch >= 'a' && ch <= 'z'; });
  };
  const size_t b = name.rfind('-');
  if (b == std::string::npos || b == 0) return {s, t};
  const size_t a = name.rfind('-', b - 1), start = a == std::string::npos ? 0 : a + 1;
  const std::string src = name.substr(start, b - start), tgt = name.substr(b + 1);
  if (code(src) && code(tgt)) return {s.empty() ? src : s, t.empty() ? tgt : t};
  return {s, t};
}

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

// OpenAI's error object for /v1/embeddings: {"error": {"message", "type", "param", "code"}} from ours.
void to_openai_error(httplib::Response& res) {
  json j = json::parse(res.body, nullptr, false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_string()) return;
  const std::string type = res.status >= 500 ? "server_error" : "invalid_request_error";
  send_json(res, res.status,
            {{"error", {{"message", j["error"]}, {"type", type}, {"param", nullptr}, {"code", j.value("error_type", "")}}}});
}

// RFC 4648 base64 of little-endian float32 values (OpenAI's encoding_format "base64").
std::string base64_f32(const std::vector<float>& v) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int k = 0; k < 4; ++k) bytes[i * 4 + k] = (char)((u >> (8 * k)) & 0xFF);
  }
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = ((uint32_t)(unsigned char)bytes[i] << 16) |
                       (i + 1 < bytes.size() ? (uint32_t)(unsigned char)bytes[i + 1] << 8 : 0) |
                       (i + 2 < bytes.size() ? (uint32_t)(unsigned char)bytes[i + 2] : 0);
    out += t[(n >> 18) & 63];
    out += t[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? t[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? t[n & 63] : '=';
  }
  return out;
}

// application/x-www-form-urlencoded fields, percent-decoded ('+' is a space).
std::vector<std::pair<std::string, std::string>> parse_urlencoded(const std::string& body) {
  auto decode = [](const std::string& s) {
    std::string o;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '+') {
        o += ' ';
      } else if (s[i] == '%' && i + 2 < s.size() && std::isxdigit((unsigned char)s[i + 1]) &&
                 std::isxdigit((unsigned char)s[i + 2])) {
        o += (char)std::stoi(s.substr(i + 1, 2), nullptr, 16);
        i += 2;
      } else {
        o += s[i];
      }
    }
    return o;
  };
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  while (i <= body.size()) {
    size_t amp = body.find('&', i);
    if (amp == std::string::npos) amp = body.size();
    const std::string part = body.substr(i, amp - i);
    if (!part.empty()) {
      const size_t eq = part.find('=');
      out.push_back({decode(part.substr(0, eq)), eq == std::string::npos ? "" : decode(part.substr(eq + 1))});
    }
    i = amp + 1;
  }
  return out;
}

// English names of ISO 639-1 codes, as LibreTranslate's /languages gives them.
std::string language_name(const std::string& code) {
  static const std::map<std::string, std::string> names = {
      {"ar", "Arabic"},    {"bg", "Bulgarian"}, {"ca", "Catalan"},    {"cs", "Czech"},      {"da", "Danish"},
      {"de", "German"},    {"el", "Greek"},     {"en", "English"},    {"es", "Spanish"},    {"et", "Estonian"},
      {"fa", "Persian"},   {"fi", "Finnish"},   {"fr", "French"},     {"ga", "Irish"},      {"he", "Hebrew"},
      {"hi", "Hindi"},     {"hu", "Hungarian"}, {"id", "Indonesian"}, {"it", "Italian"},    {"ja", "Japanese"},
      {"ko", "Korean"},    {"lt", "Lithuanian"}, {"lv", "Latvian"},   {"nb", "Norwegian"},  {"nl", "Dutch"},
      {"pl", "Polish"},    {"pt", "Portuguese"}, {"ro", "Romanian"},  {"ru", "Russian"},    {"sk", "Slovak"},
      {"sl", "Slovenian"}, {"sv", "Swedish"},   {"th", "Thai"},       {"tr", "Turkish"},    {"uk", "Ukrainian"},
      {"vi", "Vietnamese"}, {"zh", "Chinese"}};
  auto it = names.find(code);
  return it == names.end() ? code : it->second;
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
    translation_ = Translator::handles_model_type(model_type_);
    // Any family the library loads is served; its check names the supported model types.
    if (!translation_) Encoder::check_config(config_path);
    if (!o.extra_models.empty() && !translation_)
      throw std::runtime_error("several --model folders are served only for translation; " + o.model + " is a " +
                               model_type_ + " folder");
    if (translation_) {
      auto [s, t] = folder_languages(o.model, cj, config_path);
      source_lang_ = !o.source_lang.empty() ? o.source_lang : !s.empty() ? s : "en";
      target_lang_ = !o.target_lang.empty() ? o.target_lang : !t.empty() ? t : "fr";
      pairs_.push_back({o.model, source_lang_, target_lang_, nullptr, {}});
    }
    for (const std::string& dir : o.extra_models) {
      const std::string path = dir + "/config.json";
      const json c = load_json_file(path);
      if (const std::string mt = json_string_or(c, "model_type", "bert", path); mt != model_type_)
        throw std::runtime_error(path + ": model_type '" + mt + "'; every --model of a translation server must be a " +
                                 model_type_ + " folder");
      auto [s, t] = folder_languages(dir, c, path);
      if (s.empty() || t.empty())
        throw std::runtime_error(dir + ": no language pair: give source_lang and target_lang in its config.json or "
                                 "name the folder SRC-TGT (en-fr)");
      for (const Pair& p : pairs_)
        if (p.source == s && p.target == t)
          throw std::runtime_error("--model " + p.model + " and --model " + dir + " both translate " + s + " -> " + t);
      pairs_.push_back({dir, s, t, nullptr, {}});
    }
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
    const char* kind = translation_ ? "translation" : "embedding";
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

 private:
  void load() {
    debug_delay();
    if (translation_) {
      for (Pair& p : pairs_) {
        p.backend = std::make_unique<TranslationBackend>(p.model, o_.threads, o_.dtype);
        p.languages = p.backend->languages();  // M2M100 / NLLB: every pair of these
      }
      translator_ = pairs_.front().backend.get();
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
      try {
        embedder_ = load_encoder_embedding(o_.model, o_.pooling.empty() ? "mean" : o_.pooling, o_.threads, o_.dtype);
      } catch (const std::exception& e) {
        if (!head_ && !sparse_) throw;
        embed_error_ = e.what();  // the head still serves /predict and /rerank
      }
    }
    if (head_) head_max_length_ = head_->max_position_embeddings();
    if (sparse_) head_max_length_ = std::max(head_max_length_, sparse_->max_position_embeddings());
    // The compute type of the Linear layers: --dtype, else an encoder folder from `tfm convert --dtype int8` runs in
    // int8 (as its file is stored: metadata tfm_dtype), everything else in fp32.
    if (!o_.dtype.empty()) {
      dtype_ = o_.dtype;
    } else if (!translation_) {
      std::string st = o_.model + "/model.safetensors";
      std::error_code ec;
      if (!std::filesystem::exists(st, ec)) st = o_.model + "/0_Transformer/model.safetensors";
      if (std::filesystem::exists(st, ec)) {
        const SafeTensors file = SafeTensors::open(st);
        const nlohmann::json& meta = file.metadata();
        if (meta.is_object() && meta.contains("tfm_dtype") && meta["tfm_dtype"] == "int8") dtype_ = "int8";
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

  // Loaded weights are multiplied where they lie on their first use and packed on the second (load once, run
  // once: a one-sentence `tfm encode` never packs). A server packs them before it reports ready, by running each
  // encoder twice on a short input, so that its first requests take no longer than the rest.
  void warm_up() {
    for (int pass = 0; pass < 2; ++pass) {
      if (embedder_) {
        const TokenizedInput t = embedder_->tokenize("warm up", true, 0);
        (void)embedder_->embed({&t});
      }
      if (head_) (void)head_->logits(std::vector<std::string>{"warm up"});
      if (sparse_) (void)sparse_->sparse_embed({sparse_->tokenizer().encode("warm up")});
    }
  }

  // Runs on the queue's worker thread: the only thread that touches the model.
  void run_batch(std::vector<Task*>& batch) {
    debug_delay();
    // Embedding keys carry a prompt slot; translation keys carry the pair and the beam size (or a generation id).
    const int64_t key = translation_ ? batch[0]->key : batch[0]->key % kPromptSlot;
    if (key == kOpEmbed || key == kOpEmbedAll) {
      const std::string prompt = prompt_of_slot(batch[0]->key / kPromptSlot);
      std::vector<TokenizedInput> inputs(batch.size());
      std::vector<const TokenizedInput*> ptrs;
      for (size_t i = 0; i < batch.size(); ++i) {
        inputs[i].ids = batch[i]->ids;
        inputs[i].token_type_ids = batch[i]->token_type_ids;
        ptrs.push_back(&inputs[i]);
      }
      auto out = key == kOpEmbed ? embedder_->embed(ptrs, prompt) : embedder_->embed_all(ptrs);
      for (size_t i = 0; i < batch.size(); ++i) batch[i]->vector = std::move(out[i]);
    } else if (key == kOpSparse) {
      std::vector<TextEncoding> enc(batch.size());
      for (size_t i = 0; i < batch.size(); ++i) {
        enc[i].input_ids = batch[i]->ids;
        enc[i].token_type_ids = batch[i]->token_type_ids;
      }
      const FloatArray v = sparse_->sparse_embed(enc);
      const int64_t V = v.size(1);
      for (size_t i = 0; i < batch.size(); ++i) batch[i]->vector.assign(v.data() + i * V, v.data() + (i + 1) * V);
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
    } else if (key >= kOpGeneration) {
      std::pair<size_t, TranslateOptions> c;
      {
        std::lock_guard<std::mutex> lock(custom_mu_);
        c = custom_.at(key);
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
    } else {
      std::vector<const std::vector<int64_t>*> src;
      for (Task* t : batch) src.push_back(&t->ids);
      const int64_t k = key - kOpTranslate;
      auto out = pairs_[k / kPairStride].backend->translate(src, k % kPairStride);
      for (size_t i = 0; i < batch.size(); ++i) batch[i]->text = std::move(out[i]);
    }
  }

  // The request's connection check for the batching queue: a request whose client has disconnected is dropped
  // before its batch runs (serve/connection.h).
  static std::function<bool()> client_gone(const httplib::Request& req) {
    return client_gone_check(req.remote_addr, req.remote_port, req.local_port);
  }

  // Where a request's time went, for its access-log line; per connection thread, reset as each request starts.
  // Negative: the request had no such stage.
  struct StageTimes {
    double tokenize_s = -1, queue_s = -1, inference_s = -1;
    std::chrono::steady_clock::time_point ran;  // when its last batch finished
  };
  static StageTimes& stage_times() {
    thread_local StageTimes t;
    return t;
  }
  void observe_tokenization(double seconds) {
    metrics_.observe_tokenization(seconds);
    stage_times().tokenize_s = seconds;
  }
  // Runs a request's tasks through the queue (BatchQueue::run), noting its queue and model time.
  void run_queued(std::vector<Task>& tasks, const httplib::Request& req) {
    const RunTimes t = queue_->run(tasks, client_gone(req));
    StageTimes& st = stage_times();
    st.queue_s = std::max(st.queue_s, 0.0) + t.queue_s;  // a route may run the queue more than once
    st.inference_s = std::max(st.inference_s, 0.0) + t.inference_s;
    st.ran = std::chrono::steady_clock::now();
  }

  // Wraps a handler: API key, readiness, the concurrency limit, errors as JSON.
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  httplib::Server::Handler guard(Handler h, bool model_route) {
    return [this, h, model_route](const httplib::Request& req, httplib::Response& res) {
      struct OpenAiErrors {  // /v1/embeddings answers errors in OpenAI's shape
        const httplib::Request& req;
        httplib::Response& res;
        ~OpenAiErrors() {
          if (req.path == "/v1/embeddings" && res.status >= 400) to_openai_error(res);
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
    std::string got = req.get_header_value("Authorization");
    const std::string want = "Bearer " + o_.api_key;
    if (got.empty() && req.path == "/translate") {  // LibreTranslate clients send the key as the api_key field
      json j = parse_shallow(json_body(req, true));
      if (j.is_object() && j.contains("api_key") && j["api_key"].is_string()) got = "Bearer " + j["api_key"].get<std::string>();
    }
    if (got.size() != want.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff |= (unsigned char)(got[i] ^ want[i]);
    return diff == 0;
  }

  // The batch-key slot of a prompt name ("" = the server's own prompt: slot 0).
  int64_t prompt_slot(const std::string& name) {
    std::lock_guard<std::mutex> lock(prompt_mu_);
    for (size_t i = 0; i < prompt_slots_.size(); ++i)
      if (prompt_slots_[i] == name) return (int64_t)i;
    prompt_slots_.push_back(name);
    return (int64_t)prompt_slots_.size() - 1;
  }
  std::string prompt_of_slot(int64_t slot) {
    std::lock_guard<std::mutex> lock(prompt_mu_);
    return slot > 0 && slot < (int64_t)prompt_slots_.size() ? prompt_slots_[slot] : std::string();
  }

  // Cuts `t` to `limit` tokens from the left, as tokenizers' TruncationDirection::Left: the leading and trailing
  // special tokens stay, the text's first tokens go.
  static void truncate_left(TokenizedInput& t, int64_t limit) {
    const int64_t n = (int64_t)t.ids.size();
    if (n <= limit) return;
    int64_t lead = 0, trail = 0;
    while (lead < n && lead < (int64_t)t.special.size() && t.special[lead]) ++lead;
    while (trail < n - lead && t.special[n - 1 - trail]) ++trail;
    if (lead + trail >= limit) lead = trail = 0;  // no room for text: plain cut
    const int64_t keep = limit - lead - trail, from = n - trail - keep;
    auto cut = [&](auto& v) {
      if ((int64_t)v.size() != n) return;
      auto w = v;
      w.erase(w.begin() + lead, w.begin() + from);
      v = std::move(w);
    };
    cut(t.ids), cut(t.token_type_ids), cut(t.tokens), cut(t.special), cut(t.offsets);
  }

  // Tokenizes every input for the encoder (token-id inputs used as given), 422 over the limit unless truncating
  // (from the right, or the left with truncation_direction Left). `limit`: 0 = the server's max input length.
  std::vector<Task> embed_tasks(const EmbedRequest& r, int64_t op, const char* field, int64_t vocab_size,
                                int64_t limit = 0,
                                const std::function<TokenizedInput(const std::string&, int64_t)>& tokenize = {}) {
    if (!limit) limit = max_input_length_;
    const auto t0 = std::chrono::steady_clock::now();
    const bool truncate = r.truncate.value_or(o_.auto_truncate);
    const std::string prompt = r.prompt_name.value_or("");
    const int64_t slot = op == kOpEmbed && !prompt.empty() ? prompt_slot(prompt) : 0;
    std::vector<Task> tasks(r.inputs.size());
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      const std::string where = std::string("`") + field + (r.single ? "" : "[" + std::to_string(i) + "]") + "`";
      TokenizedInput t;
      if (!r.token_ids[i].empty()) {
        t.ids = r.token_ids[i];
        t.token_type_ids.assign(t.ids.size(), 0);
        for (int64_t id : t.ids)
          if (id >= vocab_size)
            throw validation_error(where + ": token id " + std::to_string(id) + " is not below the vocabulary size " +
                                   std::to_string(vocab_size));
        if (truncate && (int64_t)t.ids.size() > limit) {
          if (r.truncate_left) {
            t.ids.erase(t.ids.begin(), t.ids.end() - limit);
          } else {
            t.ids.resize(limit);
          }
          t.token_type_ids.resize(limit);
        }
      } else {
        t = tokenize ? tokenize(r.inputs[i], truncate && !r.truncate_left ? limit : 0)
                     : embedder_->tokenize(r.inputs[i], true, truncate && !r.truncate_left ? limit : 0, prompt);
        if (truncate && r.truncate_left) truncate_left(t, limit);
      }
      if ((int64_t)t.ids.size() > limit)
        throw validation_error(where + " has " + std::to_string(t.ids.size()) +
                               " tokens, more than the model's limit of " + std::to_string(limit) +
                               " (max_input_length); send \"truncate\": true or start the server with --auto-truncate");
      tasks[i].key = op + kPromptSlot * slot;
      tasks[i].tokens = (int64_t)t.ids.size();
      tasks[i].ids = std::move(t.ids);
      tasks[i].token_type_ids = std::move(t.token_type_ids);
    }
    observe_tokenization(seconds_since(t0));
    return tasks;
  }
  std::vector<Task> embed_tasks(const EmbedRequest& r, int64_t op, const char* field) {
    need_embedder();
    if (op == kOpEmbedAll && !embedder_->has_token_embeddings()) embedder_->embed_all({});  // throws its 501
    return embed_tasks(r, op, field, embedder_->vocab_size());
  }

  // A pooled vector as the request asks: the first `dimensions` values (Matryoshka, as sentence-transformers'
  // truncate_dim), then L2-normalised when `normalize`.
  static std::vector<float> finish(std::vector<float> v, int64_t dimensions, bool normalize) {
    if (dimensions > (int64_t)v.size())
      throw validation_error("`dimensions` " + std::to_string(dimensions) + " is more than the embedding size " +
                             std::to_string(v.size()));
    if (dimensions > 0) v.resize(dimensions);
    return normalize ? l2_normalized(std::move(v)) : v;
  }
  void check_dimensions(const EmbedRequest& r) const {
    if (r.dimensions > embedder_->hidden_size())
      throw validation_error("`dimensions` " + std::to_string(r.dimensions) + " is more than the embedding size " +
                             std::to_string(embedder_->hidden_size()));
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
    observe_tokenization(seconds_since(t0));
    return tasks;
  }

  // Every route this server answers: path -> methods (405 with Allow for another method; /openapi.json).
  struct RouteDoc {
    std::string summary;
    bool has_body = false;
  };
  std::map<std::string, std::map<std::string, RouteDoc>> route_table_;

  void add(const std::string& method, const std::string& path, const std::string& summary, httplib::Server::Handler h) {
    route_table_[path][method] = RouteDoc{summary, method == "POST"};
    if (method == "GET")
      svr_.Get(path, std::move(h));
    else
      svr_.Post(path, std::move(h));
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

  std::string allow_header(const std::string& path) const {
    std::string allow;
    auto it = route_table_.find(path);
    if (it == route_table_.end()) return allow;
    for (const auto& [m, d] : it->second) {
      allow += (allow.empty() ? "" : ", ") + m;
      if (m == "GET") allow += ", HEAD";
    }
    return allow + ", OPTIONS";
  }

  // OpenAPI 3.0 description of route_table_.
  json openapi() const {
    json paths = json::object();
    for (const auto& [path, methods] : route_table_) {
      json item = json::object();
      for (const auto& [m, d] : methods) {
        json op = {{"summary", d.summary},
                   {"operationId", (m == "GET" ? "get" : "post") + std::string(path == "/" ? "_page" : path)},
                   {"responses",
                    {{"200", {{"description", "success"}}},
                     {"4XX", {{"description", "{\"error\": message, \"error_type\": type}"}}}}}};
        if (d.has_body)
          op["requestBody"] = {{"required", true},
                               {"content", {{"application/json", {{"schema", {{"type", "object"}}}}}}}};
        std::string lower = m;
        for (char& c : lower) c = (char)std::tolower((unsigned char)c);
        item[lower] = op;
      }
      paths[path] = item;
    }
    return {{"openapi", "3.0.3"},
            {"info", {{"title", "tfm serve"}, {"version", "1"},
                      {"description", std::string("transformer.cpp serving ") + model_id_ + " (" +
                                          (translation_ ? "translation" : "embedding") + " model)"}}},
            {"paths", paths}};
  }

  void routes() {
    svr_.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
      request_start() = std::chrono::steady_clock::now();
      stage_times() = StageTimes{};
      return httplib::Server::HandlerResponse::Unhandled;
    });
    if (!o_.cors_allow_origin.empty()) {
      // A browser page from that origin may call the API (its preflight OPTIONS answered below).
      httplib::Headers h = {{"Access-Control-Allow-Origin", o_.cors_allow_origin},
                            {"Access-Control-Expose-Headers", "Content-Type"}};
      if (o_.cors_allow_origin != "*") h.emplace("Vary", "Origin");
      svr_.set_default_headers(h);
    }
    svr_.Options(".*", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string allow = allow_header(req.path);
      if (allow.empty()) return send_error(res, 404, "not_found", "no route " + req.path);
      res.status = 204;
      res.set_header("Allow", allow);
      if (!o_.cors_allow_origin.empty()) {
        res.set_header("Access-Control-Allow-Methods", allow);
        res.set_header("Access-Control-Allow-Headers", "Content-Type, Authorization");
        res.set_header("Access-Control-Max-Age", "600");
      }
    });
    svr_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      // cpp-httplib (a compiled library) refuses an application/x-www-form-urlencoded body over 8192 bytes before
      // any route sees it, JSON sent by a plain `curl -d` included.
      const bool form = req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0;
      const uint64_t length = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
      if (res.status == 413 && form && length <= (uint64_t)o_.payload_limit)
        send_error(res, 413, "payload_too_large",
                   "an application/x-www-form-urlencoded body is limited to " +
                       std::to_string(CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH) +
                       " bytes; send JSON with Content-Type: application/json");
      else if (res.status == 413)
        send_error(res, 413, "payload_too_large",
                   "request body over " + std::to_string(o_.payload_limit) + " bytes (--payload-limit)");
      else if (res.status == 404 && route_table_.count(req.path)) {
        const std::string allow = allow_header(req.path);
        res.set_header("Allow", allow);
        send_error(res, 405, "method_not_allowed",
                   req.method + " " + req.path + " is not allowed (Allow: " + allow + ")");
      } else if (res.status == 404)
        send_error(res, 404, "not_found", "no route " + req.method + " " + req.path + " (GET /openapi.json lists them)");
      else
        send_error(res, res.status, "http", "HTTP error " + std::to_string(res.status));
      if (req.path == "/v1/embeddings") to_openai_error(res);
    });
    svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      const double ms = seconds_since(request_start()) * 1e3;
      const bool is_known = route_table_.count(req.path) > 0;
      metrics_.count_request(is_known ? req.path : "other", res.status);
      if (!o_.access_log) return;
      char when[32];
      std::time_t now = std::time(nullptr);
      std::tm tm;
      gmtime_r(&now, &tm);
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
      // A model request also says where its time went (as text-embeddings-inference logs it): tokenization,
      // waiting in the queue, the model's batches, and the answer (serialising and writing it).
      const StageTimes st = std::exchange(stage_times(), StageTimes{});  // a request httplib answers itself
                                                                         // (413) skips the pre-routing reset
      char stages[160] = "";
      if (st.inference_s >= 0)
        std::snprintf(stages, sizeof stages, " (tokenize %.1fms, queue %.1fms, model %.1fms, answer %.1fms)",
                      std::max(st.tokenize_s, 0.0) * 1e3, st.queue_s * 1e3, st.inference_s * 1e3,
                      seconds_since(st.ran) * 1e3);
      std::fprintf(stderr, "%s %s \"%s %s\" %d %zu %.1fms%s\n", when, req.remote_addr.c_str(), req.method.c_str(),
                   req.path.c_str(), res.status, res.body.size(), ms, stages);
    });

    // The page is static (no model data) and needs no key: a browser cannot send one for the page itself; its
    // scripts send the key typed into it.
    add("GET", "/", "the web page", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(web_page_html(), "text/html; charset=utf-8");
    });
    add("GET", "/health", "200 once the model is loaded, else 503", [this](const httplib::Request&, httplib::Response& res) {
      if (ready_)
        send_json(res, 200, {{"status", "ok"}});
      else
        send_error(res, 503, "unhealthy", "the model is still loading");
    });
    add("GET", "/metrics", "Prometheus metrics", guard([this](const httplib::Request&, httplib::Response& res) {
               res.set_content(metrics_.render(), "text/plain; version=0.0.4");
             }, false));
    add("GET", "/info", "the model and the server's limits",
        guard([this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, info()); }, false));
    add("GET", "/openapi.json", "this document",
        guard([this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, openapi()); }, false));

    if (!translation_) {
      add("POST", "/embed", "text-embeddings-inference /embed: pooled embeddings",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  EmbedRequest r = parse_embed_request(json_body(req), limits_, EmbedRoute::Embed);
                  need_embedder();
                  check_dimensions(r);
                  std::vector<Task> tasks = embed_tasks(r, kOpEmbed, "inputs");
                  run_queued(tasks, req);
                  json out = json::array();
                  for (Task& t : tasks) out.push_back(finish(std::move(t.vector), r.dimensions, r.normalize));
                  send_json(res, 200, out);
                }, true));
      add("POST", "/embed_all", "text-embeddings-inference /embed_all: every token's embedding",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  EmbedRequest r = parse_embed_request(json_body(req), limits_, EmbedRoute::EmbedAll);
                  std::vector<Task> tasks = embed_tasks(r, kOpEmbedAll, "inputs");
                  run_queued(tasks, req);
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
      add("POST", "/v1/embeddings", "OpenAI embeddings",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  EmbedRequest r = parse_embed_request(json_body(req), limits_, EmbedRoute::OpenAI);
                  need_embedder();
                  check_dimensions(r);
                  std::vector<Task> tasks = embed_tasks(r, kOpEmbed, "input");
                  run_queued(tasks, req);
                  json data = json::array();
                  int64_t tokens = 0;
                  for (size_t i = 0; i < tasks.size(); ++i) {
                    std::vector<float> v = finish(std::move(tasks[i].vector), r.dimensions, true);
                    data.push_back({{"object", "embedding"}, {"embedding", r.base64 ? json(base64_f32(v)) : json(v)},
                                    {"index", i}});
                    tokens += tasks[i].tokens;
                  }
                  send_json(res, 200, {{"object", "list"}, {"data", data},
                                       {"model", r.model.empty() ? model_id_ : r.model},
                                       {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
                }, true));
      add("POST", "/similarity", "text-embeddings-inference /similarity: cosine similarity to a source sentence",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  SimilarityRequest s = parse_similarity_request(json_body(req), limits_);
                  EmbedRequest r;
                  r.inputs.push_back(s.source_sentence);
                  r.inputs.insert(r.inputs.end(), s.sentences.begin(), s.sentences.end());
                  r.token_ids.assign(r.inputs.size(), {});
                  r.truncate = s.truncate;
                  r.truncate_left = s.truncate_left;
                  r.prompt_name = s.prompt_name;
                  std::vector<Task> tasks = embed_tasks(r, kOpEmbed, "inputs");
                  run_queued(tasks, req);
                  const std::vector<float> a = l2_normalized(tasks[0].vector);
                  json out = json::array();
                  for (size_t i = 1; i < tasks.size(); ++i) {
                    const std::vector<float> b = l2_normalized(tasks[i].vector);
                    double dot = 0;
                    for (size_t k = 0; k < a.size(); ++k) dot += (double)a[k] * b[k];
                    out.push_back((float)dot);
                  }
                  send_json(res, 200, out);
                }, true));
      add("POST", "/embed_sparse", "text-embeddings-inference /embed_sparse: SPLADE of a masked-LM checkpoint",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  if (!sparse_)
                    throw ApiError(501, "not_implemented",
                                   "/embed_sparse needs a masked-LM checkpoint (config.json architectures "
                                   "BertForMaskedLM, a SPLADE model); " + o_.model + " has no masked-LM head");
                  EmbedRequest r = parse_embed_request(json_body(req), limits_, EmbedRoute::EmbedSparse);
                  if (r.prompt_name)
                    throw validation_error("`prompt_name`: " + o_.model +
                                           " is not a sentence-transformers folder, so it has no prompts");
                  const MaskFiller& mf = *sparse_;
                  std::vector<Task> tasks = embed_tasks(
                      r, kOpSparse, "inputs", mf.vocab_size(), mf.max_position_embeddings(),
                      [&mf](const std::string& text, int64_t max_length) {
                        TokenizeOptions to;
                        to.max_length = max_length;
                        TextEncoding e = mf.tokenizer().encode(text, to);
                        TokenizedInput t;
                        t.ids = std::move(e.input_ids), t.token_type_ids = std::move(e.token_type_ids);
                        t.tokens = std::move(e.tokens), t.special = std::move(e.special);
                        return t;
                      });
                  run_queued(tasks, req);
                  json out = json::array();
                  for (Task& t : tasks) {
                    json one = json::array();
                    for (size_t k = 0; k < t.vector.size(); ++k)
                      if (t.vector[k] > 0) one.push_back({{"index", k}, {"value", t.vector[k]}});
                    out.push_back(one);
                  }
                  send_json(res, 200, out);
                }, true));
      add("POST", "/tokenize", "text-embeddings-inference /tokenize",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  TokenizeRequest r = parse_tokenize_request(json_body(req), limits_);
                  const auto t0 = std::chrono::steady_clock::now();
                  json out = json::array();
                  need_embedder();
                  for (const auto& text : r.inputs) {
                    TokenizedInput t = embedder_->tokenize(text, r.add_special_tokens, 0, r.prompt_name.value_or(""));
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
                  observe_tokenization(seconds_since(t0));
                  send_json(res, 200, out);
                }, true));
      // text-embeddings-inference /decode: the text of each list of ids.
      add("POST", "/decode", "text-embeddings-inference /decode: token ids to text",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  DecodeRequest r = parse_decode_request(json_body(req), limits_);
                  need_embedder();
                  json out = json::array();
                  // Ids without a token are skipped, as tokenizers' decode (and the CLI and Python) do.
                  for (const auto& ids : r.ids) out.push_back(embedder_->decode(ids, r.skip_special_tokens));
                  send_json(res, 200, out);
                }, true));
      // text-embeddings-inference /predict: per input every label with its score, best first.
      add("POST", "/predict", "text-embeddings-inference /predict: sequence classification",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  need_head("/predict");
                  PredictRequest r = parse_predict_request(json_body(req), limits_);
                  std::vector<Task> tasks = logit_tasks(r.texts, &r.pairs, r.truncate.value_or(o_.auto_truncate),
                                                        r.single, "inputs");
                  run_queued(tasks, req);
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
      add("POST", "/rerank", "text-embeddings-inference /rerank: cross-encoder scores, best first",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  need_head("/rerank");
                  const int64_t C = head_->num_labels();
                  if (C > 2)
                    throw ApiError(400, "not_a_reranker",
                                   o_.model + " has " + std::to_string(C) +
                                       " labels; /rerank needs a cross-encoder with one (or two) labels (use /predict)");
                  RerankRequest r = parse_rerank_request(json_body(req), limits_);
                  std::vector<std::string> queries(r.texts.size(), r.query);
                  std::vector<Task> tasks =
                      logit_tasks(queries, &r.texts, r.truncate.value_or(o_.auto_truncate), false, "texts");
                  run_queued(tasks, req);
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
      add("POST", "/translate", "LibreTranslate /translate (JSON or form body)",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  TranslateRequest r = parse_translate_request(json_body(req, true), limits_, o_.max_beam_size);
                  const size_t pair = route(r.source, r.target);
                  TranslationBackend& backend = *pairs_[pair].backend;
                  // A multilingual folder translates into `target` (its forced first token) from `source`.
                  TranslateOptions langs;
                  const bool multilingual = !pairs_[pair].languages.empty();
                  if (multilingual && pairs_[pair].speaks(r.target)) {
                    langs.target_lang = r.target;
                    if (pairs_[pair].speaks(r.source)) langs.source_lang = r.source;
                  }
                  const auto t0 = std::chrono::steady_clock::now();
                  std::vector<Task> tasks(r.q.size());
                  for (size_t i = 0; i < r.q.size(); ++i) {
                    try {
                      tasks[i].ids = backend.encode_source(r.q[i], r.truncate.value_or(o_.auto_truncate), langs);
                    } catch (const ApiError& e) {
                      throw validation_error(std::string("`q") + (r.single ? "" : "[" + std::to_string(i) + "]") +
                                             "`: " + e.what());
                    }
                    tasks[i].key = kOpTranslate + (int64_t)pair * kPairStride + r.beam_size;
                    tasks[i].tokens = (int64_t)tasks[i].ids.size();
                    if (!r.target_prefix.empty()) tasks[i].target_prefix = r.target_prefix[i];
                  }
                  observe_tokenization(seconds_since(t0));
                  // Generation fields: this request's tasks batch on their own, with its options.
                  int64_t key = 0;
                  if (r.generation || multilingual || r.alternatives > 0) {
                    TranslateOptions o = langs;
                    o.beam_size = r.beam_size;
                    if (r.alternatives > 0) {  // LibreTranslate's alternatives: the beam's next best hypotheses
                      o.num_hypotheses = r.alternatives + 1;
                      o.beam_size = std::max(o.beam_size, o.num_hypotheses);
                    }
                    o.sampling_topk = r.sampling_topk;
                    o.sampling_topp = (float)r.sampling_topp;
                    o.sampling_temperature = (float)r.sampling_temperature;
                    o.seed = r.seed;
                    o.repetition_penalty = (float)r.repetition_penalty;
                    o.no_repeat_ngram_size = r.no_repeat_ngram_size;
                    o.min_length = r.min_length;
                    o.max_steps = r.max_new_tokens;
                    o.length_penalty = (float)r.length_penalty;
                    o.early_stopping = r.early_stopping;
                    o.forced_eos = r.forced_eos;
                    o.bad_words_ids = r.bad_words_ids;
                    for (const std::string& w : r.bad_words) {
                      std::vector<int64_t> ids = backend.encode_target(w);
                      if (ids.empty()) throw validation_error("`bad_words`: '" + excerpt(w) + "' has no target token");
                      o.bad_words_ids.push_back(std::move(ids));
                    }
                    if (o.sampling_topk != 1 && o.beam_size > 1)
                      throw validation_error("`sampling_topk` " + std::to_string(o.sampling_topk) +
                                             " samples one token a step; it needs `beam_size` 1");
                    std::lock_guard<std::mutex> lock(custom_mu_);
                    key = kOpGeneration + next_custom_++;
                    custom_[key] = {pair, o};
                    for (Task& t : tasks) t.key = key;
                  }
                  struct Forget {  // the options go when the request ends, however it ends
                    Server* s;
                    int64_t key;
                    ~Forget() {
                      if (!key) return;
                      std::lock_guard<std::mutex> lock(s->custom_mu_);
                      s->custom_.erase(key);
                    }
                  } forget{this, key};
                  run_queued(tasks, req);
                  json alt = json::array();
                  if (r.single) {
                    json out = {{"translatedText", tasks[0].text}};
                    if (has_field(req, "alternatives")) out["alternatives"] = tasks[0].alternatives;
                    return send_json(res, 200, out);
                  }
                  json out = json::array();
                  for (Task& t : tasks) out.push_back(t.text), alt.push_back(t.alternatives);
                  json body = {{"translatedText", out}};
                  if (has_field(req, "alternatives")) body["alternatives"] = alt;
                  send_json(res, 200, body);
                }, true));
      add("POST", "/attention", "the web page's attention maps",
          guard([this](const httplib::Request& req, httplib::Response& res) {
                  std::string q = parse_attention_request(json_body(req), limits_);
                  std::vector<Task> tasks(1);
                  tasks[0].key = kOpAttention;
                  tasks[0].ids = translator_->encode_source(q, o_.auto_truncate);
                  tasks[0].tokens = (int64_t)tasks[0].ids.size();
                  run_queued(tasks, req);
                  res.set_content(tasks[0].json, "application/json");
                }, true));
      add("GET", "/languages", "LibreTranslate /languages",
          guard([this](const httplib::Request&, httplib::Response& res) {
                 json out = json::array();  // LibreTranslate: one entry per source language with its targets
                 for (const Pair& p : pairs_) {
                   auto it = std::find_if(out.begin(), out.end(), [&](const json& e) { return e["code"] == p.source; });
                   if (it == out.end())
                     out.push_back({{"code", p.source}, {"name", language_name(p.source)},
                                    {"targets", json::array({p.target})}});
                   else
                     (*it)["targets"].push_back(p.target);
                 }
                 for (const Pair& p : pairs_)  // a multilingual folder: each of its languages into the others
                   for (const std::string& code : p.languages) {
                     auto it = std::find_if(out.begin(), out.end(), [&](const json& e) { return e["code"] == code; });
                     if (it == out.end()) {
                       out.push_back({{"code", code}, {"name", language_name(code)}, {"targets", json::array()}});
                       it = out.end() - 1;
                     }
                     for (const std::string& t : p.languages)
                       if (t != code && std::find((*it)["targets"].begin(), (*it)["targets"].end(), t) ==
                                            (*it)["targets"].end())
                         (*it)["targets"].push_back(t);
                   }
                 for (const Pair& p : pairs_) {  // every language served, a target-only one without targets
                   auto it = std::find_if(out.begin(), out.end(), [&](const json& e) { return e["code"] == p.target; });
                   if (it == out.end())
                     out.push_back({{"code", p.target}, {"name", language_name(p.target)}, {"targets", json::array()}});
                 }
                 send_json(res, 200, out);
               }, false));
      for (const char* path : {"/embed", "/embed_all", "/v1/embeddings", "/tokenize", "/decode", "/predict", "/rerank",
                               "/similarity", "/embed_sparse"})
        not_for_this_model(path, "an encoder model (bert, transformer_encoder)");
    }
  }

  // The body parsed as JSON, or a discarded value when it is not JSON or nests deeper than kMaxJsonDepth (the
  // route's own parse then answers 422).
  static json parse_shallow(const std::string& body) {
    try {
      check_json_depth(body);
    } catch (const ApiError&) {
      return json(json::value_t::discarded);
    }
    return json::parse(body, nullptr, false);
  }
  // A request body as JSON text, for every route. A body that starts with '{' (after white space) is JSON
  // whatever its Content-Type: `curl -d '{...}'` sends application/x-www-form-urlencoded, and LibreTranslate reads
  // such a body as JSON too. Otherwise, where the route takes forms (`forms`: /translate), the fields of an
  // urlencoded or multipart form as a JSON object (form_to_json); else the body as it is.
  static std::string json_body(const httplib::Request& req, bool forms = false) {
    const size_t start = req.body.find_first_not_of(" \t\r\n");
    if (start != std::string::npos && req.body[start] == '{') return req.body;
    if (!forms) return req.body;
    const std::string ct = req.get_header_value("Content-Type");
    if (ct.rfind("application/x-www-form-urlencoded", 0) == 0) return form_to_json(parse_urlencoded(req.body));
    if (ct.rfind("multipart/form-data", 0) == 0) {
      std::vector<std::pair<std::string, std::string>> f;
      for (const auto& [name, part] : req.files) f.push_back({name, part.content});
      return form_to_json(f);
    }
    return req.body;
  }
  static bool has_field(const httplib::Request& req, const char* field) {
    json j = parse_shallow(json_body(req, true));
    return j.is_object() && j.contains(field);
  }

  // The pair serving source -> target ("auto": the first pair into target), or 422 naming the pairs served.
  size_t route(const std::string& source, const std::string& target) const {
    std::string served;
    for (const Pair& p : pairs_) served += (served.empty() ? "" : ", ") + p.source + " -> " + p.target;
    const char* what = pairs_.size() == 1 ? "this model translates " : "this server translates ";
    bool source_known = source == "auto";
    for (size_t i = 0; i < pairs_.size(); ++i) {
      source_known |= pairs_[i].source == source;
      if ((source == "auto" || pairs_[i].source == source) && pairs_[i].target == target) return i;
    }
    for (size_t i = 0; i < pairs_.size(); ++i) {  // multilingual folders: any of their languages
      const Pair& p = pairs_[i];
      if (p.languages.empty()) continue;
      served += ", " + std::to_string(p.languages.size()) + " languages (" + p.model + ")";
      source_known |= p.speaks(source);
      if ((source == "auto" || p.speaks(source)) && p.speaks(target) && source != target) return i;
    }
    if (!source_known)
      throw validation_error("`source` '" + excerpt(source) + "' is not supported: " + what + served + " (GET /languages)");
    throw validation_error("`target` '" + excerpt(target) + "' is not supported: " + what + served + " (GET /languages)");
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
      j["pairs"] = json::array();
      for (const Pair& p : pairs_) j["pairs"].push_back({{"source", p.source}, {"target", p.target}, {"model", p.model}});
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
  std::map<int64_t, std::pair<size_t, TranslateOptions>> custom_;  // kOpGeneration keys in flight
  int64_t next_custom_ = 0;          // translation: one per --model, the first is translator_ (/attention)
  TranslationBackend* translator_ = nullptr;
  std::unique_ptr<Classifier> head_;  // sequence classification / cross-encoder, when the folder has one
  std::unique_ptr<MaskFiller> sparse_;  // masked-LM head: /embed_sparse
  std::mutex prompt_mu_;
  std::vector<std::string> prompt_slots_{""};
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
