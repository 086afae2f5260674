// The gated feed-forward option of nn::FeedForward (GeGLU / SwiGLU: linear2(act(a) * g), (a, g) = linear1(x)
// split in halves): the training forward against a double-precision reference, the inference path against the
// training one, the backward against finite differences, the gate dropout.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "nn/layers.h"
#include "nn/params.h"
#include "test_util.h"

using namespace tfm;

namespace {
struct Gated {
  nn::ParamStore store;
  nn::FeedForward ffn;
  int64_t H = 6, I = 5;
  explicit Gated(ops::Activation act, bool bias) {
    nn::Vars vb(store);
    ffn.gated = true;
    ffn.act = act;
    ffn.linear1 = nn::Linear::load(vb.prefix("wi"), H, 2 * I, bias);
    ffn.linear2 = nn::Linear::load(vb.prefix("wo"), I, H, bias);
    store.finalize();
    store.all_data() = test::random_vec(store.total(), 21, -0.5f, 0.5f);
  }
};

double act_ref(double x, ops::Activation act) {
  switch (act) {
    case ops::Activation::Silu: return x / (1 + std::exp(-x));
    case ops::Activation::GeluTanh: return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    default: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  }
}
}  // namespace

TEST(GatedFeedForward, ForwardMatchesTheReferenceAndInference) {
  for (ops::Activation act : {ops::Activation::Gelu, ops::Activation::Silu, ops::Activation::GeluTanh}) {
    for (bool bias : {false, true}) {
      Gated g(act, bias);
      const int64_t N = 4, H = g.H, I = g.I;
      const std::vector<float> x = test::random_vec(N * H, 22);
      std::vector<float> out(N * H), ref(N * H);
      nn::Context ctx;
      g.ffn.forward(ctx, out.data(), x.data(), N);
      const float *w1 = g.ffn.linear1.weight.data(), *w2 = g.ffn.linear2.weight.data();
      for (int64_t n = 0; n < N; ++n) {
        std::vector<double> gated(I);
        for (int64_t i = 0; i < I; ++i) {
          double a = bias ? g.ffn.linear1.bias.data()[i] : 0, gt = bias ? g.ffn.linear1.bias.data()[I + i] : 0;
          for (int64_t c = 0; c < H; ++c) {
            a += (double)w1[i * H + c] * x[n * H + c];
            gt += (double)w1[(I + i) * H + c] * x[n * H + c];
          }
          gated[i] = act_ref(a, act) * gt;
        }
        for (int64_t c = 0; c < H; ++c) {
          double s = bias ? g.ffn.linear2.bias.data()[c] : 0;
          for (int64_t i = 0; i < I; ++i) s += (double)w2[c * I + i] * gated[i];
          ref[n * H + c] = (float)s;
        }
      }
      EXPECT_TRUE(test::all_close(out, ref, 1e-5f));
      g.ffn.linear1.pack(ops::ComputeType::F32);
      g.ffn.linear2.pack(ops::ComputeType::F32);
      std::vector<float> inf(N * H), hidden(N * g.ffn.inference_hidden());
      g.ffn.forward_inference(inf.data(), x.data(), hidden.data(), N);
      EXPECT_TRUE(test::all_close(inf, out, 1e-6f));
    }
  }
}

TEST(GatedFeedForward, BackwardMatchesFiniteDifferences) {
  Gated g(ops::Activation::Gelu, true);
  const int64_t N = 3, H = g.H;
  std::vector<float> x = test::random_vec(N * H, 23);
  const std::vector<float> w = test::random_vec(N * H, 24);
  auto loss = [&] {
    std::vector<float> out(N * H);
    nn::Context ctx;
    g.ffn.forward(ctx, out.data(), x.data(), N);
    double s = 0;
    for (int64_t i = 0; i < N * H; ++i) s += (double)out[i] * w[i];
    return s;
  };
  nn::Context ctx;
  ctx.grad = true;
  std::vector<float> out(N * H), dx(N * H, 0.0f);
  g.ffn.forward(ctx, out.data(), x.data(), N);
  g.store.zero_grad();
  g.ffn.backward(w.data(), dx.data());
  const std::vector<float> dparams = g.store.all_grad();
  const float eps = 1e-2f;
  for (size_t i = 0; i < x.size(); ++i) {
    const float xi = x[i];
    x[i] = xi + eps;
    const double lp = loss();
    x[i] = xi - eps;
    const double lm = loss();
    x[i] = xi;
    EXPECT_NEAR(dx[i], (lp - lm) / (2 * eps), 2e-3) << "x " << i;
  }
  std::vector<float>& p = g.store.all_data();
  for (size_t i = 0; i < p.size(); ++i) {
    const float pi = p[i];
    p[i] = pi + eps;
    const double lp = loss();
    p[i] = pi - eps;
    const double lm = loss();
    p[i] = pi;
    EXPECT_NEAR(dparams[i], (lp - lm) / (2 * eps), 2e-3) << "parameter " << i;
  }
}

TEST(GatedFeedForward, GateDropoutIsDrawnWithAnRngAndReplayedByBackward) {
  Gated g(ops::Activation::Silu, false);
  g.ffn.gate_dropout = 0.5f;
  const int64_t N = 8, H = g.H;
  const std::vector<float> x = test::random_vec(N * H, 25);
  std::vector<float> plain(N * H), dropped(N * H);
  nn::Context eval;
  g.ffn.forward(eval, plain.data(), x.data(), N);
  Rng rng(3);
  nn::Context train;
  train.rng = &rng;
  train.grad = true;
  g.ffn.forward(train, dropped.data(), x.data(), N);
  EXPECT_FALSE(test::all_close(plain, dropped, 1e-3f));
  // The backward of a linear function in linear2's input: dx . x reproduces sum(out * w) minus the bias-free part.
  std::vector<float> dx(N * H, 0.0f);
  g.ffn.backward(dropped.data(), dx.data());
  for (float v : dx) ASSERT_TRUE(std::isfinite(v));
}
