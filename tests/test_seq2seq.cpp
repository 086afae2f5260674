// transformer_seq2seq against PyTorch running reference_modules.EncoderDecoder (fixtures/seq2seq, made by
// scripts/make_fixtures.py): logits, loss, every parameter gradient, clipping and two Adam steps; the same batch
// split into shards on model replicas (train/replicas.h).
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "core/threading.h"
#include "io/safetensors.h"
#include "models/seq2seq.h"
#include "test_util.h"
#include "train/optim.h"
#include "train/replicas.h"
#include "train/trainer.h"

using namespace tfm;
using tfm::test::fixture;

namespace {
struct Fixture {
  Seq2SeqConfig config = Seq2SeqConfig::load(fixture("seq2seq/config.json"));
  SafeTensors io = SafeTensors::open(fixture("seq2seq/io.safetensors"));
  Tensor enc_X = io.get("enc_X"), enc_valid = io.get("enc_valid_lens"), dec_X = io.get("dec_X"), Y = io.get("Y"),
         Y_valid = io.get("Y_valid_len");
  Seq2SeqBatch batch() const { return rows(0, enc_X.size(0)); }
  // Rows [b0, b1) of the batch (untrimmed: [b1 - b0, L]).
  Seq2SeqBatch rows(int64_t b0, int64_t b1) const {
    const int64_t Ls = enc_X.size(1), Lt = dec_X.size(1);
    Seq2SeqBatch b;
    b.src = enc_X.i64() + b0 * Ls;
    b.src_valid_len = enc_valid.i64() + b0;
    b.dec_input = dec_X.i64() + b0 * Lt;
    b.labels = Y.i64() + b0 * Lt;
    b.tgt_valid_len = Y_valid.i64() + b0;
    b.batch = b1 - b0;
    b.src_len = Ls;
    b.tgt_len = Lt;
    return b;
  }
};

// max |a - b| / max(|b|, floor): relative error with a floor so near-zero entries don't dominate.
double max_rel_err(const float* a, const float* b, int64_t n, double floor = 1e-3) {
  double worst = 0, scale = floor;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, (double)std::fabs(b[i]));
  for (int64_t i = 0; i < n; ++i) {
    double e = std::fabs((double)a[i] - b[i]) / scale;
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}
}  // namespace

TEST(Seq2SeqGolden, LogitsAndEncoderOutputsMatchPyTorch) {
  Fixture f;
  Seq2SeqModel model(f.config);
  model.load(fixture("seq2seq/model.safetensors"));
  Tensor logits = model.forward_logits(f.batch());
  Tensor want = f.io.get("logits");
  ASSERT_EQ(logits.shape(), want.shape());
  EXPECT_TRUE(tfm::test::all_close(logits.f32(), want.f32(), logits.numel(), 1e-4f, 1e-4f));
  Tensor enc = model.encode(f.enc_X.i64(), f.enc_valid.i64(), f.enc_X.size(0), f.enc_X.size(1));
  EXPECT_TRUE(tfm::test::all_close(enc.f32(), f.io.get("enc_outputs").f32(), enc.numel(), 1e-4f, 1e-4f));
}

