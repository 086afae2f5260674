// tfm::Classifier, TokenClassifier and MaskFiller over models/heads (*For{Sequence,Token}Classification,
// *ForMaskedLM of every family): the encoding, batching and scoring of `tfm classify`, `tfm rerank` and `tfm fill-mask`.
#include "tfm/classifier.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "api/common.h"
#include "api/impl.h"
#include "ops/gemm.h"
#include "models/heads.h"
#include "io/text_file.h"
#include "text/tokenizer/unicode.h"

namespace tfm {

namespace {

HeadKind internal(TaskHead h) {
  switch (h) {
    case TaskHead::SequenceClassification: return HeadKind::SequenceClassification;
    case TaskHead::TokenClassification: return HeadKind::TokenClassification;
    case TaskHead::MaskedLM: return HeadKind::MaskedLM;
    case TaskHead::QuestionAnswering: return HeadKind::QuestionAnswering;
  }
  return HeadKind::SequenceClassification;
}

void require_model_folder(const std::string& dir) {
  api::require_dir(dir, "model folder");
  api::require_file(dir + "/config.json");
  api::require_weights(dir);
}

// One loaded head with the public tokenizer of its folder.
struct HeadModel {
  std::unique_ptr<TaskModel> model;
  std::optional<Tokenizer> tokenizer;
  int threads = 0;
  std::string dtype;
  HeadModel(const std::string& model_or_id, const ClassifierOptions& o, HeadKind kind) {
    std::optional<ops::ComputeType> want;
    if (!o.dtype.empty()) want = ops::parse_compute_type(o.dtype);  // std::invalid_argument naming the values
    api::check_threads(o.threads);
    const std::string dir = api::model_folder(model_or_id);
    require_model_folder(dir);
    threads = o.threads;
    ops::ComputeType ct = ops::ComputeType::F32;
    model = std::make_unique<TaskModel>(TaskModel::load(dir, kind, want, &ct));
    dtype = ops::compute_type_name(ct);
    tokenizer.emplace(TokenizerAccess::wrap(model->tokenizer()));  // the head's own, not read a second time
  }
  // The batch right-padded into [B, L] tensors; checks it first.
  BatchTensors batch(const std::vector<TextEncoding>& in) const {
    if (in.empty()) throw std::invalid_argument("the batch is empty");
    const int64_t limit = model->max_input_tokens();
    std::vector<Encoding> enc(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].input_ids.empty()) throw std::invalid_argument("input " + std::to_string(i) + " has no tokens");
      if ((int64_t)in[i].input_ids.size() > limit)
        throw std::invalid_argument("input " + std::to_string(i) + " has " + std::to_string(in[i].input_ids.size()) +
                                    " tokens, more than the model takes (" + std::to_string(limit) + ")");
      if (in[i].token_type_ids.size() != in[i].input_ids.size())
        throw std::invalid_argument("input " + std::to_string(i) + ": token_type_ids and input_ids differ in length");
      enc[i].input_ids = in[i].input_ids;
      enc[i].token_type_ids = in[i].token_type_ids;
      enc[i].attention_mask.assign(in[i].input_ids.size(), 1);
    }
    return make_batch(enc, model->tokenizer().pad_id());
  }
};

ScoreFunction parse_function(const std::string& f, ScoreFunction default_fn) {
  if (f.empty()) return default_fn;
  if (f == "softmax") return ScoreFunction::Softmax;
  if (f == "sigmoid") return ScoreFunction::Sigmoid;
  if (f == "none") return ScoreFunction::None;
  throw std::invalid_argument("function '" + f + "' is not supported (supported: softmax, sigmoid, none)");
}

}  // namespace

const char* task_head_name(TaskHead head) { return head_kind_name(internal(head)); }

TaskHead detect_task_head(const std::string& model) {
  const std::string dir = api::model_folder(model);
  api::require_dir(dir, "model folder");  // config.json is read (and named in errors) before model.safetensors
  switch (detect_head_kind(dir)) {
    case HeadKind::SequenceClassification: return TaskHead::SequenceClassification;
    case HeadKind::TokenClassification: return TaskHead::TokenClassification;
    case HeadKind::MaskedLM: return TaskHead::MaskedLM;
    case HeadKind::QuestionAnswering: return TaskHead::QuestionAnswering;
  }
  return TaskHead::SequenceClassification;
}

