// ALiBi as nn::MultiHeadAttention's score-bias provider (nn::Alibi): the slopes of the ALiBi paper's code
// (JinaBERT-v2) and of MPT for power-of-two and other head counts, the [heads, L, L] table, and a JinaBERT-v2
// self-attention with 6 heads against PyTorch (scripts/make_attention_option_fixtures.py, checked there against an
// explicit bias matrix in float64): training forward and every gradient, inference padded and unpadded.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attention_fixture.h"

using namespace tfm;

TEST(Alibi, SlopesMatchThePaperCodeAndMpt) {
  const SafeTensors fx = test::option_fixture("alibi.safetensors");
  for (int64_t n : {6, 8, 12}) {
    const std::vector<float> want = test::fixture_vec(fx, "slopes_" + std::to_string(n));
    EXPECT_TRUE(test::all_close(nn::Alibi::paper_slopes(n), want, 0.0f, 1e-7f)) << n;
  }
  for (int64_t n : {6, 12, 16}) {
    const std::vector<float> want = test::fixture_vec(fx, "mpt_slopes_" + std::to_string(n));
    EXPECT_TRUE(test::all_close(nn::Alibi::mpt_slopes(n), want, 0.0f, 1e-7f)) << n;
  }
  // The two recipes give the same slopes (MPT's reordering of 2^-(h+1) 8 / n' is the paper's interleaving), each
  // checked above against its own PyTorch code; a non-power-of-two count is not a prefix of the next power's.
  for (int64_t n : {6, 8, 12})
    EXPECT_TRUE(test::all_close(nn::Alibi::paper_slopes(n), nn::Alibi::mpt_slopes(n), 0.0f, 1e-6f)) << n;
  const std::vector<float> six = nn::Alibi::paper_slopes(6), eight = nn::Alibi::paper_slopes(8);
  EXPECT_FALSE(test::all_close(six.data(), eight.data(), 6, 1e-3f));
  EXPECT_THROW(nn::Alibi::paper_slopes(0), std::invalid_argument);
  EXPECT_THROW(nn::Alibi::make({}), std::invalid_argument);
}

TEST(Alibi, TableIsMinusSlopeTimesDistanceAndGrowsWithTheSameRows) {
  const SafeTensors fx = test::option_fixture("alibi.safetensors");
  const Tensor want = fx.get("alibi");  // [heads, L, L] of rebuild_alibi_tensor
  const int64_t nh = want.size(0), L = want.size(1);
  const nn::Alibi a = nn::Alibi::make(nn::Alibi::paper_slopes(nh));
  std::vector<float> exact(nh * L * L);
  a.fill(exact.data(), L, L);
  EXPECT_TRUE(test::all_close(exact.data(), want.f32(), exact.size(), 1e-6f, 1e-6f));
  const auto t = a.table(L), big = nn::Alibi(a).table(300);  // copies share the cache
  ASSERT_GE(big->len, 300);
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) {
        ASSERT_EQ(t->bias[(h * t->len + i) * t->len + j], exact[(h * L + i) * L + j]);
        ASSERT_EQ(big->bias[(h * big->len + i) * big->len + j], exact[(h * L + i) * L + j]);
      }
}

namespace {
struct JinaAttention {
  nn::ParamStore store;
  nn::MultiHeadAttention a;
  JinaAttention(const SafeTensors& fx, int64_t H, int64_t nh, bool alibi) {
    nn::Vars vb(store);
    a.num_heads = nh;
    a.hidden_size = H;
    a.query = nn::Linear::load(vb.prefix("query"), H, H);
    a.key = nn::Linear::load(vb.prefix("key"), H, H);
    a.value = nn::Linear::load(vb.prefix("value"), H, H);
    a.output = nn::Linear::load(vb.prefix("output"), H, H);
    if (alibi) a.alibi = nn::Alibi::make(nn::Alibi::paper_slopes(nh));
    store.finalize();
    test::fill_from(store, fx);
  }
};
}  // namespace

TEST(Alibi, JinaBertSelfAttentionMatchesPyTorchWithItsGradients) {
  const SafeTensors fx = test::option_fixture("alibi.safetensors");
  const Tensor xt = fx.get("x");
  const int64_t B = xt.size(0), L = xt.size(1), H = xt.size(2), nh = fx.get("slopes_6").numel();
  const std::vector<float> x = test::fixture_vec(fx, "x"), mask = test::fixture_vec(fx, "mask"),
                           want = test::fixture_vec(fx, "out"), w = test::fixture_vec(fx, "weight");
  ops::AttentionMask m;
  m.key_mask = mask.data();
  JinaAttention t(fx, H, nh, true);
  nn::Context c;
  c.grad = true;
  std::vector<float> out(B * L * H), dx(B * L * H, 0.0f);
  t.a.forward(c, out.data(), x.data(), x.data(), B, L, L, m);
  EXPECT_TRUE(test::all_close(out, want, 2e-5f, 1e-4f));
  t.a.backward(w.data(), dx.data(), dx.data());
  EXPECT_TRUE(test::all_close(dx, test::fixture_vec(fx, "dx"), 2e-5f, 1e-4f));
  test::expect_grads(t.store, fx, 2e-5f);

  // The bias moves the output clearly: the same module without it is far from PyTorch's.
  JinaAttention plain(fx, H, nh, false);
  std::vector<float> no_bias(B * L * H);
  plain.a.forward(nn::Context{}, no_bias.data(), x.data(), x.data(), B, L, L, m);
  EXPECT_GT(test::max_abs_diff(no_bias, want), 0.05);

  // Inference: padded, and unpadded with each sentence at its own positions.
  test::pack_for_inference(t.a);
  std::vector<float> inf(B * L * H), qkv(B * L * 3 * H), ctx(B * L * H);
  t.a.forward_inference(inf.data(), x.data(), B, L, m, qkv.data(), ctx.data());
  EXPECT_TRUE(test::all_close(inf, want, 2e-5f, 1e-4f));
  test::Unpadded u(x, mask.data(), B, L, H);
  std::vector<float> uo(u.x.size());
  t.a.forward_inference(uo.data(), u.x.data(), u.varlen(), qkv.data(), ctx.data());
  for (size_t r = 0; r < u.rows.size(); ++r)
    EXPECT_TRUE(test::all_close(uo.data() + r * H, want.data() + u.rows[r] * H, H, 2e-5f, 1e-4f)) << "row " << r;
}

TEST(Alibi, RefusesASecondScoreBias) {
  const SafeTensors fx = test::option_fixture("alibi.safetensors");
  JinaAttention t(fx, 24, 6, true);
  const int64_t L = 3;
  std::vector<float> x(L * 24, 0.1f), out(L * 24), bias(6 * L * L, 0.0f);
  ops::AttentionMask m;
  m.bias = bias.data();
  EXPECT_THROW(t.a.forward(nn::Context{}, out.data(), x.data(), x.data(), 1, L, L, m), std::invalid_argument);
}
