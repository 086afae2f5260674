// Beam search (src/decode/search.cpp) against searches that share none of its code: an exhaustive search over
// every hypothesis of a tiny model, a plain beam search without early stopping, caching or batching, and greedy
// decoding on the model trained by the PyTorch reference. Log-probabilities come from the model's teacher-forced
// forward (forward_logits, checked against PyTorch elsewhere) or its decoder steps; the GNMT length penalty is
// written out here, not taken from the library.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "decode/decoder_cache.h"
#include "decode/search.h"
#include "models/seq2seq.h"
#include "test_util.h"
#include "text/nmt_data.h"
#include "text/vocab.h"

using namespace tfm;
using tfm::test::fixture;

namespace {

constexpr int64_t kBos = 2, kEos = 3;

// GNMT (Wu et al. 2016, eq. 14): score = logp / ((5 + length) / 6)^alpha, length counting <eos>.
double gnmt_score(double logp, int64_t length, double alpha) { return logp / std::pow((5.0 + length) / 6.0, alpha); }

struct Scored {
  std::vector<int64_t> tokens;  // without <eos>
  bool finished = false;        // followed by <eos>; else cut off after max_steps tokens
  double logp = 0;
  int64_t length() const { return (int64_t)tokens.size() + (finished ? 1 : 0); }
};

// A tiny random transformer_seq2seq: target vocabulary of 5 (<unk>, <pad>, <bos>, <eos>, one word), so every
// hypothesis of a few tokens can be enumerated.
std::unique_ptr<Seq2SeqModel> tiny_model(uint64_t seed, int64_t tgt_vocab = 5) {
  Seq2SeqConfig c;
  c.num_hiddens = 16;
  c.num_layers = 2;
  c.num_heads = 2;
  c.ffn_num_hiddens = 32;
  c.dropout = 0.0;
  c.num_steps = 8;
  c.src_vocab_size = 9;
  c.tgt_vocab_size = tgt_vocab;
  auto m = std::make_unique<Seq2SeqModel>(c);
  Rng rng(seed);
  m->init(rng);
  return m;
}

// A source row [1, Ls] of random ids in [4, 9), <eos>, <pad>s; returns its valid length.
int64_t random_source(Rng& rng, int64_t Ls, std::vector<int64_t>& src) {
  const int64_t n = 1 + (int64_t)rng.below(Ls - 1);
  src.assign(Ls, 1);
  for (int64_t i = 0; i < n; ++i) src[i] = 4 + (int64_t)rng.below(5);
  src[n] = kEos;
  return n + 1;
}

// log softmax of logits[V] at index v.
double log_prob(const float* x, int64_t V, int64_t v) {
  double mx = *std::max_element(x, x + V), sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp((double)x[i] - mx);
  return (double)x[v] - mx - std::log(sum);
}

// Next-token log-probabilities of each prefix (tokens after <bos>), by the teacher-forced forward (absolute
// positions, the causal mask of training): out[p][v].
std::vector<std::vector<double>> next_log_probs(Seq2SeqModel& model, const std::vector<int64_t>& src, int64_t vl,
                                                const std::vector<std::vector<int64_t>>& prefixes) {
  const int64_t V = model.config().tgt_vocab_size, Ls = (int64_t)src.size(), B = (int64_t)prefixes.size();
  int64_t L = 1;
  for (const auto& p : prefixes) L = std::max<int64_t>(L, (int64_t)p.size() + 1);
  std::vector<int64_t> srcs, vls(B, vl), dec(B * L, 1), labels(B * L, 0), tvl(B, L);
  for (int64_t b = 0; b < B; ++b) {
    srcs.insert(srcs.end(), src.begin(), src.end());
    dec[b * L] = kBos;
    std::copy(prefixes[b].begin(), prefixes[b].end(), dec.begin() + b * L + 1);
  }
  Seq2SeqBatch batch{srcs.data(), vls.data(), dec.data(), labels.data(), tvl.data(), B, Ls, L};
  Tensor logits = model.forward_logits(batch);
  std::vector<std::vector<double>> out(B, std::vector<double>(V));
  for (int64_t b = 0; b < B; ++b) {
    const float* x = logits.f32() + (b * L + (int64_t)prefixes[b].size()) * V;
    for (int64_t v = 0; v < V; ++v) out[b][v] = log_prob(x, V, v);
  }
  return out;
}

// Every hypothesis the decoder can produce in max_steps steps: each prefix of n < max_steps non-<eos> tokens
// followed by <eos>, and each sequence of max_steps non-<eos> tokens (cut off), with its log-probability.
std::vector<Scored> all_hypotheses(Seq2SeqModel& model, const std::vector<int64_t>& src, int64_t vl,
                                   int64_t max_steps) {
  const int64_t V = model.config().tgt_vocab_size;
  std::vector<Scored> out;
  std::vector<Scored> level = {Scored{}};  // prefixes of length n, not finished
  for (int64_t n = 0; n < max_steps; ++n) {
    std::vector<std::vector<int64_t>> prefixes;
    for (const Scored& s : level) prefixes.push_back(s.tokens);
    auto lp = next_log_probs(model, src, vl, prefixes);
    std::vector<Scored> next;
    for (size_t p = 0; p < level.size(); ++p)
      for (int64_t v = 0; v < V; ++v) {
        Scored s = level[p];
        s.logp += lp[p][v];
        if (v == kEos) {
          s.finished = true;
          out.push_back(s);
        } else {
          s.tokens.push_back(v);
          next.push_back(s);
        }
      }
    level.swap(next);
  }
  out.insert(out.end(), level.begin(), level.end());  // cut off at max_steps
  return out;
}

// Best first by GNMT score.
std::vector<Scored> ranked(std::vector<Scored> all, double alpha) {
  std::stable_sort(all.begin(), all.end(), [&](const Scored& a, const Scored& b) {
    return gnmt_score(a.logp, a.length(), alpha) > gnmt_score(b.logp, b.length(), alpha);
  });
  return all;
}

// A plain beam search: recomputes every prefix with the teacher-forced forward, no cache, no batching, and runs
// max_steps steps (no early stop). Same rules as documented in search.h: candidates ranked by logp (ties: lower
// beam, lower token), an <eos> candidate among the top K ranks finishes, the first K others live on, the live
// beams after max_steps are cut off; K = 1 stops at the first <eos>. Returns the best by score.
Scored plain_beam_search(Seq2SeqModel& model, const std::vector<int64_t>& src, int64_t vl, int64_t K, double alpha,
                         int64_t max_steps) {
  const int64_t V = model.config().tgt_vocab_size;
  std::vector<Scored> alive = {Scored{}}, done;
  bool stopped = false;
  for (int64_t t = 0; t < max_steps && !stopped; ++t) {
    std::vector<std::vector<int64_t>> prefixes;
    for (const Scored& s : alive) prefixes.push_back(s.tokens);
    auto lp = next_log_probs(model, src, vl, prefixes);
    struct Cand {
      double logp;
      int64_t beam, token;
    };
    std::vector<Cand> cand;
    for (int64_t b = 0; b < (int64_t)alive.size(); ++b)
      for (int64_t v = 0; v < V; ++v) cand.push_back({alive[b].logp + lp[b][v], b, v});
    std::stable_sort(cand.begin(), cand.end(), [](const Cand& a, const Cand& b) { return a.logp > b.logp; });
    std::vector<Scored> next;
    for (int64_t c = 0; c < (int64_t)cand.size() && (int64_t)next.size() < K; ++c) {
      Scored s = alive[cand[c].beam];
      s.logp = cand[c].logp;
      if (cand[c].token == kEos) {
        if (c < K) {
          s.finished = true;
          done.push_back(s);
          if (K == 1) stopped = true;
        }
        continue;
      }
      s.tokens.push_back(cand[c].token);
      next.push_back(s);
    }
    alive.swap(next);
  }
  if (!stopped) done.insert(done.end(), alive.begin(), alive.end());
  return ranked(done, alpha).front();
}

// logp of `tokens` (+ <eos> when finished) by the cached decoder, one step at a time, in the given position mode.
double decoder_logp(Seq2SeqModel& model, const int64_t* src, int64_t vl, int64_t Ls,
                    const std::vector<int64_t>& tokens, bool finished, PositionMode mode) {
  const int64_t V = model.config().tgt_vocab_size;
  Tensor enc = model.encode(src, &vl, 1, Ls);
  DecoderCache cache;
  start_decoding(model, cache, enc, &vl, (int64_t)tokens.size() + 1);
  std::vector<int64_t> seq = tokens;
  if (finished) seq.push_back(kEos);
  std::vector<float> logits(V);
  int64_t prev = kBos;
  double logp = 0;
  for (int64_t tok : seq) {
    decode_step(model, cache, &prev, logits.data(), mode);
    logp += log_prob(logits.data(), V, tok);
    prev = tok;
  }
  return logp;
}

DecodeOptions options(int64_t K, double alpha, int64_t max_steps) {
  DecodeOptions o;
  o.beam_size = K;
  o.length_penalty = (float)alpha;
  o.max_steps = max_steps;
  o.bos_id = kBos;
  o.eos_id = kEos;
  o.position_mode = PositionMode::kAbsolute;  // as the teacher-forced forward
  return o;
}

}  // namespace