struct Classifier::Impl : HeadModel {
  using HeadModel::HeadModel;
};

Classifier::Classifier(const std::string& dir, const ClassifierOptions& options)
    : impl_(std::make_unique<Impl>(dir, options, HeadKind::SequenceClassification)) {}
Classifier::~Classifier() = default;
Classifier::Classifier(Classifier&&) noexcept = default;
Classifier& Classifier::operator=(Classifier&&) noexcept = default;

namespace {
// A cross-encoder scores a pair with one label (its activation) or two (softmax of label 1).
void check_cross_encoder(int64_t num_labels) {
  if (num_labels > 2)
    throw std::runtime_error("this model has " + std::to_string(num_labels) +
                             " labels; rerank needs a cross-encoder with one (or two) labels");
}
}  // namespace

float Classifier::rerank_score(const float* logits, bool raw_scores) const {
  const int64_t C = num_labels();
  check_cross_encoder(C);
  const std::vector<float> sc = scores(logits, raw_scores ? "none" : C == 2 ? "softmax" : "");
  return C == 2 ? (raw_scores ? sc[1] - sc[0] : sc[1]) : sc[0];
}

std::vector<RankedPassage> Classifier::rerank(const std::string& query, const std::vector<std::string>& passages,
                                              const RerankOptions& o) const {
  const int64_t C = num_labels();
  check_cross_encoder(C);
  if (query.find_first_not_of(" \t\v\f\r\n") == std::string::npos) throw std::invalid_argument("query is empty");
  if (passages.empty()) throw std::invalid_argument("passages is empty");
  if (o.top_k < 0) throw std::invalid_argument("top_k must be >= 0, got " + std::to_string(o.top_k));
  if (o.batch_size < 1) throw std::invalid_argument("batch_size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.max_length < 0 || o.max_length == 1 || o.max_length == 2)
    throw std::invalid_argument("max_length must be 0 or >= 3 ([CLS] and two [SEP]), got " +
                                std::to_string(o.max_length));
  const int64_t limit = max_position_embeddings();
  TokenizeOptions to;
  to.max_length = o.max_length;
  std::vector<TextEncoding> enc;
  for (size_t i = 0; i < passages.size(); ++i) {
    if (passages[i].find_first_not_of(" \t\v\f\r\n") == std::string::npos)
      throw std::invalid_argument("passage " + std::to_string(i) + " is empty");
    enc.push_back(tokenizer().encode_pair(query, passages[i], to));
    if ((int64_t)enc.back().input_ids.size() > limit)
      throw std::invalid_argument("passage " + std::to_string(i) + " with the query has " +
                                  std::to_string(enc.back().input_ids.size()) +
                                  " tokens, more than max_position_embeddings (" + std::to_string(limit) +
                                  "); pass max_length to truncate");
  }
  std::vector<RankedPassage> out;
  for (size_t s = 0; s < enc.size(); s += (size_t)o.batch_size) {
    const size_t n = std::min(enc.size() - s, (size_t)o.batch_size);
    const FloatArray lg = logits(std::vector<TextEncoding>(enc.begin() + s, enc.begin() + s + n));
    for (size_t b = 0; b < n; ++b) out.push_back({(int64_t)(s + b), rerank_score(lg.data() + b * C, o.raw_scores)});
  }
  std::stable_sort(out.begin(), out.end(), [](const RankedPassage& a, const RankedPassage& b) { return a.score > b.score; });
  if (o.top_k > 0 && (size_t)o.top_k < out.size()) out.resize(o.top_k);
  return out;
}

const std::vector<std::string>& Classifier::labels() const { return impl_->model->head_config().id2label; }
int64_t Classifier::num_labels() const { return impl_->model->num_labels(); }

FloatArray Classifier::logits(const std::vector<std::string>& texts, const ClassifyOptions& o) const {
  const TaskModel& m = *impl_->model;
  if (texts.empty()) throw std::invalid_argument("texts is empty");
  if (o.batch_size < 1) throw std::invalid_argument("batch_size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.max_length < 0) throw std::invalid_argument("max_length must be >= 0, got " + std::to_string(o.max_length));
  if (!o.text_pairs.empty() && o.text_pairs.size() != texts.size())
    throw std::invalid_argument("text_pairs: give one per text (" + std::to_string(texts.size()) + " texts, " +
                                std::to_string(o.text_pairs.size()) + " pairs)");
  const int64_t limit = m.max_input_tokens();
  std::vector<Encoding> enc;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].find_first_not_of(" \t\v\f\r\n") == std::string::npos)
      throw std::invalid_argument("text " + std::to_string(i) + " is empty");
    if (auto bad = find_invalid_utf8(texts[i]))
      throw std::invalid_argument("text " + std::to_string(i) + ": invalid UTF-8 at byte offset " +
                                  std::to_string(*bad));
    const std::string* pair = o.text_pairs.empty() || o.text_pairs[i].empty() ? nullptr : &o.text_pairs[i];
    if (pair)
      if (auto bad = find_invalid_utf8(*pair))
        throw std::invalid_argument("text_pair " + std::to_string(i) + ": invalid UTF-8 at byte offset " +
                                    std::to_string(*bad));
    enc.push_back(m.tokenizer().encode(texts[i], pair, true, o.max_length));
    if ((int64_t)enc.back().input_ids.size() > limit)
      throw std::invalid_argument("text " + std::to_string(i) + " has " + std::to_string(enc.back().input_ids.size()) +
                                  " tokens, more than the model takes (" + std::to_string(limit) +
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

FloatArray Classifier::logits(const std::vector<TextEncoding>& in) const {
  BatchTensors bt = impl_->batch(in);
  api::apply_threads(impl_->threads);
  return api::to_array(impl_->model->sequence_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask));
}

std::vector<float> Classifier::scores(const float* logits, const std::string& function) const {
  const TaskModel& m = *impl_->model;
  return apply_score_function(logits, m.num_labels(), parse_function(function, m.head_config().default_score_function()));
}

const Tokenizer& Classifier::tokenizer() const { return *impl_->tokenizer; }
int64_t Classifier::max_position_embeddings() const { return impl_->model->max_input_tokens(); }
const std::string& Classifier::dtype() const { return impl_->dtype; }

std::vector<Classification> Classifier::classify(const std::vector<std::string>& texts,
                                                 const ClassifyOptions& o) const {
  const TaskModel& m = *impl_->model;
  const ScoreFunction fn = parse_function(o.function, m.head_config().default_score_function());
  const FloatArray lg = logits(texts, o);
  const int64_t C = m.num_labels();
  const auto& names = labels();
  std::vector<Classification> out(texts.size());
  for (size_t b = 0; b < texts.size(); ++b)
    for (const LabelScore& x : rank_labels(names, apply_score_function(lg.data() + b * C, C, fn)))
      out[b].labels.push_back(x.label), out[b].scores.push_back(x.score);
  return out;
}

int64_t Classifier::entailment_id() const { return tfm::entailment_id(labels()); }

std::vector<ZeroShotResult> Classifier::zero_shot(const std::vector<std::string>& sequences,
                                                  const std::vector<std::string>& candidate_labels,
                                                  const ZeroShotOptions& o) const {
  const int64_t C = num_labels();
  if (C < 2)
    throw std::runtime_error("zero-shot classification needs an NLI head with entailment and contradiction "
                             "labels; this model has " + std::to_string(C));
  if (sequences.empty()) throw std::invalid_argument("sequences is empty");
  if (candidate_labels.empty()) throw std::invalid_argument("candidate_labels is empty");
  std::vector<std::string> hypotheses;
  for (size_t i = 0; i < candidate_labels.size(); ++i) {
    if (candidate_labels[i].find_first_not_of(" \t\v\f\r\n") == std::string::npos)
      throw std::invalid_argument("candidate label " + std::to_string(i) + " is empty");
    hypotheses.push_back(format_hypothesis(o.hypothesis_template, candidate_labels[i]));
  }
  ClassifyOptions co;
  co.max_length = o.max_length;
  co.batch_size = o.batch_size;
  std::vector<std::string> premises;
  for (const std::string& s : sequences)
    for (size_t k = 0; k < hypotheses.size(); ++k) premises.push_back(s), co.text_pairs.push_back(hypotheses[k]);
  const FloatArray lg = logits(premises, co);
  const size_t n = candidate_labels.size();
  std::vector<ZeroShotResult> out;
  for (size_t s = 0; s < sequences.size(); ++s)
    out.push_back(zero_shot_result(sequences[s], candidate_labels, lg.data() + s * n * C, C, entailment_id(),
                                   o.multi_label));
  return out;
}

// ------------------------------------------------------------------------------------------ token classification

struct TokenClassifier::Impl : HeadModel {
  using HeadModel::HeadModel;
};

TokenClassifier::TokenClassifier(const std::string& dir, const ClassifierOptions& options)
    : impl_(std::make_unique<Impl>(dir, options, HeadKind::TokenClassification)) {}
TokenClassifier::~TokenClassifier() = default;
TokenClassifier::TokenClassifier(TokenClassifier&&) noexcept = default;
TokenClassifier& TokenClassifier::operator=(TokenClassifier&&) noexcept = default;

const std::vector<std::string>& TokenClassifier::labels() const { return impl_->model->head_config().id2label; }
const Tokenizer& TokenClassifier::tokenizer() const { return *impl_->tokenizer; }
int64_t TokenClassifier::max_position_embeddings() const { return impl_->model->max_input_tokens(); }
const std::string& TokenClassifier::dtype() const { return impl_->dtype; }

std::vector<std::vector<TokenTag>> TokenClassifier::tag(const std::vector<TextEncoding>& in, const TagOptions& o) const {
  return tag(in, {}, o);
}

std::vector<std::vector<TokenTag>> TokenClassifier::tag(const std::vector<TextEncoding>& in,
                                                        const std::vector<std::string>& texts,
                                                        const TagOptions& o) const {
  const TaskModel& m = *impl_->model;
  const ScoreFunction fn = parse_function(o.function.empty() ? "softmax" : o.function, ScoreFunction::Softmax);
  const AggregationStrategy strategy = parse_aggregation_strategy(o.aggregation_strategy);
  if (texts.empty() && strategy != AggregationStrategy::None)
    throw std::invalid_argument("aggregation strategy '" + o.aggregation_strategy +
                                "' needs the texts (tag(batch, texts, options))");
  if (!texts.empty() && texts.size() != in.size())
    throw std::invalid_argument("tag: " + std::to_string(in.size()) + " encodings but " +
                                std::to_string(texts.size()) + " texts");
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].offsets.size() != in[i].input_ids.size())
      throw std::invalid_argument("input " + std::to_string(i) + " has no offsets (tokenize it with encode())");
  BatchTensors bt = impl_->batch(in);
  api::apply_threads(impl_->threads);
  Tensor logits = m.token_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask);
  const int64_t L = bt.input_ids.size(1), C = m.num_labels();
  const auto& labels = m.head_config().id2label;
  const BertTokenizer& tok = m.tokenizer();
  const std::string prefix = tok.engine().continuing_subword_prefix();
  const std::vector<std::string> ignore = o.all_tokens ? std::vector<std::string>{} : o.ignore_labels;
  auto join = [&](const std::vector<std::string>& pieces) { return tok.engine().decode_tokens(pieces); };
  std::vector<std::vector<TokenTag>> out(in.size());
  for (size_t b = 0; b < in.size(); ++b) {
    const std::u32string text = texts.empty() ? std::u32string() : tok::decode_utf8(texts[b]);
    auto slice = [&](int64_t s, int64_t e) {
      s = std::clamp<int64_t>(s, 0, (int64_t)text.size());
      e = std::clamp<int64_t>(e, s, (int64_t)text.size());
      return text.substr((size_t)s, (size_t)(e - s));
    };
    // gather_pre_entities: every token the tokenizer did not add, with its scores.
    std::vector<TokenScores> pre;
    for (size_t i = 0; i < in[b].input_ids.size(); ++i) {
      const int64_t id = in[b].input_ids[i];
      const bool special = in[b].special.size() == in[b].input_ids.size()
                               ? (bool)in[b].special[i]
                               : id == tok.cls_id() || id == tok.sep_id() || id == tok.pad_id();
      if (special) continue;
      // Offsets of tokens without a place in the text are (0, 0), as Hugging Face's offset_mapping gives them.
      const auto [start, end] = in[b].offsets[i].first < 0 ? std::pair<int64_t, int64_t>{0, 0} : in[b].offsets[i];
      TokenScores t{in[b].tokens[i], apply_score_function(logits.f32() + ((int64_t)b * L + (int64_t)i) * C, C, fn),
                    (int64_t)i, start, end, false};
      if (!texts.empty()) {
        const std::u32string ref = slice(start, end);
        if (!prefix.empty()) {
          t.is_subword = tok::decode_utf8(t.word).size() != ref.size();
        } else {  // the pipeline's fallback for tokenizers without word pieces: no space before the token
          const std::u32string around = slice(start - 1, start + 1);
          t.is_subword = start > 0 && around.find(U' ') == std::u32string::npos;
        }
        if (id == tok.unk_id()) {
          t.word = tok::encode_utf8(ref);
          t.is_subword = false;
        }
      }
      pre.push_back(std::move(t));
    }
    out[b] = aggregate_entities(pre, labels, strategy, ignore, join);
  }
  return out;
}

