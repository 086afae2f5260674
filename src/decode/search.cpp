#include "decode/search.h"

#include "decode/decoder_cache.h"
#include "decode/logits_process.h"
#include "core/profile.h"
#include "ops/softmax.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>

namespace tfm {

namespace {
// logits [rows, V]: the suppressed token's logit becomes the lowest float (DecodeOptions::suppress_id).
void suppress_token(float* logits, int64_t rows, int64_t V, int64_t id) {
  if (id < 0 || id >= V) return;
  for (int64_t r = 0; r < rows; ++r) logits[r * V + id] = std::numeric_limits<float>::lowest();
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

// One logits row x[V] of a beam with log-probability `logp`: returns lse = log(sum_v exp(x[v]))
// (ops::logsumexp_fast: max-shifted, exp in float within 2 ulp, summed in double: as exact as the float logits)
// and in `out` (unordered) every token that can be among the row's M best in beam search's order, logp + (x[v] - lse)
// descending then token ascending, with that logp; the vocabulary is never sorted.
// Why that is enough: the candidate logp is non-decreasing in x[v] (rounding is monotone), so with x_M the M-th
// largest logit the M best all have logp >= lp_M = logp(x_M); every token with logp >= lp_M is returned. Those
// have x >= x_M - slack, slack far above double rounding, so logp is computed only near that boundary.
// Two passes: (1) the M largest logits by a min-heap, skipping 16-logit blocks whose maximum cannot enter it;
// (2) the exp sum, and the blocks whose maximum reaches x_M - slack.
// normalized: x holds log-probabilities already (Hugging Face scoring: log_softmax, then the processors); lse is
// then taken as 0, not recomputed, so that a processor's -inf does not renormalise the others.
double row_candidates(const float* x, int64_t V, int64_t M, double logp, std::vector<std::pair<double, int64_t>>& out,
                      bool normalized = false) {
  constexpr int64_t kBlock = 16;
  out.clear();
  thread_local std::vector<float> heap, block_max;
  const int64_t nblocks = (V + kBlock - 1) / kBlock;
  block_max.resize(nblocks);
  heap.clear();
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t v0 = b * kBlock, v1 = std::min(V, v0 + kBlock);
    float bm = -INFINITY;
#pragma omp simd reduction(max : bm)
    for (int64_t v = v0; v < v1; ++v) bm = x[v] > bm ? x[v] : bm;
    block_max[b] = bm;
    if ((int64_t)heap.size() == M && !(bm > heap.front())) continue;
    for (int64_t v = v0; v < v1; ++v) {
      if ((int64_t)heap.size() < M) {
        heap.push_back(x[v]);
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      } else if (x[v] > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
        heap.back() = x[v];
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      }
    }
  }
  if (heap.empty()) return -INFINITY;
  const float mx = *std::max_element(heap.begin(), heap.end());
  const double lse = normalized ? 0.0 : ops::logsumexp_fast(x, V, mx);
  if (M <= 0) return lse;
  const float xM = heap.front();
  auto cand_logp = [&](float xv) { return logp + ((double)xv - lse); };
  const double lpM = cand_logp(xM);
  const double slack = std::isfinite(lpM) ? 1e-6 * (std::fabs(lpM) + std::fabs((double)xM) + std::fabs(lse) + 1.0)
                                          : 0.0;
  const float lo = std::isfinite(xM) ? (float)((double)xM - slack) : -INFINITY;
  // With fewer than M finite scores (a processor left one token: ForcedEOS at the last step) every -inf token
  // ties at the threshold; only the first M of them (ascending ids, the order ties are ranked in) can rank among
  // the sentence's top M, so the others are not listed (all V of them were: [rows, V] pairs at the last step).
  int64_t neg_inf_left = M;
  for (int64_t b = 0; b < nblocks; ++b) {
    if (!(block_max[b] >= lo)) continue;
    for (int64_t v = b * kBlock, v1 = std::min(V, v + kBlock); v < v1; ++v)
      if (x[v] >= lo) {
        if (x[v] == -INFINITY && neg_inf_left-- <= 0) continue;
        const double lp = cand_logp(x[v]);
        if (lp >= lpM) out.emplace_back(lp, v);
      }
  }
  return lse;
}
}  // namespace

double hf_length_penalty(int64_t length, double alpha) { return std::pow((double)length, alpha); }

void apply_logits_processors(float* scores, int64_t rows, int64_t V, int64_t step, const DecodeOptions& opt) {
  auto only = [&](int64_t id) {
    if (id < 0 || id >= V) return;
    for (int64_t r = 0; r < rows; ++r) {
      float* x = scores + r * V;
      std::fill(x, x + V, -INFINITY);
      x[id] = 0.0f;
    }
  };
  auto ban = [&](int64_t id) {
    if (id < 0 || id >= V) return;
    for (int64_t r = 0; r < rows; ++r) scores[r * V + id] = -INFINITY;
  };
  for (int64_t id : opt.banned_ids) ban(id);                    // disable_unk (as NoBadWordsLogitsProcessor)
  ban(opt.suppress_id);
  if (step == 0) only(opt.forced_bos_id);                       // ForcedBOSTokenLogitsProcessor
  if (step == opt.max_steps - 1) only(opt.forced_eos_id);       // ForcedEOSTokenLogitsProcessor
}

double gnmt_length_penalty(int64_t length, double alpha) {
  return alpha == 0.0 ? 1.0 : std::pow((5.0 + (double)length) / 6.0, alpha);
}

std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqModel& model, const int64_t* src, const int64_t* src_valid_len,
                                                int64_t B, int64_t Ls, const DecodeOptions& opt,
                                                DecodeAttention* attention) {
  const int64_t V = model.config().tgt_vocab_size;
  std::vector<Tensor> enc_attn;
  Tensor enc = model.encode(src, src_valid_len, B, Ls, attention ? &enc_attn : nullptr);
  DecoderCache cache;
  start_decoding(model, cache, enc, src_valid_len, opt.max_steps);
  std::vector<int64_t> tokens(B, opt.bos_id);
  std::vector<float> logits(B * V);
  std::vector<std::vector<int64_t>> out(B);
  std::vector<bool> done(B, false);
  std::vector<std::vector<float>> cross_rows;  // per step [heads, Ls] of row 0
  const int64_t heads = model.config().num_heads;
  for (int64_t t = 0; t < opt.max_steps; ++t) {
    std::vector<std::vector<float>> cross;
    decode_step(model, cache, tokens.data(), logits.data(), opt.position_mode, attention ? &cross : nullptr);
    if (opt.hf)
      apply_logits_processors(logits.data(), B, V, t, opt);  // on the logits, as HF's greedy search
    else
      suppress_token(logits.data(), B, V, opt.suppress_id);
    if (attention && !done[0]) {
      std::vector<float> row(heads * Ls);
      std::memcpy(row.data(), cross.back().data(), sizeof(float) * heads * Ls);  // row 0 of [B, heads, 1, Ls]
      cross_rows.push_back(row);
    }
    decode_profile::Timer tm(decode_profile::kLogSoftmaxTopK);
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      tokens[b] = argmax(logits.data() + b * V, V);
      if (done[b]) continue;
      if (tokens[b] == opt.eos_id)
        done[b] = true;
      else
        out[b].push_back(tokens[b]);
      all_done &= done[b];
    }
    if (all_done) break;
  }
  if (attention) {
    attention->encoder_self.clear();
    for (const Tensor& w : enc_attn) {  // keep row 0: [heads, Ls, Ls]
      Tensor t = Tensor::empty({heads, Ls, Ls});
      std::memcpy(t.f32(), w.f32(), t.nbytes());
      attention->encoder_self.push_back(t);
    }
    const int64_t steps = (int64_t)cross_rows.size();
    attention->cross = Tensor::zeros({heads, steps, Ls});
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(attention->cross.f32() + (h * steps + s) * Ls, cross_rows[s].data() + h * Ls, sizeof(float) * Ls);
  }
  return out;
}