TEST(Seq2SeqGolden, LossGradientsClippingAndAdamMatchPyTorch) {
  Fixture f;
  Seq2SeqModel model(f.config);
  model.load(fixture("seq2seq/model.safetensors"));
  LossResult r = model.forward_backward(f.batch(), nullptr);
  EXPECT_NEAR(r.loss_sum, f.io.get("loss_sum").f32()[0], 1e-4 * std::fabs(f.io.get("loss_sum").f32()[0]));
  SafeTensors grads = SafeTensors::open(fixture("seq2seq/grads.safetensors"));
  nn::ParamStore& P = model.params();
  for (size_t i = 0; i < P.entries().size(); ++i) {
    const auto& e = P.entries()[i];
    Tensor g = grads.get("grad." + e.name);
    ASSERT_EQ(g.numel(), e.numel) << e.name;
    EXPECT_LE(max_rel_err(P.grad((int64_t)i), g.f32(), e.numel), 1e-4) << "grad." << e.name;
  }
  double norm = clip_grad_norm(P, 1.0);
  EXPECT_NEAR(norm, grads.get("grad_norm").f32()[0], 1e-4 * norm);
  for (size_t i = 0; i < P.entries().size(); ++i) {
    const auto& e = P.entries()[i];
    EXPECT_LE(max_rel_err(P.grad((int64_t)i), grads.get("clipped." + e.name).f32(), e.numel), 1e-4) << e.name;
  }
  SafeTensors adam = SafeTensors::open(fixture("seq2seq/adam.safetensors"));
  Adam opt(P.total(), AdamOptions{0.005f});
  opt.step(P);
  for (size_t i = 0; i < P.entries().size(); ++i) {
    const auto& e = P.entries()[i];
    EXPECT_LE(max_rel_err(P.data((int64_t)i), adam.get("step1." + e.name).f32(), e.numel), 1e-4) << "step1." << e.name;
  }
  // Second step on the same batch: Adam's bias correction at t = 2.
  P.zero_grad();
  model.forward_backward(f.batch(), nullptr);
  clip_grad_norm(P, 1.0);
  opt.step(P);
  for (size_t i = 0; i < P.entries().size(); ++i) {
    const auto& e = P.entries()[i];
    EXPECT_LE(max_rel_err(P.data((int64_t)i), adam.get("step2." + e.name).f32(), e.numel), 1e-4) << "step2." << e.name;
  }
}

TEST(Seq2Seq, SaveLoadRoundTripIsExact) {
  Fixture f;
  Seq2SeqModel a(f.config);
  Rng rng(11);
  a.init(rng);
  const std::string path = ::testing::TempDir() + "/seq2seq_roundtrip.safetensors";
  a.save(path);
  Seq2SeqModel b(f.config);
  b.load(path);
  Tensor la = a.forward_logits(f.batch()), lb = b.forward_logits(f.batch());
  ASSERT_EQ(la.numel(), lb.numel());
  for (int64_t i = 0; i < la.numel(); ++i) ASSERT_EQ(la.f32()[i], lb.f32()[i]) << i;
}

TEST(Seq2Seq, LoadRejectsMismatchedConfigAndNaN) {
  Fixture f;
  Seq2SeqConfig c = f.config;
  c.tgt_vocab_size += 1;
  Seq2SeqModel wrong(c);
  try {
    wrong.load(fixture("seq2seq/model.safetensors"));
    FAIL() << "expected a shape error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.embedding.weight"), std::string::npos) << e.what();
  }
  Seq2SeqModel m(f.config);
  m.load(fixture("seq2seq/model.safetensors"));
  m.params().data(0)[3] = NAN;
  const std::string path = ::testing::TempDir() + "/seq2seq_nan.safetensors";
  m.save(path);
  Seq2SeqModel n(f.config);
  try {
    n.load(path);
    FAIL() << "expected a NaN error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
}

TEST(Seq2Seq, TrainingStepsWithDropoutAreDeterministic) {
  Fixture f;
  Seq2SeqConfig c = f.config;
  c.dropout = 0.2;
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Seq2SeqModel m(c);
    Rng init(5), drop(6);
    m.init(init);
    Adam opt(m.params().total(), AdamOptions{0.005f});
    for (int step = 0; step < 3; ++step) {
      m.params().zero_grad();
      m.forward_backward(f.batch(), &drop);
      clip_grad_norm(m.params(), 1.0);
      opt.step(m.params());
    }
    if (run == 0)
      first = m.params().all_data();
    else
      EXPECT_EQ(first, m.params().all_data());
  }
}

