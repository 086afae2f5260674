// nn::MultiHeadAttention's options in training: a trainable fused Wqkv, rotary positions and a sliding window
// (the banded kernel's backward), checked against the inference path and finite differences; the window with
// dropout on the weights (the dense kernel under a band mask) against the banded path at p -> its eval result.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "nn/attention.h"
#include "nn/params.h"
#include "test_util.h"

using namespace tfm;

namespace {
struct Attn {
  nn::ParamStore store;
  nn::MultiHeadAttention a;
  int64_t H = 8, nh = 2;
  Attn(int64_t window, bool rotary) {
    nn::Vars vb(store);
    a.num_heads = nh;
    a.hidden_size = H;
    a.qkv = nn::Linear::load(vb.prefix("Wqkv"), H, 3 * H, false);
    a.output = nn::Linear::load(vb.prefix("Wo"), H, H, false);
    if (rotary) a.rotary = nn::Rotary::make(100.0, H / nh);
    a.window = window;
    store.finalize();
    store.all_data() = test::random_vec(store.total(), 31, -0.6f, 0.6f);
  }
};
}  // namespace

TEST(AttentionOptions, TrainingForwardEqualsInference) {
  const int64_t B = 2, L = 11;
  for (int64_t window : {-1, 0, 3}) {
    SCOPED_TRACE(window);
    Attn t(window, true);
    const int64_t H = t.H;
    const std::vector<float> x = test::random_vec(B * L * H, 32);
    std::vector<float> mask(B * L, 1.0f);
    mask[2 * L - 1] = mask[2 * L - 2] = 0.0f;
    ops::AttentionMask m;
    m.key_mask = mask.data();
    std::vector<float> out(B * L * H), inf(B * L * H), qkv(B * L * 3 * H), ctx(B * L * H);
    nn::Context c;
    t.a.forward(c, out.data(), x.data(), x.data(), B, L, L, m);
    t.a.qkv.pack(ops::ComputeType::F32);
    t.a.output.pack(ops::ComputeType::F32);
    t.a.forward_inference(inf.data(), x.data(), B, L, m, qkv.data(), ctx.data());
    EXPECT_TRUE(test::all_close(out, inf, 1e-5f));
    EXPECT_EQ(t.a.probs.size(), window >= 0 ? 0u : (size_t)(B * t.nh * L * L));  // banded: no [L, L] weights
  }
}

TEST(AttentionOptions, RotaryWindowBackwardMatchesFiniteDifferences) {
  const int64_t B = 1, L = 6;
  Attn t(2, true);
  const int64_t H = t.H, N = B * L;
  std::vector<float> x = test::random_vec(N * H, 33);
  const std::vector<float> w = test::random_vec(N * H, 34);
  std::vector<float> mask(N, 1.0f);
  mask[4] = 0.0f;
  ops::AttentionMask m;
  m.key_mask = mask.data();
  auto loss = [&] {
    std::vector<float> out(N * H);
    nn::Context c;
    t.a.forward(c, out.data(), x.data(), x.data(), B, L, L, m);
    double s = 0;
    for (int64_t i = 0; i < N * H; ++i) s += (double)out[i] * w[i];
    return s;
  };
  nn::Context c;
  c.grad = true;
  std::vector<float> out(N * H), dx(N * H, 0.0f);
  t.a.forward(c, out.data(), x.data(), x.data(), B, L, L, m);
  t.store.zero_grad();
  t.a.backward(w.data(), dx.data(), dx.data());
  const std::vector<float> dp = t.store.all_grad();
  const float eps = 1e-2f;
  for (size_t i = 0; i < x.size(); ++i) {
    const float xi = x[i];
    x[i] = xi + eps;
    const double lp = loss();
    x[i] = xi - eps;
    const double lm = loss();
    x[i] = xi;
    EXPECT_NEAR(dx[i], (lp - lm) / (2 * eps), 3e-3) << "x " << i;
  }
  std::vector<float>& p = t.store.all_data();
  for (size_t i = 0; i < p.size(); ++i) {
    const float pi = p[i];
    p[i] = pi + eps;
    const double lp = loss();
    p[i] = pi - eps;
    const double lm = loss();
    p[i] = pi;
    EXPECT_NEAR(dp[i], (lp - lm) / (2 * eps), 3e-3) << "parameter " << i;
  }
}

// With dropout on the weights a window runs the dense kernel under a band mask: its gradients equal the banded
// kernel's when every weight is kept (p tiny, a seed keeping all of the few weights).
TEST(AttentionOptions, WindowWithWeightDropoutRunsTheBandMask) {
  const int64_t B = 2, L = 7;
  Attn banded(1, true), dense(1, true);
  dense.store.all_data() = banded.store.all_data();
  const int64_t H = banded.H, N = B * L;
  const std::vector<float> x = test::random_vec(N * H, 35), w = test::random_vec(N * H, 36);
  std::vector<float> mask(N, 1.0f);
  mask[N - 1] = 0.0f;
  ops::AttentionMask m;
  m.key_mask = mask.data();
  std::vector<float> o1(N * H), o2(N * H), d1(N * H, 0.0f), d2(N * H, 0.0f);
  nn::Context c;
  c.grad = true;
  banded.a.forward(c, o1.data(), x.data(), x.data(), B, L, L, m);
  banded.a.backward(w.data(), d1.data(), d1.data());
  Rng rng(1);
  nn::Context cd = c;
  cd.rng = &rng;
  cd.attention_dropout = 1e-7f;  // drawn, but keeps every weight (scale 1 / (1 - p) rounds to 1)
  dense.a.forward(cd, o2.data(), x.data(), x.data(), B, L, L, m);
  EXPECT_FALSE(dense.a.windowed);
  EXPECT_TRUE(banded.a.windowed);
  dense.a.backward(w.data(), d2.data(), d2.data());
  EXPECT_TRUE(test::all_close(o1, o2, 1e-5f));
  EXPECT_TRUE(test::all_close(d1, d2, 1e-5f));
  EXPECT_TRUE(test::all_close(banded.store.all_grad(), dense.store.all_grad(), 1e-5f));
}