// ------------------------------------------------------------------------------------------ fill-mask

struct MaskFiller::Impl : HeadModel {
  int64_t mask_id = -1;
  Impl(const std::string& dir, const ClassifierOptions& o) : HeadModel(dir, o, HeadKind::MaskedLM) {
    mask_id = model->mask_token_id();
    if (mask_id < 0)
      throw std::runtime_error(dir + ": the tokenizer has no mask token (no mask_token in tokenizer_config.json or "
                               "special_tokens_map.json, no [MASK] or <mask> in the vocabulary)");
  }
};

MaskFiller::MaskFiller(const std::string& dir, const ClassifierOptions& options)
    : impl_(std::make_unique<Impl>(dir, options)) {}
MaskFiller::~MaskFiller() = default;
MaskFiller::MaskFiller(MaskFiller&&) noexcept = default;
MaskFiller& MaskFiller::operator=(MaskFiller&&) noexcept = default;

int64_t MaskFiller::vocab_size() const { return impl_->model->encoder_config().vocab_size; }

FloatArray MaskFiller::sparse_embed(const std::vector<TextEncoding>& in) const {
  const TaskModel& m = *impl_->model;
  BatchTensors bt = impl_->batch(in);
  std::vector<std::pair<int64_t, int64_t>> pos;
  for (size_t b = 0; b < in.size(); ++b)
    for (size_t l = 0; l < in[b].input_ids.size(); ++l) pos.push_back({(int64_t)b, (int64_t)l});
  api::apply_threads(impl_->threads);
  Tensor logits = m.mlm_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask, pos);  // [positions, V]
  const int64_t V = m.encoder_config().vocab_size;
  Tensor out = Tensor::zeros({(int64_t)in.size(), V});
  for (size_t p = 0; p < pos.size(); ++p) {
    const float* row = logits.f32() + p * V;
    float* o = out.f32() + pos[p].first * V;
    for (int64_t v = 0; v < V; ++v) o[v] = std::max(o[v], std::log1p(std::max(row[v], 0.0f)));
  }
  return api::to_array(std::move(out));
}