// The options beyond d2l have no PyTorch reference module; their backward is checked against central
// differences of the loss in double-checked float arithmetic on a small model.
class Seq2SeqOptionsGrad : public ::testing::TestWithParam<int> {};

TEST_P(Seq2SeqOptionsGrad, GradientsMatchFiniteDifferences) {
  Seq2SeqConfig c;
  c.num_hiddens = 8;
  c.num_layers = 2;
  c.num_heads = 2;
  c.ffn_num_hiddens = 12;
  c.dropout = 0.0;
  c.num_steps = 5;
  c.src_vocab_size = c.tgt_vocab_size = 11;
  c.norm_first = GetParam() & 1;
  c.shared_embeddings = GetParam() & 2;
  c.attention_bias = GetParam() & 2;
  c.activation = GetParam() & 1 ? "gelu" : "relu";
  Seq2SeqModel m(c);
  Rng rng(3);
  m.init(rng);
  // LayerNorm weights away from 1 and biases away from 0 so their gradients are exercised.
  for (const auto& e : m.params().entries())
    if (e.name.find("ln.") != std::string::npos)
      for (int64_t i = 0; i < e.numel; ++i) m.params().all_data()[e.offset + i] += 0.3f * rng.uniform(-1, 1);
  std::vector<int64_t> src = {4, 5, 6, 7, 3, 8, 9, 3, 1, 1}, sv = {5, 3};
  std::vector<int64_t> dec = {2, 4, 6, 8, 10, 2, 5, 7, 1, 1}, lab = {4, 6, 8, 10, 3, 5, 7, 3, 1, 1}, tv = {5, 3};
  Seq2SeqBatch b{src.data(), sv.data(), dec.data(), lab.data(), tv.data(), 2, 5, 5};
  m.params().zero_grad();
  m.forward_backward(b, nullptr, 0.1f, true);
  std::vector<float> grad = m.params().all_grad();
  auto& w = m.params().all_data();
  Rng pick(9);
  int checked = 0;
  for (int trial = 0; trial < 120; ++trial) {
    int64_t i = (int64_t)pick.below((uint64_t)w.size());
    const double num = test::central_difference(w.data(), (size_t)i, 2e-3f,
                                                [&] { return (double)m.forward_backward(b, nullptr, 0.1f, true).loss_sum; });
    EXPECT_NEAR(grad[i], num, 2e-3 + 3e-2 * std::fabs(num)) << "param element " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 120);
}

INSTANTIATE_TEST_SUITE_P(PreLnSharedBiasGelu, Seq2SeqOptionsGrad, ::testing::Values(0, 1, 2, 3));

// Trimming padding off a batch (what the d2l trainer does) leaves the loss and every gradient unchanged.
TEST(Seq2Seq, TrimmedBatchGivesSameLossAndGradientsAsPadded) {
  Fixture f;
  Seq2SeqConfig c = f.config;
  c.dropout = 0.0;
  Seq2SeqModel m(c);
  m.load(fixture("seq2seq/model.safetensors"));
  Seq2SeqBatch tight = f.batch();
  const int64_t B = tight.batch, L = tight.src_len, Lp = L + 4;  // 4 extra padding columns
  auto pad = [&](const int64_t* x, int64_t fill) {
    std::vector<int64_t> out(B * Lp, fill);
    for (int64_t b = 0; b < B; ++b) std::copy_n(x + b * L, L, out.begin() + b * Lp);
    return out;
  };
  std::vector<int64_t> src = pad(tight.src, 1), dec = pad(tight.dec_input, 1), lab = pad(tight.labels, 1);
  Seq2SeqBatch wide{src.data(), tight.src_valid_len, dec.data(), lab.data(), tight.tgt_valid_len, B, Lp, Lp};
  m.params().zero_grad();
  double lw = m.forward_backward(wide, nullptr).loss_sum;
  std::vector<float> gw = m.params().all_grad();
  tight.loss_len = Lp;
  m.params().zero_grad();
  double lt = m.forward_backward(tight, nullptr).loss_sum;
  EXPECT_NEAR(lt, lw, 1e-5 * std::fabs(lw));
  // Same values up to float summation order (GEMMs of other sizes block differently).
  EXPECT_LE(max_rel_err(m.params().all_grad().data(), gw.data(), (int64_t)gw.size()), 1e-4);
}

