// transformer_seq2seq against PyTorch running reference_modules.EncoderDecoder (fixtures/seq2seq, made by
// scripts/make_fixtures.py): logits, loss, every parameter gradient, clipping and two Adam steps.
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "models/seq2seq.h"
#include "test_util.h"
#include "train/optim.h"

using namespace tfm;
using tfm::test::fixture;

namespace {
struct Fixture {
  Seq2SeqConfig config = Seq2SeqConfig::load(fixture("seq2seq/config.json"));
  SafeTensors io = SafeTensors::open(fixture("seq2seq/io.safetensors"));
  Tensor enc_X = io.get("enc_X"), enc_valid = io.get("enc_valid_lens"), dec_X = io.get("dec_X"), Y = io.get("Y"),
         Y_valid = io.get("Y_valid_len");
  Seq2SeqBatch batch() const {
    Seq2SeqBatch b;
    b.src = enc_X.i64();
    b.src_valid_len = enc_valid.i64();
    b.dec_input = dec_X.i64();
    b.labels = Y.i64();
    b.tgt_valid_len = Y_valid.i64();
    b.batch = enc_X.size(0);
    b.src_len = enc_X.size(1);
    b.tgt_len = dec_X.size(1);
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
    float keep = w[i];
    const float h = 2e-3f;
    w[i] = keep + h;
    double up = m.forward_backward(b, nullptr, 0.1f, true).loss_sum;
    w[i] = keep - h;
    double dn = m.forward_backward(b, nullptr, 0.1f, true).loss_sum;
    w[i] = keep;
    double num = (up - dn) / (2 * h);
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
