#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <utility>

#include "serve/server_core.h"
#include "serve/web_page.h"

namespace tfm::serve {

using nlohmann::json;

void Server::hooks() {
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
      // The headers the request will send, as the browser lists them (the openai client's x-stainless-*), else
      // the two a plain call needs.
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Content-Type, Authorization" : asked);
      if (!asked.empty()) res.set_header("Vary", "Access-Control-Request-Headers");
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
    else if (res.status == 404 && !route_of(req.path).empty()) {
      const std::string allow = allow_header(req.path);
      res.set_header("Allow", allow);
      send_error(res, 405, "method_not_allowed",
                 req.method + " " + req.path + " is not allowed (Allow: " + allow + ")");
    } else if (res.status == 404)
      send_error(res, 404, "not_found", "no route " + req.method + " " + req.path + " (GET /openapi.json lists them)");
    else
      send_error(res, res.status, "http", "HTTP error " + std::to_string(res.status));
    if (openai_route(req.path)) to_openai_error(res);
  });
  svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double ms = seconds_since(request_start()) * 1e3;
    const std::string route = route_of(req.path);
    metrics_.count_request(route.empty() ? "other" : route, res.status);
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
    const std::string warning = res.get_header_value("Warning");  // fields the request sent that were ignored
    std::fprintf(stderr, "%s %s \"%s %s\" %d %zu %.1fms%s%s%s\n", when, req.remote_addr.c_str(), req.method.c_str(),
                 req.path.c_str(), res.status, res.body.size(), ms, stages, warning.empty() ? "" : " warning: ",
                 warning.empty() ? "" : warning.substr(std::min<size_t>(warning.find('"') + 1, warning.size())).c_str());
  });
}

void Server::meta_routes() {
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
  // POST / and /invocations (SageMaker's path) answer as the route of the model's task, so that clients pointed at
  // the server's root (the Hugging Face Inference client's endpointUrl) work.
  for (const char* path : {"/", "/invocations"})
    add("POST", path, "the model's task: /embed, /predict, /rerank or /translate (GET /info model_kind)",
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!ready_) return send_error(res, 503, "unhealthy", "the model is still loading");
          handlers_.at("POST " + task_route())(req, res);
        });
  // OpenAI's model list, which tools call to discover or check the model: the one this server runs.
  auto model_object = [this] {
    return json{{"id", model_id_}, {"object", "model"}, {"created", started_}, {"owned_by", "tfm"}};
  };
  add("GET", "/v1/models", "OpenAI models: the model this server runs",
      guard([model_object](const httplib::Request&, httplib::Response& res) {
              send_json(res, 200, {{"object", "list"}, {"data", json::array({model_object()})}});
            }, false));
  add("GET", "/v1/models/{model}", "OpenAI model: this server's model, else 404",
      guard([this, model_object](const httplib::Request& req, httplib::Response& res) {
              const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
              if (id != model_id_)
                return send_error(res, 404, "model_not_found",
                                  "The model '" + excerpt(id) + "' does not exist; this server runs '" + model_id_ +
                                      "' (GET /v1/models)");
              send_json(res, 200, model_object());
            }, false));
}

// OpenAPI 3.0 description of route_table_.
json Server::openapi() const {
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
                                        model_kind_ + " model)"}}},
          {"paths", paths}};
}

std::string Server::task_route() const {
  if (translation_) return "/translate";
  if (model_kind_ == "classifier" || model_kind_ == "token-classification" || model_kind_ == "fill-mask")
    return "/predict";
  if (model_kind_ == "reranker") return "/rerank";
  if (model_kind_ == "question-answering") return "/question-answering";
  return "/embed";
}

json Server::info() const {
  json j = {{"model_id", model_id_},
            {"model_type", model_type_},
            {"model_kind", model_kind_},
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

}  // namespace tfm::serve
