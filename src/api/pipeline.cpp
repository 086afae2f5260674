// tfm/pipeline.h: batching, dimensions, normalisation and the stored dtype, the one implementation the CLI, the
// server, Python and the API classes call.
#include "tfm/pipeline.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "api/common.h"
#include "models/checkpoint_weights.h"
#include "models/pooling.h"
#include "ops/gemm.h"
#include "text/tokenizer/unicode.h"

#include <utf8proc.h>

namespace tfm {

bool BatchBudget::fits(int64_t length) const {
  if (rows_ == 0) return true;  // a batch always takes its first sequence, however long
  const int64_t longest = std::max(longest_, length);
  if (limits_.max_rows > 0 && rows_ + 1 > limits_.max_rows) return false;
  if (limits_.max_tokens > 0 && (rows_ + 1) * longest > limits_.max_tokens) return false;
  if (limits_.max_real_tokens > 0 && real_ + length > limits_.max_real_tokens) return false;
  return true;
}

void BatchBudget::add(int64_t length) {
  ++rows_;
  longest_ = std::max(longest_, length);
  real_ += length;
}

std::vector<std::vector<size_t>> length_batches(const std::vector<int64_t>& lengths, const BatchLimits& limits) {
  if (limits.max_tokens < 0 || limits.max_rows < 0 || limits.max_real_tokens < 0)
    throw std::invalid_argument("batch limits must be >= 0 (0 = none), got max_tokens " +
                                std::to_string(limits.max_tokens) + ", max_rows " + std::to_string(limits.max_rows) +
                                ", max_real_tokens " + std::to_string(limits.max_real_tokens));
  for (size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] < 0)
      throw std::invalid_argument("sequence " + std::to_string(i) + " has a negative length " +
                                  std::to_string(lengths[i]));
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] < lengths[b]; });
  std::vector<std::vector<size_t>> batches;
  for (size_t s = 0; s < order.size();) {
    BatchBudget budget(limits);
    std::vector<size_t> batch;
    for (; s < order.size() && budget.fits(lengths[order[s]]); ++s) {
      budget.add(lengths[order[s]]);
      batch.push_back(order[s]);
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

void check_dimensions(int64_t dimensions, int64_t embedding_size) {
  if (dimensions < 1 || dimensions > embedding_size)
    throw std::invalid_argument("dimensions must be >= 1 and at most the embedding size " +
                                std::to_string(embedding_size) + ", got " + std::to_string(dimensions));
}

void l2_normalize(float* v, int64_t n) {
  Tensor row = Tensor::view_of(v, {1, n}, DType::F32, nullptr);
  l2_normalize_rows(row);
}

FloatArray truncate_dimensions(const FloatArray& a, int64_t dims, bool normalize) {
  if (a.ndim() != 2) throw std::invalid_argument("truncate_dimensions: expected embeddings [N, D]");
  const int64_t N = a.size(0), D = a.size(1);
  if (dims != 0) check_dimensions(dims, D);
  if (dims == 0 || dims == D) {
    if (!normalize) return a;
    dims = D;
  }
  Tensor t = Tensor::empty({N, dims});
  for (int64_t n = 0; n < N; ++n) std::copy(a.data() + n * D, a.data() + n * D + dims, t.f32() + n * dims);
  if (normalize) l2_normalize_rows(t);
  return api::to_array(std::move(t));
}

std::vector<float> truncate_dimensions(std::vector<float> v, int64_t dims, bool normalize) {
  if (dims != 0) check_dimensions(dims, (int64_t)v.size());
  if (dims > 0) v.resize((size_t)dims);
  if (normalize) l2_normalize(v.data(), (int64_t)v.size());
  return v;
}

std::vector<LabelScore> rank_labels(const std::vector<std::string>& labels, const std::vector<float>& scores,
                                    int64_t top_k) {
  if (labels.size() != scores.size())
    throw std::invalid_argument("rank_labels: " + std::to_string(labels.size()) + " labels but " +
                                std::to_string(scores.size()) + " scores");
  if (top_k < 0) throw std::invalid_argument("top_k must be >= 0 (0 = all), got " + std::to_string(top_k));
  std::vector<size_t> order(labels.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (top_k > 0 && (size_t)top_k < order.size()) order.resize((size_t)top_k);
  std::vector<LabelScore> out;
  for (size_t k : order) out.push_back({labels[k], scores[k]});
  return out;
}

// ------------------------------------------------------------------------------------------ zero-shot

std::vector<std::string> split_candidate_labels(const std::string& labels) {
  std::vector<std::string> out;
  const char* space = " \t\n\r\f\v";
  size_t s = 0;
  while (s <= labels.size()) {
    size_t e = labels.find(',', s);
    if (e == std::string::npos) e = labels.size();
    std::string l = labels.substr(s, e - s);
    const size_t a = l.find_first_not_of(space);
    if (a != std::string::npos) out.push_back(l.substr(a, l.find_last_not_of(space) - a + 1));
    s = e + 1;
  }
  if (out.empty()) throw std::invalid_argument("no candidate labels: give at least one (\"a, b, c\")");
  return out;
}

std::string format_hypothesis(const std::string& tmpl, const std::string& label) {
  const size_t p = tmpl.find("{}");
  if (p == std::string::npos)
    throw std::invalid_argument("the hypothesis template \"" + tmpl +
                                "\" has no {} where the label goes (as in \"This example is {}.\")");
  return tmpl.substr(0, p) + label + tmpl.substr(p + 2);
}

int64_t entailment_id(const std::vector<std::string>& id2label) {
  for (size_t i = 0; i < id2label.size(); ++i) {
    std::string l = id2label[i].substr(0, 6);
    for (char& c : l) c = (char)std::tolower((unsigned char)c);
    if (l == "entail") return (int64_t)i;
  }
  return -1;
}

ZeroShotResult zero_shot_result(const std::string& sequence, const std::vector<std::string>& labels,
                                const float* logits, int64_t C, int64_t entailment, bool multi_label) {
  if (labels.empty()) throw std::invalid_argument("no candidate labels");
  if (C < 2) throw std::invalid_argument("zero-shot classification needs an NLI head (2 or more labels), got " +
                                         std::to_string(C));
  const int64_t ent = entailment < 0 ? C - 1 : entailment;  // Python's index -1: the last label
  const int64_t con = ent == 0 ? C - 1 : 0;
  const size_t n = labels.size();
  std::vector<float> scores(n);
  if (multi_label || n == 1) {
    for (size_t i = 0; i < n; ++i) {
      const double c = logits[i * C + con], e = logits[i * C + ent], m = std::max(c, e);
      scores[i] = (float)(std::exp(e - m) / (std::exp(c - m) + std::exp(e - m)));
    }
  } else {
    double m = -INFINITY, sum = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, (double)logits[i * C + ent]);
    for (size_t i = 0; i < n; ++i) sum += std::exp(logits[i * C + ent] - m);
    for (size_t i = 0; i < n; ++i) scores[i] = (float)(std::exp(logits[i * C + ent] - m) / sum);
  }
  ZeroShotResult r;
  r.sequence = sequence;
  for (const LabelScore& x : rank_labels(labels, scores)) r.labels.push_back(x.label), r.scores.push_back(x.score);
  return r;
}

// ------------------------------------------------------------------------------------------ token classification

AggregationStrategy parse_aggregation_strategy(const std::string& name) {
  if (name == "none") return AggregationStrategy::None;
  if (name == "simple") return AggregationStrategy::Simple;
  if (name == "first") return AggregationStrategy::First;
  if (name == "average") return AggregationStrategy::Average;
  if (name == "max") return AggregationStrategy::Max;
  throw std::invalid_argument("aggregation strategy '" + name +
                              "' is not supported (supported: none, simple, first, average, max)");
}

namespace {

int64_t argmax(const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); }

// The B- / I- prefix of a label and its tag (TokenClassificationPipeline.get_tag: no prefix counts as I-).
std::pair<char, std::string> bio_tag(const std::string& label) {
  if (label.rfind("B-", 0) == 0) return {'B', label.substr(2)};
  if (label.rfind("I-", 0) == 0) return {'I', label.substr(2)};
  return {'I', label};
}

}  // namespace

std::vector<TokenTag> aggregate_entities(const std::vector<TokenScores>& tokens,
                                         const std::vector<std::string>& id2label, AggregationStrategy strategy,
                                         const std::vector<std::string>& ignore_labels,
                                         const std::function<std::string(const std::vector<std::string>&)>& join) {
  using A = AggregationStrategy;
  for (const TokenScores& t : tokens)
    if (t.scores.size() != id2label.size())
      throw std::invalid_argument("aggregate_entities: a token has " + std::to_string(t.scores.size()) +
                                  " scores for " + std::to_string(id2label.size()) + " labels");
  // aggregate(): tokens (none, simple) or words (first, average, max) with their best label.
  std::vector<TokenTag> entities;
  if (strategy == A::None || strategy == A::Simple) {
    for (const TokenScores& t : tokens) {
      const int64_t k = argmax(t.scores);
      entities.push_back({id2label[k], t.scores[k], t.index, t.word, t.start, t.end});
    }
  } else {
    auto word_of = [&](size_t a, size_t b) {  // tokens [a, b) of one word: aggregate_word
      std::vector<std::string> pieces;
      for (size_t i = a; i < b; ++i) pieces.push_back(tokens[i].word);
      int64_t k = 0;
      float score = 0;
      if (strategy == A::First) {
        k = argmax(tokens[a].scores);
        score = tokens[a].scores[k];
      } else if (strategy == A::Max) {
        size_t best = a;  // the first piece with the highest score (Python's max keeps the first)
        for (size_t i = a + 1; i < b; ++i)
          if (*std::max_element(tokens[i].scores.begin(), tokens[i].scores.end()) >
              *std::max_element(tokens[best].scores.begin(), tokens[best].scores.end()))
            best = i;
        k = argmax(tokens[best].scores);
        score = tokens[best].scores[k];
      } else {
        std::vector<float> mean(id2label.size(), 0.0f);
        for (size_t c = 0; c < mean.size(); ++c) {
          double s = 0;
          for (size_t i = a; i < b; ++i) s += tokens[i].scores[c];
          mean[c] = (float)(s / (double)(b - a));
        }
        k = argmax(mean);
        score = mean[k];
      }
      return TokenTag{id2label[k], score, 0, join(pieces), tokens[a].start, tokens[b - 1].end};
    };
    size_t a = 0;
    for (size_t i = 1; i <= tokens.size(); ++i)
      if (i == tokens.size() || !tokens[i].is_subword) {
        if (i > a) entities.push_back(word_of(a, i));
        a = i;
      }
  }
  auto ignored = [&](const std::string& l) {
    return std::find(ignore_labels.begin(), ignore_labels.end(), l) != ignore_labels.end();
  };
  std::vector<TokenTag> out;
  if (strategy == A::None) {
    for (TokenTag& t : entities)
      if (!ignored(t.entity)) out.push_back(std::move(t));
    return out;
  }
  // group_entities(): adjacent entities of one tag, a B- starting a new group.
  auto group = [&](size_t a, size_t b) {
    const std::string& first = entities[a].entity;
    const size_t dash = first.find('-');
    std::vector<std::string> pieces;
    double sum = 0;
    for (size_t i = a; i < b; ++i) pieces.push_back(entities[i].word), sum += entities[i].score;
    return TokenTag{dash == std::string::npos ? first : first.substr(dash + 1), (float)(sum / (double)(b - a)), -1,
                    join(pieces), entities[a].start, entities[b - 1].end};
  };
  size_t a = 0;
  for (size_t i = 1; i <= entities.size(); ++i) {
    if (i < entities.size()) {
      const auto [bi, tag] = bio_tag(entities[i].entity);
      if (tag == bio_tag(entities[i - 1].entity).second && bi != 'B') continue;
    }
    if (i > a) {
      TokenTag g = group(a, i);
      if (!ignored(g.entity)) out.push_back(std::move(g));
    }
    a = i;
  }
  return out;
}

// ------------------------------------------------------------------------------------------ question answering

void check_question_answering_options(const QuestionAnsweringOptions& o) {
  if (o.top_k < 1) throw std::invalid_argument("top_k must be >= 1, got " + std::to_string(o.top_k));
  if (o.max_answer_length < 1)
    throw std::invalid_argument("max_answer_length must be >= 1, got " + std::to_string(o.max_answer_length));
  if (o.doc_stride < 0) throw std::invalid_argument("doc_stride must be >= 0 (0 = the default), got " +
                                                    std::to_string(o.doc_stride));
  if (o.max_seq_length < 0) throw std::invalid_argument("max_seq_length must be >= 0 (0 = the default), got " +
                                                        std::to_string(o.max_seq_length));
}

namespace {

// Python's str.lower() per code point (utf8proc's simple lower-case mapping).
std::u32string lower(std::u32string s) {
  for (char32_t& c : s) c = (char32_t)utf8proc_tolower((utf8proc_int32_t)c);
  return s;
}

// The pipeline's softmax of masked logits, in float32 as numpy computes it on float32 arrays.
std::vector<float> masked_softmax(const std::vector<float>& logits, const std::vector<uint8_t>& candidate) {
  const size_t L = logits.size();
  std::vector<float> p(L);
  float m = -INFINITY;
  for (size_t i = 0; i < L; ++i) p[i] = candidate[i] ? logits[i] : -10000.0f, m = std::max(m, p[i]);
  double sum = 0;
  for (size_t i = 0; i < L; ++i) p[i] = std::exp(p[i] - m), sum += p[i];
  for (size_t i = 0; i < L; ++i) p[i] = (float)(p[i] / sum);
  return p;
}

// QuestionAnsweringPipeline.get_indices: Encoding.word_to_chars(token_to_word(t), sequence_index=1), else offsets.
std::pair<int64_t, int64_t> answer_chars(const QaWindow& w, size_t s, size_t e, bool align_to_words) {
  if (align_to_words && w.words[s] >= 0 && w.words[e] >= 0) {
    int64_t first = -1, last = -1;  // tokens of the start word / end word in the context
    for (size_t i = 0; i < w.words.size(); ++i) {
      if (w.sequence_ids[i] != 1) continue;
      if (w.words[i] == w.words[s] && first < 0) first = (int64_t)i;
      if (w.words[i] == w.words[e]) last = (int64_t)i;
    }
    if (first >= 0 && last >= 0) return {w.offsets[(size_t)first].first, w.offsets[(size_t)last].second};
  }
  return {w.offsets[s].first, w.offsets[e].second};
}

}  // namespace

std::vector<QaAnswer> question_answering_result(const std::string& context, const std::vector<QaWindow>& windows,
                                                const QuestionAnsweringOptions& o) {
  check_question_answering_options(o);
  if (windows.empty()) throw std::invalid_argument("question answering: no windows");
  const std::u32string text = tok::decode_utf8(context);
  const int64_t pre_top_k = o.align_to_words ? o.top_k * 2 + 10 : o.top_k;  // some spans may merge
  double min_null_score = 1000000;
  std::vector<QaAnswer> answers;
  std::vector<std::u32string> lowered;  // answers[i]'s text, lower-cased
  for (size_t wi = 0; wi < windows.size(); ++wi) {
    const QaWindow& w = windows[wi];
    const size_t L = w.start_logits.size();
    if (L == 0 || w.end_logits.size() != L || w.candidate.size() != L || w.sequence_ids.size() != L ||
        w.words.size() != L || w.offsets.size() != L)
      throw std::invalid_argument("question answering: window " + std::to_string(wi) +
                                  " has vectors of different lengths (or none)");
    std::vector<float> start = masked_softmax(w.start_logits, w.candidate);
    std::vector<float> end = masked_softmax(w.end_logits, w.candidate);
    if (o.handle_impossible_answer) min_null_score = std::min(min_null_score, (double)(start[0] * end[0]));
    start[0] = end[0] = 0.0f;
    struct Span {
      float score;
      size_t s, e;
    };
    std::vector<Span> spans;
    for (size_t s = 0; s < L; ++s) {
      if (!w.candidate[s] || start[s] == 0.0f) continue;
      for (size_t e = s; e < L && e < s + (size_t)o.max_answer_length; ++e) {
        const float score = start[s] * end[e];
        if (w.candidate[e] && score > 0.0f) spans.push_back({score, s, e});
      }
    }
    std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.score > b.score; });
    if ((int64_t)spans.size() > pre_top_k) spans.resize((size_t)pre_top_k);
    for (const Span& sp : spans) {
      const auto [a, b] = answer_chars(w, sp.s, sp.e, o.align_to_words);
      const int64_t n = (int64_t)text.size();
      const int64_t a0 = std::clamp<int64_t>(a, 0, n), b0 = std::clamp<int64_t>(b, a0, n);
      const std::u32string piece = text.substr((size_t)a0, (size_t)(b0 - a0));
      const std::u32string key = lower(piece);
      auto same = std::find(lowered.begin(), lowered.end(), key);
      if (same != lowered.end()) {
        answers[(size_t)(same - lowered.begin())].score += (double)sp.score;
      } else {
        answers.push_back({(double)sp.score, a, b, tok::encode_utf8(piece)});
        lowered.push_back(key);
      }
    }
  }
  if (o.handle_impossible_answer) answers.push_back({min_null_score, 0, 0, ""});
  std::stable_sort(answers.begin(), answers.end(), [](const QaAnswer& x, const QaAnswer& y) { return x.score > y.score; });
  if ((int64_t)answers.size() > o.top_k) answers.resize((size_t)o.top_k);
  return answers;
}

std::string stored_dtype(const std::string& dir) {
  namespace fs = std::filesystem;
  auto has_weights = [](const std::string& d) {
    try {
      CheckpointWeights::find(d);
      return true;
    } catch (const std::runtime_error&) {
      return false;
    }
  };
  // A sentence-transformers folder may keep its Transformer module's weights in 0_Transformer.
  const std::string st = dir + "/0_Transformer";
  std::error_code ec;
  if (!has_weights(dir) && fs::is_directory(st, ec) && has_weights(st))
    return ops::compute_type_name(CheckpointWeights(st).stored_compute_type());
  api::require_weights(dir);
  return ops::compute_type_name(CheckpointWeights(dir).stored_compute_type());
}

}  // namespace tfm
