#include "decode/logits_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

#include "decode/decoder_cache.h"
#include "ops/softmax.h"

namespace tfm {

namespace {
std::string num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}
}  // namespace

LogitsProcessor::LogitsProcessor(LogitsProcessorOptions o, int64_t vocab_size) : o_(std::move(o)), V_(vocab_size) {
  if (!(o_.repetition_penalty > 0) || !std::isfinite(o_.repetition_penalty))
    throw std::invalid_argument("repetition_penalty must be a finite number > 0 (1 = off), got " +
                                num(o_.repetition_penalty));
  if (o_.no_repeat_ngram_size < 0)
    throw std::invalid_argument("no_repeat_ngram_size must be >= 0 (0 = off), got " +
                                std::to_string(o_.no_repeat_ngram_size));
  if (o_.min_length < 0) throw std::invalid_argument("min_length must be >= 0, got " + std::to_string(o_.min_length));
  if (o_.min_length > 0 && o_.eos_id < 0) throw std::invalid_argument("min_length needs the <eos> id");
  for (size_t i = 0; i < o_.bad_words_ids.size(); ++i) {
    if (o_.bad_words_ids[i].empty())
      throw std::invalid_argument("bad_words_ids[" + std::to_string(i) + "] is empty");
    for (int64_t id : o_.bad_words_ids[i])
      if (id < 0 || id >= V_)
        throw std::invalid_argument("bad_words_ids[" + std::to_string(i) + "]: id " + std::to_string(id) +
                                    " is outside the target vocabulary [0, " + std::to_string(V_) + ")");
  }
  // HF NoBadWordsLogitsProcessor: a sequence that is <eos> alone is dropped (generation could not end otherwise).
  std::erase_if(o_.bad_words_ids, [&](const std::vector<int64_t>& s) { return s.size() == 1 && s[0] == o_.eos_id; });
  if (!(o_.temperature > 0) || !std::isfinite(o_.temperature))
    throw std::invalid_argument("temperature must be a finite number > 0, got " + num(o_.temperature));
  if (o_.top_k < 0) throw std::invalid_argument("top_k must be >= 0 (0 = all tokens), got " + std::to_string(o_.top_k));
  if (!(o_.top_p > 0 && o_.top_p <= 1)) throw std::invalid_argument("top_p must be in (0, 1], got " + num(o_.top_p));
}

bool LogitsProcessor::has_processors() const {
  return o_.repetition_penalty != 1.0f || o_.no_repeat_ngram_size > 0 || !o_.bad_words_ids.empty() ||
         o_.min_length > 0;
}

void LogitsProcessor::process(const int64_t* ids, int64_t len, float* scores) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // 1. RepetitionPenaltyLogitsProcessor: gather, penalise, scatter (each distinct token once).
  if (o_.repetition_penalty != 1.0f) {
    const float p = o_.repetition_penalty;
    std::vector<int64_t> seen(ids, ids + len);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int64_t t : seen) {
      if (t < 0 || t >= V_) continue;
      const float s = scores[t];
      scores[t] = s < 0 ? s * p : s / p;
    }
  }
  // 2. NoRepeatNGramLogitsProcessor (_calc_banned_ngram_tokens): tokens that followed the last n-1 tokens before.
  if (const int64_t n = o_.no_repeat_ngram_size; n > 0 && len + 1 >= n) {
    const int64_t* tail = ids + len - (n - 1);
    for (int64_t i = 0; i + n <= len; ++i)
      if (std::equal(ids + i, ids + i + n - 1, tail)) {
        const int64_t t = ids[i + n - 1];
        if (t >= 0 && t < V_) scores[t] = kNegInf;
      }
  }
  // 3. NoBadWordsLogitsProcessor (a SequenceBiasLogitsProcessor with bias -inf).
  for (const std::vector<int64_t>& w : o_.bad_words_ids) {
    const int64_t L = (int64_t)w.size();
    if (L == 1) {
      scores[w[0]] = kNegInf;
      continue;
    }
    if (L > len) continue;  // the sequence is longer than the context
    if (std::equal(w.begin(), w.end() - 1, ids + len - (L - 1))) scores[w.back()] = kNegInf;
  }
  // 4. MinLengthLogitsProcessor.
  if (len < o_.min_length && o_.eos_id >= 0 && o_.eos_id < V_) scores[o_.eos_id] = kNegInf;
}

