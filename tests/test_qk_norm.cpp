// q / k normalisation as an option of nn::MultiHeadAttention (q_norm, k_norm: an RMSNorm over head_dim applied to
// each head before rotary, Qwen3Attention): against a double-precision reference of the normalised scores, its
// gradients against finite differences on the stacked q | k | v layout, and its effect on the Qwen3 fixture
// (scripts/make_attention_option_fixtures.py; the fixture's PyTorch comparison is in
// test_grouped_query_attention.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attention_fixture.h"

using namespace tfm;

namespace {
struct NormedAttention {
  nn::ParamStore store;
  nn::MultiHeadAttention a;
  static constexpr int64_t H = 12, nh = 3, hd = 4;
  NormedAttention() {
    nn::Vars vb(store);
    a.num_heads = nh;
    a.hidden_size = H;
    a.query = nn::Linear::load(vb.prefix("q"), H, H);
    a.key = nn::Linear::load(vb.prefix("k"), H, H);
    a.value = nn::Linear::load(vb.prefix("v"), H, H);
    a.output = nn::Linear::load(vb.prefix("o"), H, H);
    a.q_norm = nn::LayerNorm::load_rms(vb.prefix("q_norm"), hd, 1e-6f);
    a.k_norm = nn::LayerNorm::load_rms(vb.prefix("k_norm"), hd, 1e-6f);
    store.finalize();
    store.all_data() = test::random_vec(store.total(), 41, -0.7f, 0.7f);
    for (const auto& e : store.entries())  // norm weights around 1
      if (e.name.find("norm") != std::string::npos)
        for (int64_t i = 0; i < e.numel; ++i) store.all_data()[e.offset + i] += 1.0f;
  }
};

// out = W_o concat_h softmax(rms(q_h) . rms(k_h) / sqrt(hd)) v_h, in double.
std::vector<float> reference(const nn::MultiHeadAttention& a, const std::vector<float>& x, int64_t L) {
  const int64_t H = a.hidden_size, nh = a.num_heads, hd = a.head_dim();
  auto proj = [&](const nn::Linear& l, int64_t n, int64_t o) {
    double s = l.bias.data()[o];
    for (int64_t c = 0; c < H; ++c) s += (double)x[n * H + c] * l.weight.data()[o * H + c];
    return s;
  };
  std::vector<double> q(L * H), k(L * H), v(L * H), ctx(L * H, 0.0);
  for (int64_t n = 0; n < L; ++n)
    for (int64_t o = 0; o < H; ++o) q[n * H + o] = proj(a.query, n, o), k[n * H + o] = proj(a.key, n, o),
                                    v[n * H + o] = proj(a.value, n, o);
  auto rms = [&](std::vector<double>& t, const nn::LayerNorm& norm) {
    for (int64_t n = 0; n < L * nh; ++n) {
      double ss = 0;
      for (int64_t c = 0; c < hd; ++c) ss += t[n * hd + c] * t[n * hd + c];
      const double r = 1.0 / std::sqrt(ss / hd + 1e-6);
      for (int64_t c = 0; c < hd; ++c) t[n * hd + c] *= r * norm.weight.data()[c];
    }
  };
  rms(q, a.q_norm);
  rms(k, a.k_norm);
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(L);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < L; ++j) {
        s[j] = 0;
        for (int64_t c = 0; c < hd; ++c) s[j] += q[i * H + h * hd + c] * k[j * H + h * hd + c];
        s[j] /= std::sqrt((double)hd);
        mx = std::max(mx, s[j]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t j = 0; j < L; ++j)
        for (int64_t c = 0; c < hd; ++c) ctx[i * H + h * hd + c] += s[j] / sum * v[j * H + h * hd + c];
    }
  std::vector<float> out(L * H);
  for (int64_t n = 0; n < L; ++n)
    for (int64_t o = 0; o < H; ++o) {
      double s = a.output.bias.data()[o];
      for (int64_t c = 0; c < H; ++c) s += ctx[n * H + c] * a.output.weight.data()[o * H + c];
      out[n * H + o] = (float)s;
    }
  return out;
}
}  // namespace