// ---------------------------------------------------------------- in-process data parallelism (train/replicas.h)
// A batch run as shards on model replicas gives PyTorch's loss and gradients for the whole batch, row-keyed
// dropout masks do not depend on the split, and runs are deterministic for a thread count.

namespace {
struct ThreadCount {
  int prev = get_num_threads();
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(prev); }
};
}  // namespace

TEST(TrainReplicas, ShardCountFollowsThreadsAndRows) {
  Fixture f;
  Seq2SeqModel m(f.config);
  {
    ThreadCount one(1);
    EXPECT_EQ(replica_shards(m, 64), 1);
  }
  ThreadCount two(2);
  EXPECT_EQ(replica_shards(m, 64), 2);
  EXPECT_EQ(replica_shards(m, 1), 1);  // one sentence: nothing to split
}

// Every split of the fixture's 4 sentences into 2-4 shards: PyTorch's loss and gradients of the whole batch.
TEST(TrainReplicas, ShardedBatchGivesPyTorchLossAndGradients) {
  Fixture f;
  SafeTensors grads = SafeTensors::open(fixture("seq2seq/grads.safetensors"));
  const float want_loss = f.io.get("loss_sum").f32()[0];
  const int64_t B = f.enc_X.size(0);
  for (int shards = 2; shards <= B; ++shards) {
    Seq2SeqModel m(f.config);
    m.load(fixture("seq2seq/model.safetensors"));
    ThreadCount threads(shards);
    ReplicaSet set(m);
    m.params().zero_grad();
    LossResult r = set.run(shards, [&](int s, Seq2SeqModel& replica) {
      EXPECT_EQ(replica.params().all_data(), m.params().all_data()) << "shard " << s << " sees the model's weights";
      return replica.forward_backward(f.rows(B * s / shards, B * (s + 1) / shards), nullptr);
    });
    EXPECT_NEAR(r.loss_sum, want_loss, 1e-4 * std::fabs(want_loss)) << shards << " shards";
    EXPECT_EQ(r.num_tokens, 8 + 6 + 2 + 4);  // the fixture's Y_valid_len
    nn::ParamStore& P = m.params();
    for (size_t i = 0; i < P.entries().size(); ++i) {
      const auto& e = P.entries()[i];
      EXPECT_LE(max_rel_err(P.grad((int64_t)i), grads.get("grad." + e.name).f32(), e.numel), 1e-4)
          << shards << " shards, grad." << e.name;
    }
  }
}

