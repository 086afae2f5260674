#include <numeric>

#include "serve/server_core.h"
#include "tfm/pipeline.h"

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

std::vector<TextEncoding> Server::head_encodings(const Tokenizer& tok, const std::vector<std::string>& texts,
                                                 bool truncate, int64_t limit, bool single) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<TextEncoding> enc;
  TokenizeOptions to;
  to.max_length = truncate ? limit : 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    enc.push_back(tok.encode(texts[i], to));
    if ((int64_t)enc.back().input_ids.size() > limit)
      throw validation_error("`inputs" + (single ? std::string() : "[" + std::to_string(i) + "]") + "` has " +
                             std::to_string(enc.back().input_ids.size()) + " tokens, more than the model's limit of " +
                             std::to_string(limit) +
                             " (max_position_embeddings); send \"truncate\": true or start the server with "
                             "--auto-truncate");
  }
  observe_tokenization(seconds_since(t0));
  return enc;
}

void Server::predict_tokens(const httplib::Request& req, httplib::Response& res) {
  const TaskInputsRequest r = parse_token_classification_request(json_body(req), limits_);
  TagOptions to;
  to.aggregation_strategy = r.aggregation_strategy;
  if (r.ignore_labels) to.ignore_labels = *r.ignore_labels;
  const std::vector<TextEncoding> enc = head_encodings(tagger_->tokenizer(), r.texts, r.truncate.value_or(o_.auto_truncate),
                                                       tagger_->max_position_embeddings(), r.single);
  std::vector<std::vector<TokenTag>> tags;
  try {
    tags = tagger_->tag(enc, r.texts, to);
  } catch (const std::invalid_argument& e) {
    throw validation_error(e.what());
  }
  json out = json::array();
  for (const auto& row : tags) {
    json l = json::array();
    for (const TokenTag& t : row)
      l.push_back(t.group() ? json{{"entity_group", t.entity}, {"score", t.score}, {"word", t.word},
                                   {"start", t.start}, {"end", t.end}}
                            : json{{"entity", t.entity}, {"score", t.score}, {"index", t.index}, {"word", t.word},
                                   {"start", t.start}, {"end", t.end}});
    out.push_back(l);
  }
  send_json(res, 200, r.single ? out[0] : out);
}

void Server::predict_fill_mask(const httplib::Request& req, httplib::Response& res) {
  const TaskInputsRequest r = parse_fill_mask_request(json_body(req), limits_);
  const std::vector<TextEncoding> enc = head_encodings(sparse_->tokenizer(), r.texts, r.truncate.value_or(o_.auto_truncate),
                                                       sparse_->max_position_embeddings(), r.single);
  std::vector<std::vector<std::vector<MaskCandidate>>> filled;
  try {
    filled = sparse_->fill(enc, r.top_k);
  } catch (const std::invalid_argument& e) {
    throw validation_error(e.what());
  }
  // As the fill-mask pipeline: per input a list of candidates, or with several masks a list per mask.
  json out = json::array();
  for (const auto& masks : filled) {
    json per_mask = json::array();
    for (const auto& cands : masks) {
      json l = json::array();
      for (const MaskCandidate& c : cands)
        l.push_back({{"score", c.score}, {"token", c.token}, {"token_str", c.token_str}, {"sequence", c.sequence}});
      per_mask.push_back(l);
    }
    out.push_back(per_mask.size() == 1 ? per_mask[0] : per_mask);
  }
  send_json(res, 200, r.single ? out[0] : out);
}

void Server::zero_shot(const httplib::Request& req, httplib::Response& res) {
  const ZeroShotRequest r = parse_zero_shot_request(json_body(req), limits_);
  if (head_->num_labels() < 2)
    throw ApiError(400, "not_an_nli_model", o_.model + " has " + std::to_string(head_->num_labels()) +
                                                " label; zero-shot classification needs an NLI head");
  std::vector<std::string> premises, hypotheses;
  for (const std::string& t : r.texts)
    for (const std::string& l : r.candidate_labels)
      premises.push_back(t), hypotheses.push_back(format_hypothesis(r.hypothesis_template, l));
  std::vector<Task> tasks = logit_tasks(premises, &hypotheses, r.truncate.value_or(o_.auto_truncate), false, "inputs");
  run_queued(tasks, req);
  const int64_t C = head_->num_labels();
  const size_t n = r.candidate_labels.size();
  json out = json::array();
  for (size_t s = 0; s < r.texts.size(); ++s) {
    std::vector<float> logits;
    for (size_t k = 0; k < n; ++k) logits.insert(logits.end(), tasks[s * n + k].vector.begin(), tasks[s * n + k].vector.end());
    const ZeroShotResult z =
        zero_shot_result(r.texts[s], r.candidate_labels, logits.data(), C, head_->entailment_id(), r.multi_label);
    out.push_back({{"sequence", z.sequence}, {"labels", z.labels}, {"scores", z.scores}});
  }
  send_json(res, 200, r.single ? out[0] : out);
}

void Server::question_answering(const httplib::Request& req, httplib::Response& res) {
  if (!qa_)
    throw ApiError(501, "not_implemented",
                   "/question-answering needs a model with a question-answering head (config.json architectures "
                   "BertForQuestionAnswering); " + o_.model + " has none");
  const QuestionAnsweringRequest r = parse_question_answering_request(json_body(req), limits_);
  json out = json::array();
  for (const auto& [question, context] : r.inputs) {
    std::vector<QaAnswer> answers;
    try {
      const std::lock_guard<std::mutex> lock(qa_mu_);
      answers = qa_->answer(question, context, r.options);
    } catch (const std::invalid_argument& e) {
      throw validation_error(e.what());
    }
    json list = json::array();
    for (const QaAnswer& a : answers)
      list.push_back({{"score", a.score}, {"start", a.start}, {"end", a.end}, {"answer", a.answer}});
    out.push_back(list.size() == 1 ? list[0] : list);  // the pipeline: one answer is the object itself
  }
  send_json(res, 200, r.single ? out[0] : out);
}

void Server::classify_routes() {
  if (translation_) {
    for (const char* path : {"/predict", "/rerank", "/zero-shot-classification", "/question-answering"})
      not_for_this_model(path, "an encoder model");
    return;
  }
  // text-embeddings-inference /predict: per input every label with its score, best first.
  add("POST", "/predict",
      "text-embeddings-inference /predict: sequence classification (zero-shot with candidate_labels); token "
      "classification and fill-mask in the Hugging Face Inference API's shapes",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              if (tagger_) return predict_tokens(req, res);
              if (sparse_ && !head_) return predict_fill_mask(req, res);
              need_head("/predict");
              if (asks_zero_shot(req.body)) return zero_shot(req, res);
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
  // The Hugging Face Inference API's zero-shot-classification task.
  add("POST", "/zero-shot-classification",
      "zero-shot classification with an NLI head: {inputs, parameters: {candidate_labels, multi_label, "
      "hypothesis_template}} -> {sequence, labels, scores}",
      guard([this](const httplib::Request& req, httplib::Response& res) {
              need_head("/zero-shot-classification");
              zero_shot(req, res);
            }, true));
  // The Hugging Face Inference API's question-answering task.
  add("POST", "/question-answering",
      "extractive question answering with a *ForQuestionAnswering head: {inputs: {question, context}, parameters: "
      "{top_k, doc_stride, max_answer_len, max_seq_len, handle_impossible_answer, align_to_words}} -> {score, "
      "start, end, answer} (a list when several; start / end in code points of the context)",
      guard([this](const httplib::Request& req, httplib::Response& res) { question_answering(req, res); }, true));
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