void LogitsProcessor::warp(float* scores) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // 5. TemperatureLogitsWarper.
  if (o_.temperature != 1.0f)
    for (int64_t v = 0; v < V_; ++v) scores[v] = scores[v] / o_.temperature;
  // 6. TopKLogitsWarper: remove scores < the k-th largest.
  if (o_.top_k > 0 && o_.top_k < V_) {
    std::vector<float> tmp(scores, scores + V_);
    std::nth_element(tmp.begin(), tmp.begin() + (o_.top_k - 1), tmp.end(), std::greater<float>());
    const float kth = tmp[o_.top_k - 1];
    for (int64_t v = 0; v < V_; ++v)
      if (scores[v] < kth) scores[v] = kNegInf;
  }
  // 7. TopPLogitsWarper: ascending sort, cumulative softmax; remove where cumsum <= 1 - top_p, keep the best one.
  if (o_.top_p < 1.0f) {
    std::vector<int64_t> order(V_);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
    std::vector<double> e(V_);
    const double total = ops::softmax_exp(scores, V_, e.data());
    double cum = 0;
    const double limit = 1.0 - (double)o_.top_p;
    for (int64_t i = 0; i + 1 < V_; ++i) {  // the last (best) token is always kept
      const int64_t v = order[i];
      cum += e[v] / total;
      if (cum <= limit) scores[v] = kNegInf;
    }
  }
}

void LogitsProcessor::start(int64_t rows, const int64_t* src, const int64_t* src_valid_len, int64_t Ls,
                            const uint64_t* streams) {
  rng_.clear();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint64_t> seq = {o_.seed, 0x9e3779b97f4a7c15ull};
    for (int64_t i = 0; i < src_valid_len[r]; ++i) seq.push_back((uint64_t)src[r * Ls + i]);
    // Stream 0 is seeded as before streams existed; stream s > 0 adds a word no token id can be, then s.
    if (streams && streams[r] > 0) seq.push_back(~0ull), seq.push_back(streams[r]);
    std::vector<uint32_t> words;
    for (uint64_t x : seq) words.push_back((uint32_t)x), words.push_back((uint32_t)(x >> 32));
    std::seed_seq ss(words.begin(), words.end());
    rng_.emplace_back(ss);
  }
}

int64_t LogitsProcessor::next_token(int64_t row, float* scores) {
  if (!o_.do_sample) return std::max_element(scores, scores + V_) - scores;  // first maximum, as torch.argmax
  warp(scores);
  std::vector<double> p(V_);
  const double total = ops::softmax_exp(scores, V_, p.data());
  // A uniform double in [0, 1) from the top 53 bits (std::uniform_real_distribution is not the same everywhere).
  const double u = (double)(rng_.at(row)() >> 11) * 0x1.0p-53 * total;
  double cum = 0;
  int64_t last = 0;
  for (int64_t v = 0; v < V_; ++v) {
    if (p[v] == 0) continue;
    last = v;
    cum += p[v];
    if (u < cum) return v;
  }
  return last;  // rounding: the last token with a non-zero probability
}