std::vector<int64_t> beam_search(Seq2SeqModel& model, const int64_t* src, int64_t src_valid_len, int64_t Ls,
                                 const DecodeOptions& opt) {
  return beam_search_batch(model, src, &src_valid_len, 1, Ls, opt)[0];
}

std::vector<std::vector<int64_t>> beam_search_batch(Seq2SeqModel& model, const int64_t* src,
                                                    const int64_t* src_valid_len, int64_t N, int64_t Ls,
                                                    const DecodeOptions& opt) {
  auto hyps = beam_search_hypotheses(model, src, src_valid_len, N, Ls, opt);
  std::vector<std::vector<int64_t>> out(N);
  for (int64_t s = 0; s < N; ++s) out[s] = std::move(hyps[s].front().tokens);
  return out;
}

std::vector<std::vector<Hypothesis>> beam_search_hypotheses(Seq2SeqModel& model, const int64_t* src,
                                                            const int64_t* src_valid_len, int64_t N, int64_t Ls,
                                                            const DecodeOptions& opt) {
  if (opt.beam_size < 1)
    throw std::invalid_argument("beam_size must be >= 1, got " + std::to_string(opt.beam_size));
  if (!std::isfinite(opt.length_penalty) || (!opt.hf && opt.length_penalty < 0.0f))
    throw std::invalid_argument("length_penalty must be finite" + std::string(opt.hf ? "" : " and >= 0") + ", got " +
                                std::to_string(opt.length_penalty));
  if (opt.max_steps < 0) throw std::invalid_argument("max_steps must be >= 0, got " + std::to_string(opt.max_steps));
  const int64_t V = model.config().tgt_vocab_size;
  const int64_t K = opt.beam_size;
  const double alpha = opt.length_penalty;
  struct Beam {
    std::vector<int64_t> tokens;
    double logp = 0;
  };
  struct Sentence {
    std::vector<Beam> alive = {Beam{}};
    std::vector<Hypothesis> kept;  // the K best finished / cut-off hypotheses, best first
    bool done = false;
    void keep(Hypothesis h, int64_t K) {
      if ((int64_t)kept.size() == K && !(h.score > kept.back().score)) return;  // ties keep the earlier one
      auto at = std::upper_bound(kept.begin(), kept.end(), h.score,
                                 [](double v, const Hypothesis& x) { return v > x.score; });
      kept.insert(at, std::move(h));
      if ((int64_t)kept.size() > K) kept.pop_back();
    }
  };
  auto hypothesis = [&](std::vector<int64_t> tokens, double logp, bool finished) {
    Hypothesis h{std::move(tokens), logp, 0.0, finished};
    h.score = logp / (opt.hf ? hf_length_penalty(h.length(), alpha) : gnmt_length_penalty(h.length(), alpha));
    return h;
  };
  std::vector<Sentence> sent(N);
  if (N == 0) return {};
  if (opt.max_steps > 0) {
    Tensor enc = model.encode(src, src_valid_len, N, Ls);
    DecoderCache cache;
    start_decoding(model, cache, enc, src_valid_len, opt.max_steps);
    std::vector<int64_t> row_sentence(N);  // cache row -> sentence; a sentence's rows are contiguous, beam order
    for (int64_t i = 0; i < N; ++i) row_sentence[i] = i;
    std::vector<int64_t> last(N, opt.bos_id);
    std::vector<float> logits;
    std::vector<double> lse;
    // Per row its candidates that can rank among the top M = 2K of its sentence (see row_candidates).
    const int64_t M = std::min<int64_t>(2 * K, V);
    std::vector<std::vector<std::pair<double, int64_t>>> row_cand;  // (logp, token)
    std::vector<double> row_logp;
    std::vector<const std::vector<int64_t>*> row_tokens;  // the beam of each row
    std::vector<int64_t> forced(N, -1);                   // per sentence its forced token this step, or -1
    if (opt.target_prefix && (int64_t)opt.target_prefix->size() != N)
      throw std::invalid_argument("target_prefix has " + std::to_string(opt.target_prefix->size()) +
                                  " entries for " + std::to_string(N) + " sources");
    if (opt.target_prefix)
      for (int64_t s = 0; s < N; ++s)
        for (int64_t id : (*opt.target_prefix)[s])
          if (id < 0 || id >= V || id == opt.eos_id || (int64_t)(*opt.target_prefix)[s].size() >= opt.max_steps)
            throw std::invalid_argument("target_prefix " + std::to_string(s) +
                                        ": ids must be target ids other than <eos>, fewer than max_steps " +
                                        std::to_string(opt.max_steps));
    // Best score any continuation of a live beam with logp lp can reach: its logp only decreases, its length
    // lies in [len + 1, max_steps] and logp <= 0, so dividing by the largest penalty of that range bounds it.
    const double lp_max = gnmt_length_penalty(opt.max_steps, alpha);
    auto best_reachable = [&](const Beam& b) {
      return b.logp / std::max(gnmt_length_penalty((int64_t)b.tokens.size() + 1, alpha), lp_max);
    };
    for (int64_t t = 0; t < opt.max_steps && !row_sentence.empty(); ++t) {
      const int64_t R = (int64_t)row_sentence.size();
      logits.resize(R * V);
      decode_step(model, cache, last.data(), logits.data(), opt.position_mode);
      decode_profile::Timer tm(decode_profile::kLogSoftmaxTopK);
      if (opt.hf) {  // transformers: log_softmax, then the processors on the log-probabilities (below)
#pragma omp parallel for schedule(static) if (R * V >= (1 << 16))
        for (int64_t r = 0; r < R; ++r) ops::log_softmax_fast(logits.data() + r * V, V);
      } else {
        suppress_token(logits.data(), R, V, opt.suppress_id);
      }
      lse.resize(R);
      row_cand.resize(R);
      row_logp.resize(R);
      row_tokens.resize(R);
      for (int64_t s = 0; opt.target_prefix && s < N; ++s)
        forced[s] = t < (int64_t)(*opt.target_prefix)[s].size() ? (*opt.target_prefix)[s][t] : -1;
      {
        int64_t r = 0;
        for (int64_t r0 = 0; r0 < R; ++r0) {  // logp of each row's beam
          const int64_t s = row_sentence[r0];
          r = r0 == 0 || row_sentence[r0 - 1] != s ? 0 : r + 1;
          row_logp[r0] = sent[s].alive[r].logp;
          row_tokens[r0] = &sent[s].alive[r].tokens;
        }
      }
#pragma omp parallel for schedule(static) if (R * V >= (1 << 16))
      for (int64_t r = 0; r < R; ++r) {
        float* x = logits.data() + r * V;
        const int64_t f = forced[row_sentence[r]];
        const bool processed = opt.logits_processor && f < 0;  // HF: processors on the log-softmax scores
        if (processed) {
          thread_local std::vector<int64_t> ids;
          ids.assign(1, opt.bos_id);
          ids.insert(ids.end(), row_tokens[r]->begin(), row_tokens[r]->end());
          if (!opt.hf) ops::log_softmax(x, V);  // hf: done above
          opt.logits_processor->process(ids.data(), (int64_t)ids.size(), x);
        }
        if (opt.hf && f < 0) apply_logits_processors(x, 1, V, t, opt);  // after them, as HF orders ForcedBOS / EOS
        lse[r] = row_candidates(x, V, M, row_logp[r], row_cand[r], processed || opt.hf);
        if (f >= 0) row_cand[r].assign(1, {row_logp[r] + ((double)x[f] - lse[r]), f});  // target prefix
      }
      tm.next(decode_profile::kSelect);
      const bool last_step = t + 1 == opt.max_steps;
      std::vector<int64_t> keep_rows, next_sentence, next_last;
      for (int64_t r0 = 0; r0 < R;) {
        const int64_t s = row_sentence[r0];
        int64_t r1 = r0;
        while (r1 < R && row_sentence[r1] == s) ++r1;
        Sentence& S = sent[s];
        // The top 2K candidates hold the top K ranks and at least K not ending in <eos> (at most K of all
        // candidates end in <eos>: one per live beam). Each of them is among its row's top 2K.
        std::vector<std::tuple<double, int64_t, int64_t>> cand;  // (logp, row, token)
        for (int64_t r = r0; r < r1; ++r)
          for (const auto& [lp, v] : row_cand[r]) cand.emplace_back(lp, r, v);
        const int64_t top = std::min<int64_t>((int64_t)cand.size(), 2 * K);
        std::partial_sort(cand.begin(), cand.begin() + top, cand.end(), [](const auto& a, const auto& b) {
          if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
          return std::make_pair(std::get<1>(a), std::get<2>(a)) < std::make_pair(std::get<1>(b), std::get<2>(b));
        });
        std::vector<Beam> next;
        std::vector<int64_t> rows, toks_last;
        bool eos_finished = false;
        for (int64_t c = 0; c < top && (int64_t)next.size() < K; ++c) {
          auto [lp, r, v] = cand[c];
          const std::vector<int64_t>& prefix = S.alive[r - r0].tokens;
          if (v == opt.eos_id) {
            // An <eos> ranked below K live candidates is not kept (as HF / fairseq), nor one a processor made -inf
            // (HF's topk orders those ties arbitrarily; none is ever the better hypothesis).
            if (c < K && lp > -INFINITY) {
              S.keep(hypothesis(prefix, lp, true), K);
              eos_finished = true;
            }
            continue;
          }
          std::vector<int64_t> toks = prefix;
          toks.push_back(v);
          next.push_back({std::move(toks), lp});
          rows.push_back(r);
          toks_last.push_back(v);
        }
        S.alive.swap(next);
        bool hf_done = false;
        if (opt.hf && (int64_t)S.kept.size() == K && top > 0) {  // BeamHypotheses.is_done
          const double best = std::get<0>(cand[0]);
          const double worst = S.kept.back().score;
          const int64_t len = opt.early_stopping == EarlyStopping::kNever && alpha > 0 ? opt.max_steps : t + 1;
          hf_done = opt.early_stopping == EarlyStopping::kTrue || worst >= best / hf_length_penalty(len, alpha);
        }
        if (last_step && !hf_done)  // max_steps tokens: the live beams are cut off
          for (Beam& b : S.alive) S.keep(hypothesis(std::move(b.tokens), b.logp, false), K);
        bool stop = hf_done || last_step || S.alive.empty() || (K == 1 && eos_finished);  // K = 1: greedy
        if (!opt.hf && !stop && (int64_t)S.kept.size() == K) {
          double reach = -INFINITY;
          for (const Beam& b : S.alive) reach = std::max(reach, best_reachable(b));
          stop = reach <= S.kept.back().score;  // no live beam can enter the kept K
        }
        if (stop) {
          S.done = true;  // leaves the batch: its rows are not kept
        } else {
          keep_rows.insert(keep_rows.end(), rows.begin(), rows.end());
          next_last.insert(next_last.end(), toks_last.begin(), toks_last.end());
          next_sentence.insert(next_sentence.end(), rows.size(), s);
        }
        r0 = r1;
      }
      tm.next(decode_profile::kReorder);
      if (keep_rows.empty()) break;
      reorder_cache(cache, keep_rows);
      row_sentence.swap(next_sentence);
      last.swap(next_last);
    }
  }
  std::vector<std::vector<Hypothesis>> out(N);
  for (int64_t s = 0; s < N; ++s) {
    Sentence& S = sent[s];
    if (!S.done)  // max_steps 0: the empty hypothesis
      for (Beam& b : S.alive) S.keep(hypothesis(std::move(b.tokens), b.logp, false), K);
    out[s] = std::move(S.kept);
  }
  return out;
}