// The recipe's dropout: masks keyed by sentence (RowKeys), so two shards, each with its own keys over its rows,
// draw the masks one shard draws for the whole batch: the same gradients up to summation order.
TEST(TrainReplicas, RowKeyedDropoutDoesNotDependOnTheSplit) {
  Fixture f;
  Seq2SeqConfig c = f.config;
  c.dropout = 0.3;
  const int64_t B = f.enc_X.size(0);
  RowKeys keys;
  keys.key = 0x1234567u;
  for (int64_t b = 0; b < B; ++b) keys.rows.push_back(100 + 7 * b);  // the sentences' corpus indices
  Seq2SeqModel whole(c);
  whole.load(fixture("seq2seq/model.safetensors"));
  Rng rng;
  rng.set_row_keys(&keys);
  whole.params().zero_grad();
  const LossResult want = whole.forward_backward(f.rows(0, B), &rng, 0.1f, /*token_mean=*/true, 20);

  Seq2SeqModel split(c);
  split.load(fixture("seq2seq/model.safetensors"));
  ThreadCount two(2);
  ReplicaSet set(split);
  std::vector<RowKeys> part_keys(2, keys);
  std::vector<Rng> part_rngs(2);
  split.params().zero_grad();
  const LossResult got = set.run(2, [&](int s, Seq2SeqModel& m) {
    const int64_t b0 = B * s / 2, b1 = B * (s + 1) / 2;
    part_keys[s].rows.assign(keys.rows.begin() + b0, keys.rows.begin() + b1);
    part_keys[s].calls = 0;  // as the recipe sets them before each step
    part_rngs[s].set_row_keys(&part_keys[s]);
    return m.forward_backward(f.rows(b0, b1), &part_rngs[s], 0.1f, /*token_mean=*/true, 20);
  });
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::fabs(want.loss_sum));
  EXPECT_NEAR(got.token_loss_sum, want.token_loss_sum, 1e-5 * std::fabs(want.token_loss_sum));
  EXPECT_LE(max_rel_err(split.params().all_grad().data(), whole.params().all_grad().data(),
                        (int64_t)whole.params().all_grad().size()),
            1e-5);
  // And dropout did act: the gradients differ from the run without it.
  Seq2SeqModel plain(c);
  plain.load(fixture("seq2seq/model.safetensors"));
  plain.params().zero_grad();
  plain.forward_backward(f.rows(0, B), nullptr, 0.1f, true, 20);
  EXPECT_GT(max_rel_err(plain.params().all_grad().data(), whole.params().all_grad().data(),
                        (int64_t)whole.params().all_grad().size()),
            1e-3);
}

TEST(TrainReplicas, AShardsExceptionIsRethrownAfterAllShardsEnd) {
  Fixture f;
  Seq2SeqModel m(f.config);
  ThreadCount two(2);
  ReplicaSet set(m);
  std::atomic<int> ran{0};
  auto shard = [&](int s, Seq2SeqModel&) -> LossResult {
    ++ran;
    if (s == 1) throw std::invalid_argument("shard 1 failed");
    return {};
  };
  EXPECT_THROW(set.run(2, shard), std::invalid_argument);
  EXPECT_EQ(ran, 2);
}

// train_step with dropout on 2 threads (2 shards, one dropout generator each): the same weights run after run.
TEST(TrainReplicas, TwoThreadTrainStepsWithDropoutAreDeterministic) {
  Fixture f;
  NmtArrays a;
  const int64_t B = f.enc_X.size(0), L = f.enc_X.size(1);
  a.src.assign(f.enc_X.i64(), f.enc_X.i64() + B * L);
  a.tgt.assign(f.Y.i64(), f.Y.i64() + B * L);
  a.src_valid_len.assign(f.enc_valid.i64(), f.enc_valid.i64() + B);
  a.tgt_valid_len.assign(f.Y_valid.i64(), f.Y_valid.i64() + B);
  a.num_steps = L;
  Seq2SeqConfig c = f.config;
  c.dropout = 0.2;
  std::vector<int64_t> rows = {3, 0, 2, 1};
  ThreadCount two(2);
  std::vector<float> first;
  double first_loss = 0;
  for (int run = 0; run < 2; ++run) {
    Seq2SeqModel m(c);
    m.load(fixture("seq2seq/model.safetensors"));
    Adam adam(m.params().total(), AdamOptions{0.005f});
    Rng drop(9);
    TrainBatchBuffers buf;
    TrainOptions o;
    double loss = 0;
    for (int step = 0; step < 3; ++step) loss = train_step(m, adam, a, rows, /*bos=*/2, o, &drop, buf).loss_sum;
    ASSERT_TRUE(buf.replicas) << "2 threads run as 2 shards";
    if (run == 0) {
      first = m.params().all_data();
      first_loss = loss;
    } else {
      EXPECT_EQ(first, m.params().all_data());
      EXPECT_EQ(first_loss, loss);
    }
  }
}