std::vector<Hypothesis> generate_greedy(Seq2SeqModel& model, const int64_t* src, const int64_t* src_valid_len,
                                        int64_t B, int64_t Ls, const DecodeOptions& opt, LogitsProcessor* processor,
                                        const std::vector<std::vector<int64_t>>& target_prefix) {
  const int64_t V = model.config().tgt_vocab_size;
  if (!target_prefix.empty() && (int64_t)target_prefix.size() != B)
    throw std::invalid_argument("target_prefix has " + std::to_string(target_prefix.size()) + " entries for " +
                                std::to_string(B) + " sources");
  for (size_t b = 0; b < target_prefix.size(); ++b) {
    if ((int64_t)target_prefix[b].size() >= opt.max_steps && !target_prefix[b].empty())
      throw std::invalid_argument("target_prefix " + std::to_string(b) + " has " +
                                  std::to_string(target_prefix[b].size()) + " tokens, not fewer than the " +
                                  std::to_string(opt.max_steps) + " decoding steps");
    for (int64_t id : target_prefix[b])
      if (id < 0 || id >= V || id == opt.eos_id)
        throw std::invalid_argument("target_prefix " + std::to_string(b) + ": id " + std::to_string(id) +
                                    (id == opt.eos_id ? " is <eos>"
                                                      : " is outside the target vocabulary [0, " + std::to_string(V) + ")"));
  }
  std::vector<Hypothesis> out(B);
  if (B == 0 || opt.max_steps <= 0) return out;
  if (processor) processor->start(B, src, src_valid_len, Ls, opt.sample_streams);
  Tensor enc = model.encode(src, src_valid_len, B, Ls);
  DecoderCache cache;
  start_decoding(model, cache, enc, src_valid_len, opt.max_steps);
  std::vector<int64_t> tokens(B, opt.bos_id), ids;
  std::vector<float> logits(B * V), row(V);
  std::vector<bool> done(B, false);
  for (int64_t t = 0; t < opt.max_steps; ++t) {
    decode_step(model, cache, tokens.data(), logits.data(), opt.position_mode);
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      float* x = logits.data() + b * V;
      if (opt.suppress_id >= 0 && opt.suppress_id < V) x[opt.suppress_id] = std::numeric_limits<float>::lowest();
      Hypothesis& h = out[b];
      int64_t tok;
      const bool forced = !target_prefix.empty() && t < (int64_t)target_prefix[b].size();
      if (forced) {
        tok = target_prefix[b][t];
        std::copy_n(x, V, row.data());
        ops::log_softmax(row.data(), V);
        h.logp += row[tok];
      } else {
        if (processor) {
          ids.assign(1, opt.bos_id);
          ids.insert(ids.end(), h.tokens.begin(), h.tokens.end());
          processor->process(ids.data(), (int64_t)ids.size(), x);
        }
        if (opt.hf) apply_logits_processors(x, 1, V, t, opt);  // forced BOS / EOS after them, as HF
        std::copy_n(x, V, row.data());
        ops::log_softmax(row.data(), V);
        tok = processor ? processor->next_token(b, x) : std::max_element(x, x + V) - x;
        h.logp += row[tok];
      }
      tokens[b] = tok;
      if (tok == opt.eos_id) {
        done[b] = true;
        h.finished = true;
      } else {
        h.tokens.push_back(tok);
        all_done = false;
      }
    }
    if (all_done) break;
  }
  for (Hypothesis& h : out) h.score = h.logp;
  return out;
}

std::vector<std::vector<double>> score_targets(Seq2SeqModel& model, const int64_t* src, const int64_t* src_valid_len,
                                               int64_t B, int64_t Ls, const std::vector<std::vector<int64_t>>& target,
                                               const DecodeOptions& opt) {
  const Seq2SeqConfig& c = model.config();
  const int64_t V = c.tgt_vocab_size;
  if ((int64_t)target.size() != B)
    throw std::invalid_argument("score: " + std::to_string(target.size()) + " targets for " + std::to_string(B) +
                                " sources");
  int64_t steps = 0;
  for (int64_t b = 0; b < B; ++b) {
    if ((int64_t)target[b].size() + 1 > c.max_len)
      throw std::invalid_argument("target " + std::to_string(b) + " has " + std::to_string(target[b].size()) +
                                  " tokens; with <eos> more than the model's max_len " + std::to_string(c.max_len));
    for (int64_t id : target[b])
      if (id < 0 || id >= V)
        throw std::invalid_argument("target " + std::to_string(b) + ": id " + std::to_string(id) +
                                    " is outside the target vocabulary [0, " + std::to_string(V) + ")");
    steps = std::max<int64_t>(steps, (int64_t)target[b].size() + 1);
  }
  std::vector<std::vector<double>> out(B);
  if (B == 0) return out;
  Tensor enc = model.encode(src, src_valid_len, B, Ls);
  DecoderCache cache;
  start_decoding(model, cache, enc, src_valid_len, steps);
  std::vector<int64_t> tokens(B, opt.bos_id);
  std::vector<float> logits(B * V);
  for (int64_t t = 0; t < steps; ++t) {
    decode_step(model, cache, tokens.data(), logits.data(), opt.position_mode);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = (int64_t)target[b].size();
      if (t > n) continue;
      float* x = logits.data() + b * V;
      ops::log_softmax(x, V);
      const int64_t label = t < n ? target[b][t] : opt.eos_id;
      out[b].push_back(x[label]);
      tokens[b] = t < n ? target[b][t] : opt.eos_id;  // rows past their end feed <eos> (ignored)
    }
  }
  return out;
}

}  // namespace tfm