// With K at least the number of candidates of any step (V * (V-1)^(max_steps-1)) nothing is ever pruned: the beam
// must return the exhaustive best, and its K kept hypotheses must be the exhaustive top K, with their scores.
TEST(Beam, BeamCoveringEverythingFindsTheExhaustiveBest) {
  const int64_t V = 5, Ls = 6;
  int checked = 0;
  for (int64_t max_steps : {3, 4}) {
    int64_t K = V;
    for (int64_t i = 1; i < max_steps; ++i) K *= V - 1;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      auto model_ptr = tiny_model(seed);
    Seq2SeqModel& model = *model_ptr;
      Rng rng(100 + seed);
      for (int s = 0; s < 2; ++s) {
        std::vector<int64_t> src;
        const int64_t vl = random_source(rng, Ls, src);
        const auto all = all_hypotheses(model, src, vl, max_steps);
        for (double alpha : {0.0, 0.6, 2.0}) {
          const auto want = ranked(all, alpha);
          auto got = beam_search_hypotheses(model, src.data(), &vl, 1, Ls, options(K, alpha, max_steps))[0];
          ASSERT_EQ((int64_t)got.size(), K);
          const std::string where = "max_steps " + std::to_string(max_steps) + " seed " + std::to_string(seed) +
                                    " source " + std::to_string(s) + " alpha " + std::to_string(alpha);
          for (int64_t k = 0; k < K; ++k) {
            const double ws = gnmt_score(want[k].logp, want[k].length(), alpha);
            EXPECT_NEAR(got[k].score, ws, 1e-5) << where << " rank " << k;
            // Tokens only where the exhaustive ranking has no near-tie around rank k.
            const bool clear = (k == 0 || gnmt_score(want[k - 1].logp, want[k - 1].length(), alpha) - ws > 1e-4) &&
                               (k + 1 == K || ws - gnmt_score(want[k + 1].logp, want[k + 1].length(), alpha) > 1e-4);
            if (clear) {
              EXPECT_EQ(got[k].tokens, want[k].tokens) << where << " rank " << k;
              EXPECT_EQ(got[k].finished, want[k].finished) << where << " rank " << k;
              EXPECT_NEAR(got[k].logp, want[k].logp, 1e-5) << where << " rank " << k;
            }
            EXPECT_EQ(got[k].length(), (int64_t)got[k].tokens.size() + (got[k].finished ? 1 : 0));
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 3 * 2 * 3);
}

// Narrow beams prune, so they need not find the exhaustive best; but they must find exactly what the plain beam
// search (no early stop, no cache, one sentence at a time) finds: stopping early is only allowed when no live
// beam can still win. All sentences of a model go through one batched call.
TEST(Beam, NarrowBeamEqualsPlainBeamSearchRunToMaxSteps) {
  const int64_t Ls = 6, max_steps = 6, N = 6;
  int differs_from_greedy = 0, checked = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    auto model_ptr = tiny_model(seed, 6);
    Seq2SeqModel& model = *model_ptr;
    Rng rng(200 + seed);
    std::vector<std::vector<int64_t>> srcs(N);
    std::vector<int64_t> flat, vls(N);
    for (int64_t s = 0; s < N; ++s) {
      vls[s] = random_source(rng, Ls, srcs[s]);
      flat.insert(flat.end(), srcs[s].begin(), srcs[s].end());
    }
    for (int64_t K : {1, 2, 3, 5}) {
      for (double alpha : {0.0, 1.0}) {
        auto got = beam_search_hypotheses(model, flat.data(), vls.data(), N, Ls, options(K, alpha, max_steps));
        auto greedy = greedy_decode(model, flat.data(), vls.data(), N, Ls, options(1, 0, max_steps));
        for (int64_t s = 0; s < N; ++s) {
          Scored want = plain_beam_search(model, srcs[s], vls[s], K, alpha, max_steps);
          const std::string where = "seed " + std::to_string(seed) + " K " + std::to_string(K) + " alpha " +
                                    std::to_string(alpha) + " sentence " + std::to_string(s);
          ASSERT_FALSE(got[s].empty()) << where;
          EXPECT_EQ(got[s][0].tokens, want.tokens) << where;
          EXPECT_EQ(got[s][0].finished, want.finished) << where;
          EXPECT_NEAR(got[s][0].score, gnmt_score(want.logp, want.length(), alpha), 1e-5) << where;
          if (K == 1) {
            EXPECT_EQ(got[s][0].tokens, greedy[s]) << where;
          }
          differs_from_greedy += got[s][0].tokens != greedy[s];
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 6 * 4 * 2 * 6);
  EXPECT_GE(differs_from_greedy, 20) << "the cases should exercise the search, not just greedy";
}

// Beam search never returns a hypothesis scoring below greedy's under the same length penalty (K >= 2), on tiny
// random models, scored exhaustively.
TEST(Beam, NeverScoresBelowGreedyOnTinyModels) {
  const int64_t Ls = 6, max_steps = 5;
  int better = 0, checked = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    auto model_ptr = tiny_model(seed, 6);
    Seq2SeqModel& model = *model_ptr;
    Rng rng(300 + seed);
    for (int s = 0; s < 4; ++s) {
      std::vector<int64_t> src;
      const int64_t vl = random_source(rng, Ls, src);
      auto g = greedy_decode(model, src.data(), &vl, 1, Ls, options(1, 0, max_steps))[0];
      const bool g_finished = (int64_t)g.size() < max_steps;
      const double g_logp = decoder_logp(model, src.data(), vl, Ls, g, g_finished, PositionMode::kAbsolute);
      for (int64_t K : {2, 3, 5}) {
        for (double alpha : {0.0, 1.0}) {
          auto h = beam_search_hypotheses(model, src.data(), &vl, 1, Ls, options(K, alpha, max_steps))[0][0];
          const double b_logp = decoder_logp(model, src.data(), vl, Ls, h.tokens, h.finished, PositionMode::kAbsolute);
          const double bs = gnmt_score(b_logp, h.length(), alpha);
          const double gs = gnmt_score(g_logp, (int64_t)g.size() + (g_finished ? 1 : 0), alpha);
          EXPECT_NEAR(h.score, bs, 1e-5);
          EXPECT_GE(bs, gs - 1e-6) << "seed " << seed << " source " << s << " K " << K << " alpha " << alpha;
          better += bs > gs + 1e-6;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 6 * 4 * 3 * 2);
  EXPECT_GE(better, 20) << "the cases should include beams that beat greedy";
}

// The length penalty decides as the formula says: a case (found by the exhaustive search, not by the beam) where
// alpha 0 and alpha 1 rank different hypotheses first; the beam must follow the exhaustive choice for each alpha.
TEST(Beam, LengthPenaltyChangesTheChoiceAsTheFormulaSays) {
  const int64_t V = 5, Ls = 6, max_steps = 4, K = V * (V - 1) * (V - 1) * (V - 1);
  int cases = 0;
  for (uint64_t seed = 1; seed <= 12 && cases < 3; ++seed) {
    auto model_ptr = tiny_model(seed);
    Seq2SeqModel& model = *model_ptr;
    Rng rng(400 + seed);
    for (int s = 0; s < 4 && cases < 3; ++s) {
      std::vector<int64_t> src;
      const int64_t vl = random_source(rng, Ls, src);
      const auto all = all_hypotheses(model, src, vl, max_steps);
      const auto r0 = ranked(all, 0.0), r1 = ranked(all, 1.0);
      const Scored &w0 = r0[0], &w1 = r1[0];
      if (w0.tokens == w1.tokens && w0.finished == w1.finished) continue;
      // Clear margins, so float rounding cannot decide.
      if (gnmt_score(w0.logp, w0.length(), 0) - gnmt_score(r0[1].logp, r0[1].length(), 0) < 1e-3) continue;
      if (gnmt_score(w1.logp, w1.length(), 1) - gnmt_score(r1[1].logp, r1[1].length(), 1) < 1e-3) continue;
      ++cases;
      // alpha 1 divides by (5 + length) / 6: the longer hypothesis gains.
      EXPECT_GT(w1.length(), w0.length());
      auto b0 = beam_search_hypotheses(model, src.data(), &vl, 1, Ls, options(K, 0.0, max_steps))[0][0];
      auto b1 = beam_search_hypotheses(model, src.data(), &vl, 1, Ls, options(K, 1.0, max_steps))[0][0];
      EXPECT_EQ(b0.tokens, w0.tokens) << "seed " << seed;
      EXPECT_EQ(b0.finished, w0.finished) << "seed " << seed;
      EXPECT_EQ(b1.tokens, w1.tokens) << "seed " << seed;
      EXPECT_EQ(b1.finished, w1.finished) << "seed " << seed;
      EXPECT_NEAR(b0.score, w0.logp, 1e-5);
      EXPECT_NEAR(b0.logp, w0.logp, 1e-5);
      EXPECT_NEAR(b1.score, w1.logp / ((5.0 + w1.length()) / 6.0), 1e-5);
      EXPECT_NEAR(b1.logp, w1.logp, 1e-5);
    }
  }
  EXPECT_EQ(cases, 3) << "no model/source where the length penalty changes the exhaustive winner";
}

TEST(Beam, RejectsBadOptions) {
  auto model_ptr = tiny_model(1);
    Seq2SeqModel& model = *model_ptr;
  std::vector<int64_t> src = {4, 5, kEos, 1};
  int64_t vl = 3;
  auto bad = [&](DecodeOptions o, const std::string& needle) {
    try {
      beam_search_hypotheses(model, src.data(), &vl, 1, 4, o);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  bad(options(0, 0, 4), "beam_size must be >= 1, got 0");
  bad(options(2, -0.5, 4), "length_penalty must be finite and >= 0");
  bad(options(2, NAN, 4), "length_penalty must be finite and >= 0");
  bad(options(2, 0, -1), "max_steps must be >= 0");
}

// On the model trained by the PyTorch reference (d2l_trained, d2l_step positions as its predict_seq2seq), over
// many English sentences of fra.txt: beam search never scores below greedy, and reports its scores correctly.
TEST(Beam, TrainedModelNeverScoresBelowGreedy) {
  const std::string dir = fixture("d2l_trained");
  const std::string fra = tfm::test::data_dir() + "/fra-eng/fra.txt";
  if (!std::filesystem::exists(fra)) GTEST_SKIP() << fra << " not found (set TFM_DATA_DIR)";
  Seq2SeqModel model(Seq2SeqConfig::load(dir + "/config.json"));
  model.load(dir + "/model.safetensors");
  Vocab src_vocab = Vocab::load(dir + "/src_vocab.txt");
  const int64_t T = model.config().num_steps;
  ParallelCorpus corpus = read_nmt_file(fra, 1200);
  std::vector<std::string> sentences;
  std::set<std::string> seen;
  for (const auto& toks : corpus.source) {
    std::string s;
    for (size_t i = 0; i < toks.size(); ++i) s += (i ? " " : "") + toks[i];
    if (seen.insert(s).second) sentences.push_back(s);
  }
  ASSERT_GE(sentences.size(), 600u);
  std::vector<int64_t> flat, vls;
  for (const auto& s : sentences) {
    EncodedSource e = encode_source_sentence(s, src_vocab, T);
    flat.insert(flat.end(), e.ids.begin(), e.ids.end());
    vls.push_back(e.valid_len);
  }
  const int64_t N = (int64_t)sentences.size();
  DecodeOptions g = options(1, 0, T);
  g.position_mode = PositionMode::kD2lStep;
  auto greedy = greedy_decode(model, flat.data(), vls.data(), N, T, g);
  std::vector<double> greedy_logp(N);
  for (int64_t s = 0; s < N; ++s)
    greedy_logp[s] = decoder_logp(model, flat.data() + s * T, vls[s], T, greedy[s], (int64_t)greedy[s].size() < T,
                                  PositionMode::kD2lStep);
  int better = 0;
  for (int64_t K : {2, 4, 8}) {
    for (double alpha : {0.0, 1.0}) {
      DecodeOptions o = options(K, alpha, T);
      o.position_mode = PositionMode::kD2lStep;
      auto hyps = beam_search_hypotheses(model, flat.data(), vls.data(), N, T, o);
      int below = 0;
      for (int64_t s = 0; s < N; ++s) {
        const Hypothesis& h = hyps[s][0];
        const int64_t glen = (int64_t)greedy[s].size() + ((int64_t)greedy[s].size() < T ? 1 : 0);
        const double gs = gnmt_score(greedy_logp[s], glen, alpha);
        // The same hypothesis scored in a batch of another size may differ in the last float bits.
        const bool same = h.tokens == greedy[s] && h.finished == ((int64_t)greedy[s].size() < T);
        if (!same && h.score < gs - 1e-5) {
          if (++below <= 5) {
            ADD_FAILURE() << "K " << K << " alpha " << alpha << " '" << sentences[s] << "': beam " << h.score
                          << " < greedy " << gs;
          }
        }
        better += !same && h.score > gs + 1e-5;
        if (s % 50 == 0) {  // the reported score is the hypothesis's score
          const double lp = decoder_logp(model, flat.data() + s * T, vls[s], T, h.tokens, h.finished,
                                         PositionMode::kD2lStep);
          EXPECT_NEAR(h.logp, lp, 1e-4) << sentences[s];
          EXPECT_NEAR(h.score, gnmt_score(lp, h.length(), alpha), 1e-4) << sentences[s];
        }
      }
      EXPECT_EQ(below, 0) << "K " << K << " alpha " << alpha << ": " << below << " of " << N << " below greedy";
    }
  }
  EXPECT_GE(better, 10) << "the sentences should include some where beam search beats greedy";
}

// The PyTorch reference beam search (scripts/make_beam_fixtures.py: plain search run to num_steps, d2l_step
// positions) on d2l_trained: same hypothesis, same logp and score.
TEST(Beam, MatchesPyTorchReferenceBeamSearchOnTrainedModel) {
  const std::string dir = fixture("d2l_trained");
  Seq2SeqModel model(Seq2SeqConfig::load(dir + "/config.json"));
  model.load(dir + "/model.safetensors");
  std::ifstream f(dir + "/beam_predictions.json");
  ASSERT_TRUE(f) << "missing beam_predictions.json (run /usr/bin/python3 scripts/make_beam_fixtures.py)";
  const nlohmann::json fx = nlohmann::json::parse(f);
  const int64_t T = model.config().num_steps, pad = 1;
  int checked = 0;
  for (const auto& c : fx["cases"]) {
    DecodeOptions o = options(c["beam_size"].get<int64_t>(), c["length_penalty"].get<double>(), T);
    o.position_mode = PositionMode::kD2lStep;
    std::vector<int64_t> flat, vls;
    for (const auto& s : c["sentences"]) {
      std::vector<int64_t> ids = s["src_ids"].get<std::vector<int64_t>>();
      vls.push_back((int64_t)ids.size());
      ids.resize(T, pad);
      flat.insert(flat.end(), ids.begin(), ids.end());
    }
    const int64_t N = (int64_t)vls.size();
    auto got = beam_search_hypotheses(model, flat.data(), vls.data(), N, T, o);
    for (int64_t i = 0; i < N; ++i) {
      const auto& s = c["sentences"][i];
      const Hypothesis& h = got[i][0];
      const std::string where = "beam " + std::to_string(o.beam_size) + " alpha " + std::to_string(o.length_penalty) +
                                " '" + s["src"].get<std::string>() + "'";
      EXPECT_EQ(h.tokens, s["pred_ids"].get<std::vector<int64_t>>()) << where;
      EXPECT_EQ(h.finished, s["finished"].get<bool>()) << where;
      EXPECT_EQ(h.length(), s["length"].get<int64_t>()) << where;
      EXPECT_NEAR(h.logp, s["logp"].get<double>(), 1e-4) << where;
      EXPECT_NEAR(h.score, s["score"].get<double>(), 1e-4) << where;
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}
