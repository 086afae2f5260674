// Rotary frequency scaling (ops::RotaryScaling, nn::Rotary::scaling): Alibaba GTE "new"'s NTK tables (with and
// without mixed_b) and transformers' dynamic NTK tables against PyTorch (scripts/make_attention_option_fixtures.py,
// whose rotations are checked there against complex-number multiplication), the double-precision reference with
// scaling, nn::Rotary's per-length tables for dynamic scaling, and a scaled rotary attention padded and unpadded.
#include <gtest/gtest.h>

#include <vector>

#include "attention_fixture.h"
#include "ops/rotary.h"

using namespace tfm;

namespace {
constexpr int64_t kDim = 16;
constexpr double kTheta = 160000.0;
ops::RotaryScaling ntk(double mixed_b = 0.0) {
  ops::RotaryScaling s;
  s.kind = ops::RotaryScaling::Kind::Ntk;
  s.factor = 2.0;
  s.mixed_b = mixed_b;
  return s;
}
ops::RotaryScaling dynamic() {
  ops::RotaryScaling s;
  s.kind = ops::RotaryScaling::Kind::Dynamic;
  s.factor = 2.0;
  s.max_positions = 16;
  return s;
}
}  // namespace

TEST(RotaryScaling, TablesMatchGteNtkAndDynamicNtk) {
  const SafeTensors fx = test::option_fixture("rotary_scaling.safetensors");
  const std::vector<float> x = test::fixture_vec(fx, "x");
  struct Case {
    const char* name;
    ops::RotaryScaling s;
    int64_t len;
  };
  for (const Case& c : {Case{"ntk", ntk(), 40}, Case{"ntk_mixed", ntk(0.75), 40}, Case{"dynamic_40", dynamic(), 40},
                        Case{"dynamic_12", dynamic(), 12}}) {
    SCOPED_TRACE(c.name);
    const std::string n = c.name;
    std::vector<float> inv(kDim / 2), cs(c.len * kDim / 2), sn(c.len * kDim / 2);
    ops::rotary_inv_freq(inv.data(), kDim, kTheta, c.s, c.len);
    EXPECT_TRUE(test::all_close(inv, test::fixture_vec(fx, n + ".inv_freq"), 0.0f, 1e-6f));
    ops::rotary_tables_from(cs.data(), sn.data(), c.len, kDim / 2, inv.data());
    EXPECT_TRUE(test::all_close(cs, test::fixture_vec(fx, n + ".cos"), 1e-5f));
    EXPECT_TRUE(test::all_close(sn, test::fixture_vec(fx, n + ".sin"), 1e-5f));
    const std::vector<float> want = test::fixture_vec(fx, n + ".rotated");
    std::vector<float> r(x.begin(), x.begin() + c.len * kDim), ref = r;
    ops::rotary_apply(r.data(), 1, c.len, 1, kDim, kDim, cs.data(), sn.data());
    EXPECT_TRUE(test::all_close(r, want, 1e-5f));
    ops::rotary_apply_ref(ref.data(), 1, c.len, 1, kDim, kDim, kTheta, 0, c.s);
    EXPECT_TRUE(test::all_close(ref, want, 2e-5f));
  }
  // Dynamic scaling at 40 positions differs from the unscaled tables: the scaling is not a no-op.
  std::vector<float> a(kDim / 2), b(kDim / 2);
  ops::rotary_inv_freq(a.data(), kDim, kTheta, dynamic(), 40);
  ops::rotary_inv_freq(b.data(), kDim, kTheta, {}, 40);
  EXPECT_GT(test::max_abs_diff(a, b), 1e-3);
  ops::RotaryScaling bad = dynamic();
  bad.max_positions = 0;
  EXPECT_THROW(ops::rotary_inv_freq(a.data(), kDim, kTheta, bad, 40), std::invalid_argument);
  EXPECT_THROW(nn::Rotary::make(kTheta, kDim, bad), std::invalid_argument);
}

TEST(RotaryScaling, DynamicTablesFollowTheCallLength) {
  const nn::Rotary r = nn::Rotary::make(kTheta, kDim, dynamic());
  const auto shorter = r.tables(12), longer = r.tables(40);
  std::vector<float> cs(40 * kDim / 2), sn(40 * kDim / 2), inv(kDim / 2);
  for (int64_t len : {12, 40}) {
    ops::rotary_inv_freq(inv.data(), kDim, kTheta, dynamic(), len);
    ops::rotary_tables_from(cs.data(), sn.data(), len, kDim / 2, inv.data());
    const auto& t = len == 12 ? shorter : longer;
    ASSERT_GE(t->len, len);
    EXPECT_TRUE(test::all_close(t->cos.data(), cs.data(), len * kDim / 2, 0.0f));
  }
  EXPECT_EQ(longer->len, 40);
  EXPECT_EQ(r.tables(40), longer);  // kept for the next call of that length
}

// A scaled rotary attention gives the padded batch's rows on the unpadded path (positions per sentence, the call
// length the longest row's) and rotates with the scaled tables (differs from the unscaled module).
TEST(RotaryScaling, AttentionUnpaddedEqualsPadded) {
  const int64_t B = 2, L = 20, H = 16, nh = 2;
  const std::vector<float> w = test::random_vec(3 * H * H, 71, -0.4f, 0.4f), wo = test::random_vec(H * H, 72);
  auto make = [&](const ops::RotaryScaling& s) {
    nn::MultiHeadAttention a;
    a.num_heads = nh;
    a.hidden_size = H;
    a.qkv = nn::Linear::from_weights(w.data(), nullptr, H, 3 * H, ops::ComputeType::F32);
    a.output = nn::Linear::from_weights(wo.data(), nullptr, H, H, ops::ComputeType::F32);
    a.rotary = nn::Rotary::make(10.0, H / nh, s);
    return a;
  };
  const nn::MultiHeadAttention unscaled = make({});
  for (const ops::RotaryScaling& s : {ntk(), dynamic()}) {
    const nn::MultiHeadAttention a = make(s);
    const std::vector<float> x = test::random_vec(B * L * H, 73);
    std::vector<float> mask(B * L, 1.0f);
    for (int64_t j = L - 5; j < L; ++j) mask[L + j] = 0.0f;  // row 1 right-padded
    ops::AttentionMask m;
    m.key_mask = mask.data();
    std::vector<float> out(B * L * H), plain(B * L * H), qkv(B * L * 3 * H), ctx(B * L * H);
    a.forward_inference(out.data(), x.data(), B, L, m, qkv.data(), ctx.data());
    unscaled.forward_inference(plain.data(), x.data(), B, L, m, qkv.data(), ctx.data());
    EXPECT_GT(test::max_abs_diff(out, plain), 1e-3);
    test::Unpadded u(x, mask.data(), B, L, H);
    std::vector<float> uo(u.x.size());
    a.forward_inference(uo.data(), u.x.data(), u.varlen(), qkv.data(), ctx.data());
    for (size_t r = 0; r < u.rows.size(); ++r)
      EXPECT_TRUE(test::all_close(uo.data() + r * H, out.data() + u.rows[r] * H, H, 1e-5f)) << r;
  }
}