TEST(QkNorm, ForwardMatchesTheReferenceInTrainingAndInference) {
  NormedAttention t;
  const int64_t L = 6, H = NormedAttention::H;
  const std::vector<float> x = test::random_vec(L * H, 42), want = reference(t.a, x, L);
  std::vector<float> out(L * H);
  t.a.forward(nn::Context{}, out.data(), x.data(), x.data(), 1, L, L, {});
  EXPECT_TRUE(t.a.fused_qkv);  // the stacked q | k | v layout, normalised in place
  EXPECT_TRUE(test::all_close(out, want, 1e-5f, 1e-4f));
  test::pack_for_inference(t.a);
  std::vector<float> inf(L * H), qkv(L * 3 * H), ctx(L * H);
  t.a.forward_inference(inf.data(), x.data(), 1, L, {}, qkv.data(), ctx.data());
  EXPECT_TRUE(test::all_close(inf, want, 1e-5f, 1e-4f));
}

TEST(QkNorm, GradientsMatchFiniteDifferences) {
  NormedAttention t;
  const int64_t B = 2, L = 4, H = NormedAttention::H;
  std::vector<float> x = test::random_vec(B * L * H, 43);
  const std::vector<float> w = test::random_vec(B * L * H, 44);
  std::vector<float> mask(B * L, 1.0f);
  mask[B * L - 1] = 0.0f;
  ops::AttentionMask m;
  m.key_mask = mask.data();
  auto loss = [&] {
    std::vector<float> out(B * L * H);
    t.a.forward(nn::Context{}, out.data(), x.data(), x.data(), B, L, L, m);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += (double)out[i] * w[i];
    return s;
  };
  nn::Context c;
  c.grad = true;
  std::vector<float> out(B * L * H), dx(B * L * H, 0.0f);
  t.a.forward(c, out.data(), x.data(), x.data(), B, L, L, m);
  t.store.zero_grad();
  t.a.backward(w.data(), dx.data(), dx.data());
  const std::vector<float> dp = t.store.all_grad();
  test::expect_gradient(x, dx, loss, "dx");
  test::expect_gradient(t.store.all_data(), dp, loss, "parameters");
}

TEST(QkNorm, RemovingTheNormsMovesQwen3AttentionClearly) {
  const SafeTensors fx = test::option_fixture("qwen3_attention.safetensors");
  const Tensor xt = fx.get("x");
  const int64_t B = xt.size(0), L = xt.size(1), H = xt.size(2), nh = 4, nkv = 2, hd = 8;
  const std::vector<float> x = test::fixture_vec(fx, "x"), mask = test::fixture_vec(fx, "mask"),
                           want = test::fixture_vec(fx, "out");
  for (bool norms : {true, false}) {
    nn::ParamStore store;
    nn::Vars vb(store);
    nn::MultiHeadAttention a;
    a.num_heads = nh;
    a.num_kv_heads = nkv;
    a.head_size = hd;
    a.hidden_size = H;
    a.query = nn::Linear::load(vb.prefix("q_proj"), H, nh * hd, false);
    a.key = nn::Linear::load(vb.prefix("k_proj"), H, nkv * hd, false);
    a.value = nn::Linear::load(vb.prefix("v_proj"), H, nkv * hd, false);
    a.output = nn::Linear::load(vb.prefix("o_proj"), nh * hd, H, false);
    if (norms) {
      a.q_norm = nn::LayerNorm::load_rms(vb.prefix("q_norm"), hd, 1e-6f);
      a.k_norm = nn::LayerNorm::load_rms(vb.prefix("k_norm"), hd, 1e-6f);
    }
    a.rotary = nn::Rotary::make(10000.0, hd);
    a.causal = true;
    store.finalize();
    test::fill_from(store, fx);
    ops::AttentionMask m;
    m.key_mask = mask.data();
    std::vector<float> out(B * L * H);
    a.forward(nn::Context{}, out.data(), x.data(), x.data(), B, L, L, m);
    double worst = 0;
    for (int64_t r = 0; r < B * L; ++r)
      if (mask[r] != 0.0f) worst = std::max(worst, test::max_abs_diff(out.data() + r * H, want.data() + r * H, H));
    if (norms) {
      EXPECT_LT(worst, 1e-4);
    } else {
      EXPECT_GT(worst, 0.02);
    }
  }
}
