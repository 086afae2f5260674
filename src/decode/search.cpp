#include "decode/search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace tfm {

namespace {
int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}
float gnmt_penalty(int64_t len, float alpha) {
  return alpha == 0.0f ? 1.0f : std::pow((5.0f + (float)len) / 6.0f, alpha);
}
}  // namespace

std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqModel& model, const int64_t* src, const int64_t* src_valid_len,
                                                int64_t B, int64_t Ls, const DecodeOptions& opt,
                                                DecodeAttention* attention) {
  const int64_t V = model.config().tgt_vocab_size;
  std::vector<Tensor> enc_attn;
  Tensor enc = model.encode(src, src_valid_len, B, Ls, attention ? &enc_attn : nullptr);
  DecoderCache cache;
  model.start_decoding(cache, enc, src_valid_len, opt.max_steps);
  std::vector<int64_t> tokens(B, opt.bos_id);
  std::vector<float> logits(B * V);
  std::vector<std::vector<int64_t>> out(B);
  std::vector<bool> done(B, false);
  std::vector<std::vector<float>> cross_rows;  // per step [heads, Ls] of row 0
  const int64_t heads = model.config().num_heads;
  for (int64_t t = 0; t < opt.max_steps; ++t) {
    std::vector<std::vector<float>> cross;
    model.decode_step(cache, tokens.data(), logits.data(), opt.position_mode, attention ? &cross : nullptr);
    if (attention && !done[0]) {
      std::vector<float> row(heads * Ls);
      std::memcpy(row.data(), cross.back().data(), sizeof(float) * heads * Ls);  // row 0 of [B, heads, 1, Ls]
      cross_rows.push_back(row);
    }
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
  const int64_t V = model.config().tgt_vocab_size, H = model.config().num_hiddens, K = std::max<int64_t>(1, opt.beam_size);
  Tensor enc = model.encode(src, &src_valid_len, 1, Ls);
  DecoderCache cache;
  model.start_decoding(cache, enc, &src_valid_len, opt.max_steps);
  struct Beam {
    std::vector<int64_t> tokens;
    double logp = 0;
  };
  std::vector<Beam> alive = {Beam{}};
  std::vector<std::pair<double, std::vector<int64_t>>> finished;  // (penalised score, tokens)
  std::vector<int64_t> last = {opt.bos_id};
  std::vector<float> logits;
  for (int64_t t = 0; t < opt.max_steps && !alive.empty(); ++t) {
    const int64_t n = (int64_t)alive.size();
    logits.resize(n * V);
    model.decode_step(cache, last.data(), logits.data(), opt.position_mode);
    // Candidates: every (beam, token) with its summed log-probability.
    std::vector<std::tuple<double, int64_t, int64_t>> cand;
    cand.reserve(n * V);
    for (int64_t b = 0; b < n; ++b) {
      const float* x = logits.data() + b * V;
      float mx = x[argmax(x, V)];
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp((double)x[v] - mx);
      double lse = mx + std::log(sum);
      for (int64_t v = 0; v < V; ++v) cand.emplace_back(alive[b].logp + x[v] - lse, b, v);
    }
    const int64_t keep = std::min<int64_t>((int64_t)cand.size(), 2 * K);
    std::partial_sort(cand.begin(), cand.begin() + keep, cand.end(),
                      [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
    std::vector<Beam> next;
    std::vector<int64_t> rows, next_last;
    for (int64_t c = 0; c < keep && (int64_t)next.size() < K; ++c) {
      auto [lp, b, v] = cand[c];
      std::vector<int64_t> toks = alive[b].tokens;
      if (v == opt.eos_id) {
        // Length counts generated tokens including <eos>.
        finished.emplace_back(lp / gnmt_penalty((int64_t)toks.size() + 1, opt.length_penalty), toks);
        continue;
      }
      toks.push_back(v);
      next.push_back({toks, lp});
      rows.push_back(b);
      next_last.push_back(v);
    }
    if ((int64_t)finished.size() >= K || next.empty()) break;
    Seq2SeqModel::reorder_cache(cache, rows, H);
    alive.swap(next);
    last.swap(next_last);
  }
  if (finished.empty())  // nothing reached <eos> within max_steps: take the best unfinished beam
    for (const Beam& b : alive)
      finished.emplace_back(b.logp / gnmt_penalty((int64_t)b.tokens.size(), opt.length_penalty), b.tokens);
  auto best = std::max_element(finished.begin(), finished.end(),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
  return best->second;
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