std::vector<std::vector<int64_t>> greedy_decode_recompute(Seq2SeqModel& model, const int64_t* src,
                                                          const int64_t* src_valid_len, int64_t B, int64_t Ls,
                                                          const DecodeOptions& opt) {
  const int64_t V = model.config().tgt_vocab_size;
  std::vector<std::vector<int64_t>> prefix(B, std::vector<int64_t>{opt.bos_id}), out(B);
  std::vector<bool> done(B, false);
  for (int64_t t = 0; t < opt.max_steps; ++t) {
    const int64_t L = t + 1;
    std::vector<int64_t> dec(B * L), labels(B * L, 0), tvl(B, L);
    for (int64_t b = 0; b < B; ++b) std::copy(prefix[b].begin(), prefix[b].end(), dec.begin() + b * L);
    Seq2SeqBatch batch{src, src_valid_len, dec.data(), labels.data(), tvl.data(), B, Ls, L};
    Tensor logits = model.forward_logits(batch);
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      int64_t tok = argmax(logits.f32() + (b * L + t) * V, V);
      prefix[b].push_back(tok);
      if (!done[b]) {
        if (tok == opt.eos_id)
          done[b] = true;
        else
          out[b].push_back(tok);
      }
      all_done &= done[b];
    }
    if (all_done) break;
  }
  return out;
}

}  // namespace tfm
