// Fine-tuning ModernBERT (issue 25): ModernBertTrainable against PyTorch autograd on modeling_modernbert.py's
// ModernBertModel (fixtures from scripts/make_finetune_modernbert_fixtures.py), and finite-difference checks of
// the backward passes it added (ops::rotary_backward, ops::glu_backward, LayerNorm without bias).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "finetune_test_util.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "models/modernbert.h"
#include "nn/params.h"
#include "ops/activation.h"
#include "ops/layer_norm.h"
#include "ops/rotary.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::close_to;
using tfm::test::fixture;

namespace {

struct Golden {
  EncoderConfig config;
  nn::ParamStore store;
  std::unique_ptr<ModernBertTrainable> model;
  SafeTensors io;
  std::vector<float> mask;
  Golden() : config(EncoderConfig::load(fixture("finetune_modernbert/config.json"))),
             io(SafeTensors::open(fixture("finetune_modernbert/expected.safetensors"))) {
    model = std::make_unique<ModernBertTrainable>(store, config);
    store.finalize();
    SafeTensorsWeights w(fixture("finetune_modernbert/model.safetensors"));
    model->load(store, w);
    Tensor am = io.get("attention_mask");
    for (int64_t i = 0; i < am.numel(); ++i) mask.push_back((float)am.i64()[i]);
  }
  void forward(const nn::Context& ctx) {
    Tensor ids = io.get("input_ids");
    model->forward(ctx, ids.i64(), nullptr, mask.data(), ids.size(0), ids.size(1));
  }
};

}  // namespace

TEST(FinetuneModernBert, LastHiddenStateAndEveryGradientMatchPyTorch) {
  Golden g;
  nn::Context ctx;
  ctx.grad = true;
  g.forward(ctx);
  Tensor want = g.io.get("last_hidden_state");
  EXPECT_TRUE(close_to(g.model->last_hidden_state(), want, 1e-5));
  g.store.zero_grad();
  g.model->backward(g.io.get("upstream").f32(), nullptr);
  EXPECT_EQ(g.model->prefix(), "model.");
  EXPECT_TRUE(g.model->frozen_names().empty());
  int checked = 0;
  for (const std::string& name : g.model->names()) {
    SCOPED_TRACE(name);
    Tensor grad = g.io.get("grad." + name.substr(g.model->prefix().size()));
    EXPECT_TRUE(close_to(g.store.grad(g.store.index_of(name)), grad, 1e-4));
    ++checked;
  }
  EXPECT_EQ(checked, 20);  // every tensor of the fixture: 2 embeddings' + 3 layers' (layer 0 without attn_norm) + final
  EXPECT_THROW(g.model->backward(g.io.get("upstream").f32(), g.io.get("upstream").f32()), std::logic_error);
}

// The band matters: the trainable model's local layer with a window covering the input gives other outputs.
TEST(FinetuneModernBert, SlidingWindowChangesTheOutput) {
  Golden g;
  nn::Context ctx;
  EncoderConfig wide = g.config;
  wide.json["local_attention"] = 64;
  nn::ParamStore store;
  ModernBertTrainable m(store, wide);
  store.finalize();
  SafeTensorsWeights w(fixture("finetune_modernbert/model.safetensors"));
  m.load(store, w);
  Tensor ids = g.io.get("input_ids");
  m.forward(ctx, ids.i64(), nullptr, g.mask.data(), ids.size(0), ids.size(1));
  EXPECT_FALSE(close_to(m.last_hidden_state(), g.io.get("last_hidden_state"), 1e-3));
}

TEST(FinetuneModernBert, DropoutFromTheConfigIsDrawnOnlyWithAnRng) {
  Golden g;
  g.config.json["attention_dropout"] = 0.1;
  g.config.json["mlp_dropout"] = 0.1;
  g.config.json["embedding_dropout"] = 0.1;
  nn::ParamStore store;
  ModernBertTrainable m(store, g.config);
  store.finalize();
  SafeTensorsWeights w(fixture("finetune_modernbert/model.safetensors"));
  m.load(store, w);
  Tensor ids = g.io.get("input_ids");
  nn::Context eval;
  m.forward(eval, ids.i64(), nullptr, g.mask.data(), ids.size(0), ids.size(1));
  EXPECT_TRUE(close_to(m.last_hidden_state(), g.io.get("last_hidden_state"), 1e-5));
  Rng rng(7);
  nn::Context train;
  train.rng = &rng;
  train.grad = true;
  m.forward(train, ids.i64(), nullptr, g.mask.data(), ids.size(0), ids.size(1));
  EXPECT_FALSE(close_to(m.last_hidden_state(), g.io.get("last_hidden_state"), 1e-3));
  store.zero_grad();
  std::vector<float> up(g.io.get("upstream").f32(), g.io.get("upstream").f32() + g.io.get("upstream").numel());
  m.backward(up.data(), nullptr);  // runs with the drawn masks
  g.config.json["mlp_dropout"] = 1.0;
  nn::ParamStore s2;
  EXPECT_THROW(ModernBertTrainable(s2, g.config), std::runtime_error);
}

