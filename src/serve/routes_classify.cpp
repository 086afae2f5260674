#include <numeric>

#include "serve/server_core.h"

namespace tfm::serve {

using nlohmann::json;

// A sequence-classification head, or 501 naming what the folder holds instead.
void Server::need_head(const std::string& path) const {
  if (head_) return;
  throw ApiError(501, "not_implemented",
                 path + " needs a model with a sequence-classification / cross-encoder head "
                        "(config.json architectures BertForSequenceClassification); " +
                     o_.model + " has none, so it is served for /embed only");
}

// Tokenizes (text, pair) inputs for the head (422 over max_position_embeddings unless truncating).
std::vector<Task> Server::logit_tasks(const std::vector<std::string>& texts, const std::vector<std::string>* pairs,
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
    tasks[i].key = BatchKey{.op = BatchKey::Op::Logits};
    tasks[i].tokens = (int64_t)e.input_ids.size();
    tasks[i].ids = e.input_ids;
    tasks[i].token_type_ids = e.token_type_ids;
  }
  observe_tokenization(seconds_since(t0));
  return tasks;
}

void Server::classify_routes() {
  if (translation_) {
    for (const char* path : {"/predict", "/rerank"})
      not_for_this_model(path, "an encoder model");
    return;
  }
  // text-embeddings-inference /predict: per input every label with its score, best first.
  add("POST", "/predict", "text-embeddings-inference /predict: sequence classification",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              need_head("/predict");
              PredictRequest r = parse_predict_request(json_body(req), limits_);
              std::vector<Task> tasks = logit_tasks(r.texts, &r.pairs, r.truncate.value_or(o_.auto_truncate),
                                                    r.single, "inputs");
              run_queued(tasks, req);
              const std::string& fn = r.function;  // "": the pipeline's default
              const auto& labels = head_->labels();
              json out = json::array();
              for (Task& t : tasks) {
                std::vector<float> sc = head_->scores(t.vector.data(), fn);
                std::vector<size_t> order(sc.size());
                std::iota(order.begin(), order.end(), 0);
                std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sc[a] > sc[b]; });
                json one = json::array();
                if (r.top_k > 0 && (size_t)r.top_k < order.size()) order.resize(r.top_k);
                for (size_t k : order) one.push_back({{"score", sc[k]}, {"label", labels[k]}});
                out.push_back(one);
              }
              // The Hugging Face Inference API (a request with `parameters`, or at / and /invocations) answers a
              // list of labels per input, one input included; text-embeddings-inference's /predict the labels.
              const bool nested = r.hf_inference || req.path != "/predict";
              send_json(res, 200, r.single && !nested ? out[0] : out);
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
}

}  // namespace tfm::serve
