// Rotary position embeddings: the partial-rotary option of ops/rotary.h against its reference, and the rotary
// option of nn::MultiHeadAttention (shared tables grown on demand; positions from each sentence's padded column
// on the unpadded path).
#include <gtest/gtest.h>

#include <vector>

#include "nn/attention.h"
#include "ops/rotary.h"
#include "test_util.h"

using namespace tfm;

TEST(Rotary, PartialRotationMatchesTheReferenceAndLeavesTheRestAlone) {
  const int64_t B = 2, L = 7, nh = 3, hd = 16, rot = 8, ld = nh * hd + 5;
  const std::vector<float> x0 = test::random_vec(B * L * ld, 1);
  std::vector<float> cs(L * rot / 2), sn(L * rot / 2);
  ops::rotary_tables(cs.data(), sn.data(), L, rot, 500.0);
  for (auto isa : test::isas()) {
    test::IsaScope scope(isa);
    std::vector<float> x = x0, ref = x0;
    ops::rotary_apply(x.data(), B, L, nh, hd, ld, cs.data(), sn.data(), rot);
    ops::rotary_apply_ref(ref.data(), B, L, nh, hd, ld, 500.0, rot);
    EXPECT_TRUE(test::all_close(x, ref, 1e-5f));
    for (int64_t r = 0; r < B * L; ++r)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t c = rot; c < hd; ++c) EXPECT_EQ(x[r * ld + h * hd + c], x0[r * ld + h * hd + c]);
    ops::rotary_backward(x.data(), B, L, nh, hd, ld, cs.data(), sn.data(), rot);  // orthogonal: back to x0
    EXPECT_TRUE(test::all_close(x, x0, 1e-6f));
  }
}

TEST(Rotary, SharedTablesGrowWithTheSameRows) {
  const nn::Rotary r = nn::Rotary::make(10000.0, 8);
  const nn::Rotary copy = r;  // a copy shares the tables
  const auto small = r.tables(10);
  const auto big = copy.tables(1000);
  ASSERT_GE(big->len, 1000);
  std::vector<float> cs(1000 * 4), sn(1000 * 4);
  ops::rotary_tables(cs.data(), sn.data(), 1000, 8, 10000.0);
  for (int64_t i = 0; i < 1000 * 4; ++i) {
    ASSERT_EQ(big->cos[i], cs[i]);
    ASSERT_EQ(big->sin[i], sn[i]);
  }
  for (int64_t i = 0; i < small->len * 4; ++i) ASSERT_EQ(small->cos[i], big->cos[i]);
  EXPECT_EQ(r.tables(5), copy.tables(5));
  EXPECT_THROW(nn::Rotary::make(0.0, 8), std::invalid_argument);
  EXPECT_THROW(nn::Rotary::make(1e4, 7), std::invalid_argument);
}

namespace {
nn::MultiHeadAttention rotary_attention(int64_t H, int64_t nh, int64_t window) {
  nn::MultiHeadAttention a;
  a.num_heads = nh;
  a.hidden_size = H;
  const std::vector<float> w = test::random_vec(3 * H * H, 11, -0.3f, 0.3f), wo = test::random_vec(H * H, 12);
  a.qkv = nn::Linear::from_weights(w.data(), nullptr, H, 3 * H, ops::ComputeType::F32);
  a.output = nn::Linear::from_weights(wo.data(), nullptr, H, H, ops::ComputeType::F32);
  a.rotary = nn::Rotary::make(1000.0, H / nh / 2);  // partial: half of each head
  a.window = window;
  return a;
}
}  // namespace

// Left padding: a sentence's tokens sit at padded columns start.. and rotate there on both paths.
TEST(Rotary, UnpaddedAttentionRotatesAtThePaddedColumns) {
  const int64_t B = 2, L = 9, H = 16, nh = 2;
  for (int64_t window : {-1, 2}) {
    SCOPED_TRACE(window);
    const nn::MultiHeadAttention a = rotary_attention(H, nh, window);
    const std::vector<float> x = test::random_vec(B * L * H, 13);
    std::vector<float> mask(B * L, 1.0f);
    for (int64_t j = 0; j < 3; ++j) mask[L + j] = 0.0f;  // row 1 starts at column 3
    std::vector<float> out(B * L * H), qkv(B * L * 3 * H), ctx(B * L * H);
    ops::AttentionMask m;
    m.key_mask = mask.data();
    a.forward_inference(out.data(), x.data(), B, L, m, qkv.data(), ctx.data());
    std::vector<float> xs;  // the real tokens
    std::vector<int64_t> rows;
    for (int64_t n = 0; n < B * L; ++n)
      if (mask[n] != 0.0f) {
        rows.push_back(n);
        xs.insert(xs.end(), x.begin() + n * H, x.begin() + (n + 1) * H);
      }
    const int64_t offsets[3] = {0, L, 2 * L - 3}, start[2] = {0, 3};
    const nn::Varlen seqs{B, offsets, L, start};
    std::vector<float> outs(xs.size());
    a.forward_inference(outs.data(), xs.data(), seqs, qkv.data(), ctx.data());
    for (size_t t = 0; t < rows.size(); ++t)
      EXPECT_TRUE(test::all_close(outs.data() + t * H, out.data() + rows[t] * H, H, 1e-5f)) << "token " << t;
  }
}