// ---------------------------------------------------------------- finite differences of the new backward ops

namespace {
// The directional derivative of sum(f(x) * w) along each coordinate, central differences in double (of an f that
// may compute in fp32: its rounding, ~1e-7, divided by 2 eps is the differences' noise).
void expect_gradient(const std::function<void(std::vector<double>&, const std::vector<double>&)>& f,
                     std::vector<double> x, const std::vector<double>& w, const std::vector<float>& grad, double tol,
                     double eps = 1e-4) {
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> yp, ym;
    const double xi = x[i];
    x[i] = xi + eps;
    f(yp, x);
    x[i] = xi - eps;
    f(ym, x);
    x[i] = xi;
    double num = 0;
    for (size_t j = 0; j < yp.size(); ++j) num += (yp[j] - ym[j]) * w[j];
    num /= 2 * eps;
    EXPECT_NEAR(grad[i], num, tol) << "coordinate " << i;
  }
}
std::vector<double> random_vector(Rng& rng, size_t n) {
  std::vector<double> v(n);
  for (double& x : v) x = rng.uniform() * 2 - 1;
  return v;
}
std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
}  // namespace

TEST(FinetuneModernBert, RotaryBackwardIsTheTransposedRotation) {
  const int64_t B = 2, L = 5, nh = 2, hd = 8, ld = 20, half = hd / 2;  // 2 heads rotated, 4 columns left alone
  std::vector<float> cs(L * half), sn(L * half);
  ops::rotary_tables(cs.data(), sn.data(), L, hd, 10000.0);
  Rng rng(3);
  const size_t n = B * L * ld;
  std::vector<double> x = random_vector(rng, n), w = random_vector(rng, n);
  auto f = [&](std::vector<double>& y, const std::vector<double>& in) {
    std::vector<float> t = to_float(in);
    ops::rotary_apply(t.data(), B, L, nh, hd, ld, cs.data(), sn.data());
    y.assign(t.begin(), t.end());
  };
  for (auto isa : tfm::test::isas()) {
    tfm::test::IsaScope scope(isa);
    std::vector<float> g = to_float(w);
    ops::rotary_backward(g.data(), B, L, nh, hd, ld, cs.data(), sn.data());
    expect_gradient(f, x, w, g, 2e-3);
  }
}

TEST(FinetuneModernBert, GluBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, I = 5;
  Rng rng(4);
  std::vector<double> x = random_vector(rng, N * 2 * I), w = random_vector(rng, N * I);
  for (ops::Activation act : {ops::Activation::Gelu, ops::Activation::GeluTanh, ops::Activation::Silu}) {
    auto f = [&](std::vector<double>& y, const std::vector<double>& in) {
      std::vector<float> t = to_float(in), out(N * I);
      ops::glu_forward(out.data(), t.data(), N, I, act);
      y.assign(out.begin(), out.end());
    };
    std::vector<float> xf = to_float(x), wf = to_float(w), g(N * 2 * I);
    ops::glu_backward(g.data(), wf.data(), xf.data(), N, I, act);
    expect_gradient(f, x, w, g, 2e-3);
  }
}

TEST(FinetuneModernBert, LayerNormWithoutBiasBackward) {
  const int64_t N = 3, C = 6;
  Rng rng(5);
  std::vector<double> x = random_vector(rng, N * C), w = random_vector(rng, N * C);
  std::vector<float> gamma(C), zero(C, 0.0f);  // nn.LayerNorm(bias=False): a zero shift, no bias gradient
  for (int64_t c = 0; c < C; ++c) gamma[c] = 1.0f + 0.1f * (float)c;
  auto f = [&](std::vector<double>& y, const std::vector<double>& in) {
    std::vector<float> t = to_float(in), out(N * C);
    ops::layer_norm_forward(out.data(), nullptr, nullptr, t.data(), gamma.data(), zero.data(), N, C, 1e-5f);
    y.assign(out.begin(), out.end());
  };
  std::vector<float> xf = to_float(x), wf = to_float(w), out(N * C), mean(N), rstd(N), g(N * C), dgamma(C, 0.0f);
  ops::layer_norm_forward(out.data(), mean.data(), rstd.data(), xf.data(), gamma.data(), zero.data(), N, C, 1e-5f);
  ops::layer_norm_backward(g.data(), dgamma.data(), nullptr, wf.data(), xf.data(), gamma.data(), mean.data(),
                           rstd.data(), N, C);
  // The forward runs in fp32: a step of 3e-3 keeps its rounding noise near 5e-5 (at 1e-4 it reached the tolerance
  // in the -O1 sanitizer build), the truncation error of a step this size is ~1e-5.
  expect_gradient(f, x, w, g, 2e-3, 3e-3);
}