int64_t MaskFiller::mask_token_id() const { return impl_->mask_id; }
const std::string& MaskFiller::mask_token() const { return impl_->model->mask_token(); }
const Tokenizer& MaskFiller::tokenizer() const { return *impl_->tokenizer; }
int64_t MaskFiller::max_position_embeddings() const { return impl_->model->max_input_tokens(); }
const std::string& MaskFiller::dtype() const { return impl_->dtype; }

std::vector<std::vector<std::vector<MaskCandidate>>> MaskFiller::fill(const std::vector<TextEncoding>& in,
                                                                      int64_t top_k) const {
  const TaskModel& m = *impl_->model;
  if (top_k < 1) throw std::invalid_argument("top_k must be >= 1, got " + std::to_string(top_k));
  BatchTensors bt = impl_->batch(in);
  std::vector<std::pair<int64_t, int64_t>> pos;
  for (size_t b = 0; b < in.size(); ++b) {
    const size_t before = pos.size();
    for (size_t l = 0; l < in[b].input_ids.size(); ++l)
      if (in[b].input_ids[l] == impl_->mask_id) pos.push_back({(int64_t)b, (int64_t)l});
    // As the fill-mask pipeline (PipelineException "No mask_token (...) found on the input").
    if (pos.size() == before)
      throw std::invalid_argument("input " + std::to_string(b) + " has no " + mask_token() + " token");
  }
  std::vector<std::vector<std::vector<MaskCandidate>>> out(in.size());
  api::apply_threads(impl_->threads);
  Tensor logits = m.mlm_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask, pos);
  const int64_t V = m.encoder_config().vocab_size, K = std::min<int64_t>(top_k, V);
  // As the fill-mask pipeline: an input with several masks decodes `sequence` with skip_special_tokens=False, so
  // it keeps the other [MASK] tokens (and [CLS] / [SEP]).
  std::vector<bool> single_mask(in.size());
  for (size_t b = 0; b < in.size(); ++b)
    single_mask[b] = std::count(in[b].input_ids.begin(), in[b].input_ids.end(), impl_->mask_id) == 1;
  for (size_t p = 0; p < pos.size(); ++p) {
    const auto [b, l] = pos[p];
    std::vector<float> prob = apply_score_function(logits.f32() + p * V, V, ScoreFunction::Softmax);
    std::vector<int64_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int64_t a, int64_t c) {
      return prob[a] > prob[c] || (prob[a] == prob[c] && a < c);
    });
    std::vector<MaskCandidate> cands;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t id = idx[k];
      std::vector<int64_t> ids = in[b].input_ids;
      ids[l] = id;
      cands.push_back({prob[id], id, m.decode_token(id), m.decode(ids, single_mask[b])});
    }
    out[b].push_back(std::move(cands));
  }
  return out;
}

}  // namespace tfm

