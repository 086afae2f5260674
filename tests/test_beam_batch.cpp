// Batched beam search (src/decode/search.cpp on the index-reordered decoder cache of src/models/seq2seq.cpp):
// in fp32, searching many sentences in one batch must give exactly the hypotheses of searching each alone, in
// any batch order; and every kept hypothesis's log-probability must be the one the teacher-forced forward
// (forward_logits, no cache, checked against PyTorch elsewhere) gives its tokens, so a beam that reads another
// row's keys/values after a reorder shows up even when batching does not change it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/threading.h"
#include "decode/search.h"
#include "io/json_util.h"
#include "models/seq2seq.h"
#include "ops/gemm.h"
#include "test_util.h"
#include "text/nmt_data.h"
#include "text/vocab.h"

using namespace tfm;
using tfm::test::fixture;

namespace {

struct Sources {
  std::vector<int64_t> ids, valid_len;  // [N, Ls], [N]
  int64_t N = 0, Ls = 0;
  void add(const std::vector<int64_t>& row, int64_t vl) {
    if (N == 0) Ls = (int64_t)row.size();
    ids.insert(ids.end(), row.begin(), row.end());
    valid_len.push_back(vl);
    ++N;
  }
  Sources pick(const std::vector<int64_t>& order) const {
    Sources s;
    for (int64_t i : order)
      s.add(std::vector<int64_t>(ids.begin() + i * Ls, ids.begin() + (i + 1) * Ls), valid_len[i]);
    return s;
  }
};

// Sum of log softmax over the tokens of `h` (and <eos> when finished), by the teacher-forced forward.
double teacher_forced_logp(Seq2SeqModel& model, const int64_t* src, int64_t vl, int64_t Ls, const Hypothesis& h,
                           const DecodeOptions& opt) {
  const int64_t V = model.config().tgt_vocab_size;
  std::vector<int64_t> labels = h.tokens;
  if (h.finished) labels.push_back(opt.eos_id);
  const int64_t L = std::max<int64_t>((int64_t)labels.size(), 1);
  labels.resize(L, opt.eos_id);
  std::vector<int64_t> dec(L), tvl{L};
  dec[0] = opt.bos_id;
  std::copy(labels.begin(), labels.end() - 1, dec.begin() + 1);
  Seq2SeqBatch batch{src, &vl, dec.data(), labels.data(), tvl.data(), 1, Ls, L};
  Tensor logits = model.forward_logits(batch);
  double logp = 0;
  for (int64_t t = 0; t < h.length(); ++t) {
    const float* x = logits.f32() + t * V;
    const double mx = *std::max_element(x, x + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp((double)x[v] - mx);
    logp += (double)x[labels[t]] - mx - std::log(sum);
  }
  return logp;
}

// Batched (in the given order and reversed) equals one sentence at a time, hypothesis for hypothesis, and every
// hypothesis's logp matches the teacher-forced forward. Returns the number of hypotheses checked.
int check_batched(Seq2SeqModel& model, const Sources& src, const DecodeOptions& opt, const std::string& what) {
  auto batched = beam_search_hypotheses(model, src.ids.data(), src.valid_len.data(), src.N, src.Ls, opt);
  std::vector<int64_t> reversed(src.N);
  for (int64_t i = 0; i < src.N; ++i) reversed[i] = src.N - 1 - i;
  const Sources rev = src.pick(reversed);
  auto batched_rev = beam_search_hypotheses(model, rev.ids.data(), rev.valid_len.data(), rev.N, rev.Ls, opt);
  int checked = 0;
  for (int64_t s = 0; s < src.N; ++s) {
    const std::string where = what + " sentence " + std::to_string(s);
    const int64_t* row = src.ids.data() + s * src.Ls;
    auto single = beam_search_hypotheses(model, row, &src.valid_len[s], 1, src.Ls, opt)[0];
    const auto& b = batched[s];
    const auto& br = batched_rev[src.N - 1 - s];
    EXPECT_EQ(b.size(), single.size()) << where;
    EXPECT_EQ(br.size(), single.size()) << where;
    if (b.size() != single.size() || br.size() != single.size()) continue;
    for (size_t k = 0; k < single.size(); ++k) {
      EXPECT_EQ(b[k].tokens, single[k].tokens) << where << " rank " << k;
      EXPECT_EQ(b[k].finished, single[k].finished) << where << " rank " << k;
      // The products' summation order may depend on the number of rows (small products take a plain loop), so
      // log-probabilities agree to float rounding; the hypotheses themselves must not change.
      EXPECT_NEAR(b[k].logp, single[k].logp, 1e-5) << where << " rank " << k;
      EXPECT_EQ(br[k].tokens, single[k].tokens) << where << " rank " << k << " (reversed batch)";
      EXPECT_NEAR(br[k].logp, single[k].logp, 1e-5) << where << " rank " << k << " (reversed batch)";
      EXPECT_NEAR(b[k].logp, teacher_forced_logp(model, row, src.valid_len[s], src.Ls, b[k], opt), 1e-4)
          << where << " rank " << k << ": the search's logp is not its tokens' (a cache row read another beam's?)";
      ++checked;
    }
  }
  return checked;
}

// One thread while a test runs: these models are tiny, and on a loaded machine every OpenMP region of a few
// microseconds can wait milliseconds for its second thread. Results do not depend on the thread count here.
struct OneThread {
  int prev = get_num_threads();
  OneThread() { set_num_threads(1); }
  ~OneThread() { set_num_threads(prev); }
};

}  // namespace

// The model trained by the PyTorch reference (d2l word vocabulary), the fixture's sentences, beams 2..5.
TEST(BeamBatch, TrainedFixtureModelBatchedEqualsOneAtATime) {
  OneThread one;
  const std::string dir = fixture("d2l_trained");
  Seq2SeqModel model(Seq2SeqConfig::load(dir + "/config.json"));
  model.load(dir + "/model.safetensors");
  Vocab src_vocab = Vocab::load(dir + "/src_vocab.txt"), tgt_vocab = Vocab::load(dir + "/tgt_vocab.txt");
  const auto fx = load_json_file(fixture("d2l_trained/beam_predictions.json"));
  Sources src;
  for (const auto& s : fx["cases"][0]["sentences"]) {
    EncodedSource e = encode_source_sentence(s["src"].get<std::string>(), src_vocab, model.config().num_steps);
    src.add(e.ids, e.valid_len);
  }
  ASSERT_GE(src.N, 10);
  DecodeOptions opt;
  opt.max_steps = model.config().num_steps;
  opt.bos_id = tgt_vocab["<bos>"];
  opt.eos_id = tgt_vocab["<eos>"];
  opt.position_mode = PositionMode::kAbsolute;  // as the teacher-forced forward
  int checked = 0;
  for (bool packed : {false, true}) {
    if (packed) model.prepare_inference(ops::ComputeType::F32);  // the path tfm translate runs
    for (int64_t K : {2, 3, 5})
      for (float alpha : {0.0f, 0.6f}) {
        opt.beam_size = K;
        opt.length_penalty = alpha;
        checked += check_batched(model, src, opt,
                                 std::string(packed ? "packed" : "plain") + " K " + std::to_string(K) + " alpha " +
                                     std::to_string(alpha));
      }
  }
  EXPECT_GE(checked, 2 * 6 * 10);
}

// A random pre-LN model with shared embeddings and attention biases (the Multi30k recipe's options) and random
// sources of varied lengths: long hypotheses, beams that reorder at every step, sentences leaving the batch at
// different steps.
TEST(BeamBatch, RandomPreLnModelBatchedEqualsOneAtATime) {
  OneThread one;
  Seq2SeqConfig c;
  c.num_hiddens = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.ffn_num_hiddens = 64;
  c.dropout = 0.0;
  c.num_steps = 12;
  c.src_vocab_size = c.tgt_vocab_size = 40;
  c.norm_first = true;
  c.shared_embeddings = true;
  c.attention_bias = true;
  c.decode_positions = "absolute";
  Seq2SeqModel model(c);
  Rng rng(11);
  model.init(rng);
  const int64_t N = 9, Ls = 10;
  Sources src;
  for (int64_t s = 0; s < N; ++s) {
    const int64_t n = 1 + (int64_t)rng.below(Ls - 1);
    std::vector<int64_t> row(Ls, 1);
    for (int64_t i = 0; i < n; ++i) row[i] = 4 + (int64_t)rng.below(36);
    row[n] = 3;
    src.add(row, n + 1);
  }
  DecodeOptions opt;
  opt.max_steps = c.num_steps;
  opt.position_mode = PositionMode::kAbsolute;
  int checked = 0, long_hyps = 0;
  for (bool packed : {false, true}) {
    if (packed) model.prepare_inference(ops::ComputeType::F32);
    for (int64_t K : {3, 5}) {
      opt.beam_size = K;
      opt.length_penalty = 0.6f;
      checked += check_batched(model, src, opt, std::string(packed ? "packed" : "plain") + " K " + std::to_string(K));
      for (const auto& hs : beam_search_hypotheses(model, src.ids.data(), src.valid_len.data(), N, Ls, opt))
        long_hyps += hs.front().length() >= 5;
    }
  }
  EXPECT_GE(checked, 2 * 2 * N);
  EXPECT_GE(long_hyps, N) << "the case should decode several steps, so that beams reorder";
}
