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