// ------------------------------------------------------------------------------------------ question answering

namespace tfm {

struct QuestionAnswerer::Impl : HeadModel {
  using HeadModel::HeadModel;
};

QuestionAnswerer::QuestionAnswerer(const std::string& dir, const ClassifierOptions& options)
    : impl_(std::make_unique<Impl>(dir, options, HeadKind::QuestionAnswering)) {}
QuestionAnswerer::~QuestionAnswerer() = default;
QuestionAnswerer::QuestionAnswerer(QuestionAnswerer&&) noexcept = default;
QuestionAnswerer& QuestionAnswerer::operator=(QuestionAnswerer&&) noexcept = default;

const Tokenizer& QuestionAnswerer::tokenizer() const { return *impl_->tokenizer; }
int64_t QuestionAnswerer::max_position_embeddings() const { return impl_->model->max_input_tokens(); }
const std::string& QuestionAnswerer::dtype() const { return impl_->dtype; }

std::vector<QaAnswer> QuestionAnswerer::answer(const std::string& question, const std::string& context,
                                               const QuestionAnsweringOptions& o) const {
  check_question_answering_options(o);
  if (question.empty()) throw std::invalid_argument("question cannot be empty");
  if (context.empty()) throw std::invalid_argument("context cannot be empty");
  const TaskModel& m = *impl_->model;
  const BertTokenizer& tok = m.tokenizer();
  // QuestionAnsweringPipeline.preprocess's defaults.
  const int64_t max_seq = o.max_seq_length > 0 ? o.max_seq_length : std::min<int64_t>(tok.model_max_length(), 384);
  const int64_t stride = o.doc_stride > 0 ? o.doc_stride : std::min<int64_t>(max_seq / 2, 128);
  if (stride > max_seq)
    throw std::invalid_argument("doc_stride (" + std::to_string(stride) + ") is larger than max_seq_length (" +
                                std::to_string(max_seq) + ")");
  if (max_seq > m.max_input_tokens())
    throw std::invalid_argument("max_seq_length " + std::to_string(max_seq) + " is more than the model takes (" +
                                std::to_string(m.max_input_tokens()) + " tokens)");
  std::vector<Encoding> enc = tok.encode_windows(question, context, max_seq, stride);
  api::apply_threads(impl_->threads);
  const BatchTensors t = make_batch(enc, tok.pad_id());
  const Tensor logits = m.token_logits(t.input_ids, t.token_type_ids, t.attention_mask);  // [W, L, 2]
  const int64_t L = logits.size(1);
  std::vector<QaWindow> windows(enc.size());
  for (size_t w = 0; w < enc.size(); ++w) {
    const Encoding& e = enc[w];
    QaWindow& q = windows[w];
    const size_t n = e.input_ids.size();
    for (size_t i = 0; i < n; ++i) {
      const float* l = logits.f32() + ((int64_t)w * L + (int64_t)i) * 2;
      q.start_logits.push_back(l[0]);
      q.end_logits.push_back(l[1]);
      // p_mask 0: the context's tokens, and the [CLS] token kept for the null answer.
      q.candidate.push_back(e.sequence_ids[i] == 1 || (tok.cls_id() >= 0 && e.input_ids[i] == tok.cls_id()));
    }
    q.sequence_ids = e.sequence_ids;
    q.words = e.words;
    q.offsets = e.offsets;
  }
  return question_answering_result(context, windows, o);
}

}  // namespace tfm
