// tfm::Classifier over models/heads (BertForSequenceClassification): the same encoding, batching and scoring as
// `tfm classify` (tools/tfm/cmd_classify.cpp).
#include "tfm/classifier.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "api/common.h"
#include "models/heads.h"
#include "text/text_file.h"

namespace tfm {

struct Classifier::Impl {
  std::unique_ptr<TaskModel> model;
  int threads = 0;
};

Classifier::Classifier(const std::string& dir, const ClassifierOptions& options) : impl_(std::make_unique<Impl>()) {
  api::check_threads(options.threads);
  api::require_dir(dir, "model folder");
  api::require_file(dir + "/config.json");
  api::require_file(dir + "/model.safetensors");
  impl_->threads = options.threads;
  impl_->model = std::make_unique<TaskModel>(TaskModel::load(dir, HeadKind::SequenceClassification));
}
Classifier::~Classifier() = default;
Classifier::Classifier(Classifier&&) noexcept = default;
Classifier& Classifier::operator=(Classifier&&) noexcept = default;

const std::vector<std::string>& Classifier::labels() const { return impl_->model->head_config().id2label; }
int64_t Classifier::num_labels() const { return impl_->model->num_labels(); }

FloatArray Classifier::logits(const std::vector<std::string>& texts, const ClassifyOptions& o) const {
  const TaskModel& m = *impl_->model;
  if (texts.empty()) throw std::invalid_argument("texts is empty");
  if (o.batch_size < 1) throw std::invalid_argument("batch_size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.max_length < 0) throw std::invalid_argument("max_length must be >= 0, got " + std::to_string(o.max_length));
  const int64_t limit = m.encoder_config().max_position_embeddings;
  std::vector<Encoding> enc;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].find_first_not_of(" \t\v\f\r\n") == std::string::npos)
      throw std::invalid_argument("text " + std::to_string(i) + " is empty");
    if (auto bad = find_invalid_utf8(texts[i]))
      throw std::invalid_argument("text " + std::to_string(i) + ": invalid UTF-8 at byte offset " +
                                  std::to_string(*bad));
    enc.push_back(m.tokenizer().encode(texts[i], nullptr, true, o.max_length));
    if ((int64_t)enc.back().input_ids.size() > limit)
      throw std::invalid_argument("text " + std::to_string(i) + " has " + std::to_string(enc.back().input_ids.size()) +
                                  " tokens, more than max_position_embeddings (" + std::to_string(limit) +
                                  "); pass max_length to truncate");
  }
  const int64_t N = (int64_t)texts.size(), C = m.num_labels();
  Tensor result = Tensor::empty({N, C});
  api::apply_threads(impl_->threads);
  for (int64_t s = 0; s < N; s += o.batch_size) {
    const int64_t n = std::min(o.batch_size, N - s);
    BatchTensors bt = make_batch(std::vector<Encoding>(enc.begin() + s, enc.begin() + s + n), m.tokenizer().pad_id());
    Tensor lg = m.sequence_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask);
    std::copy(lg.f32(), lg.f32() + n * C, result.f32() + s * C);
  }
  return api::to_array(std::move(result));
}

std::vector<Classification> Classifier::classify(const std::vector<std::string>& texts,
                                                 const ClassifyOptions& o) const {
  const TaskModel& m = *impl_->model;
  ScoreFunction fn;
  if (o.function.empty()) fn = m.head_config().default_score_function();
  else if (o.function == "softmax") fn = ScoreFunction::Softmax;
  else if (o.function == "sigmoid") fn = ScoreFunction::Sigmoid;
  else if (o.function == "none") fn = ScoreFunction::None;
  else throw std::invalid_argument("function '" + o.function + "' is not supported (supported: softmax, sigmoid, none)");
  const FloatArray lg = logits(texts, o);
  const int64_t C = m.num_labels();
  const auto& names = labels();
  std::vector<Classification> out(texts.size());
  for (size_t b = 0; b < texts.size(); ++b) {
    std::vector<float> sc = apply_score_function(lg.data() + b * C, C, fn);
    std::vector<int64_t> order(C);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return sc[a] > sc[c]; });
    for (int64_t k : order) out[b].labels.push_back(names[k]), out[b].scores.push_back(sc[k]);
  }
  return out;
}

}  // namespace tfm
