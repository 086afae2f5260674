// Sliding-window attention's training kernels (ops/local_attention.h): the forward with its log-sum-exp against
// the double-precision reference, the backward against the dense kernel under a band mask and against finite
// differences, and a length whose [L, L] weights would not fit in memory.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/local_attention.h"
#include "test_util.h"

using namespace tfm;

namespace {

struct Case {
  int64_t B = 2, L = 23, nh = 2, hd = 8, window = 4;
  int64_t H() const { return nh * hd; }
  std::vector<float> qkv, mask;  // q | k | v rows of 3H (the fused layout); key mask [B, L]
  ops::AttentionDims dims() const {
    ops::AttentionDims d{B, L, L, nh, hd};
    d.q_ld = d.k_ld = d.v_ld = 3 * H();
    d.out_ld = H();
    return d;
  }
  explicit Case(uint64_t seed) {
    qkv = test::random_vec(B * L * 3 * H(), seed);
    mask.assign(B * L, 1.0f);
    for (int64_t j = L - 3; j < L; ++j) mask[L + j] = 0.0f;  // row 1: 3 padded keys (fewer than the window)
  }
};

// The band times the key mask as a dense [B, L, L] mask.
std::vector<float> band_mask(const Case& c) {
  std::vector<float> m(c.B * c.L * c.L, 0.0f);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.L; ++i)
      for (int64_t j = 0; j < c.L; ++j)
        m[(b * c.L + i) * c.L + j] = std::abs(i - j) <= c.window && c.mask[b * c.L + j] != 0.0f ? 1.0f : 0.0f;
  return m;
}

}  // namespace

TEST(LocalAttention, TrainForwardMatchesTheReferenceAndItsLogSumExp) {
  Case c(1);
  const float* q = c.qkv.data();
  const int64_t H = c.H();
  std::vector<float> out(c.B * c.L * H), ref(out.size()), lse(c.B * c.nh * c.L);
  ops::sliding_window_attention_train(out.data(), lse.data(), q, q + H, q + 2 * H, c.dims(), c.mask.data(), c.window);
  ops::sliding_window_attention_ref(ref.data(), q, q + H, q + 2 * H, c.dims(), c.mask.data(), c.window);
  EXPECT_TRUE(test::all_close(out, ref, 1e-5f));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.nh; ++h)
      for (int64_t i = 0; i < c.L; ++i) {
        double s = 0;
        for (int64_t j = std::max<int64_t>(0, i - c.window); j <= std::min(c.L - 1, i + c.window); ++j) {
          if (c.mask[b * c.L + j] == 0.0f) continue;
          double dot = 0;
          for (int64_t e = 0; e < c.hd; ++e)
            dot += (double)q[(b * c.L + i) * 3 * H + h * c.hd + e] * q[(b * c.L + j) * 3 * H + H + h * c.hd + e];
          s += std::exp(dot / std::sqrt((double)c.hd));
        }
        EXPECT_NEAR(lse[(b * c.nh + h) * c.L + i], std::log(s), 1e-5);
      }
}

TEST(LocalAttention, BackwardMatchesTheDenseKernelUnderABandMask) {
  Case c(2);
  const int64_t H = c.H(), N = c.B * c.L;
  const float* q = c.qkv.data();
  const std::vector<float> dout = test::random_vec(N * H, 3);
  // Dense: the [B, heads, L, L] weights under the band mask.
  std::vector<float> band = band_mask(c), probs(c.B * c.nh * c.L * c.L), out_d(N * H), dqkv_d(N * 3 * H);
  ops::AttentionMask m;
  m.mask = band.data();
  ops::attention_forward(out_d.data(), probs.data(), q, q + H, q + 2 * H, c.dims(), m);
  ops::attention_backward(dqkv_d.data(), dqkv_d.data() + H, dqkv_d.data() + 2 * H, dout.data(), probs.data(), q,
                          q + H, q + 2 * H, c.dims());
  // Banded.
  std::vector<float> out(N * H), lse(c.B * c.nh * c.L), dqkv(N * 3 * H, 7.0f);  // written, not added to
  ops::sliding_window_attention_train(out.data(), lse.data(), q, q + H, q + 2 * H, c.dims(), c.mask.data(), c.window);
  EXPECT_TRUE(test::all_close(out, out_d, 1e-5f));
  ops::sliding_window_attention_backward(dqkv.data(), dqkv.data() + H, dqkv.data() + 2 * H, dout.data(), out.data(),
                                         lse.data(), q, q + H, q + 2 * H, c.dims(), c.mask.data(), c.window);
  EXPECT_TRUE(test::all_close(dqkv, dqkv_d, 1e-5f));
}

TEST(LocalAttention, BackwardMatchesFiniteDifferences) {
  Case c(4);
  c.B = 1;
  c.L = 9;
  c.nh = 1;
  c.hd = 4;
  c.window = 2;
  c.qkv = test::random_vec(c.L * 3 * c.H(), 5);
  c.mask.assign(c.L, 1.0f);
  c.mask[7] = 0.0f;
  const int64_t H = c.H(), N = c.L;
  const std::vector<float> w = test::random_vec(N * H, 6);
  auto loss = [&](const std::vector<float>& x) {  // sum(out * w), the reference in double
    std::vector<float> out(N * H);
    ops::sliding_window_attention_ref(out.data(), x.data(), x.data() + H, x.data() + 2 * H, c.dims(), c.mask.data(),
                                      c.window);
    double s = 0;
    for (int64_t i = 0; i < N * H; ++i) s += (double)out[i] * w[i];
    return s;
  };
  std::vector<float> out(N * H), lse(c.L), g(N * 3 * H);
  const float* q = c.qkv.data();
  ops::sliding_window_attention_train(out.data(), lse.data(), q, q + H, q + 2 * H, c.dims(), c.mask.data(), c.window);
  ops::sliding_window_attention_backward(g.data(), g.data() + H, g.data() + 2 * H, w.data(), out.data(), lse.data(),
                                         q, q + H, q + 2 * H, c.dims(), c.mask.data(), c.window);
  const float eps = 1e-2f;
  for (size_t i = 0; i < c.qkv.size(); ++i) {
    std::vector<float> xp = c.qkv, xm = c.qkv;
    xp[i] += eps;
    xm[i] -= eps;
    EXPECT_NEAR(g[i], (loss(xp) - loss(xm)) / (2 * eps), 2e-3) << "coordinate " << i;
  }
}

// 200,000 positions: the dense weights would take 160 GB; the banded kernels hold the log-sum-exp only.
TEST(LocalAttention, TrainingMemoryIsLinearInLength) {
  const int64_t L = 200000, hd = 4, window = 2;
  std::vector<float> qkv = test::random_vec(L * 3 * hd, 7), out(L * hd), lse(L), g(L * 3 * hd);
  ops::AttentionDims d{1, L, L, 1, hd};
  d.q_ld = d.k_ld = d.v_ld = 3 * hd;
  const float* q = qkv.data();
  ops::sliding_window_attention_train(out.data(), lse.data(), q, q + hd, q + 2 * hd, d, nullptr, window);
  ops::sliding_window_attention_backward(g.data(), g.data() + hd, g.data() + 2 * hd, out.data(), out.data(),
                                         lse.data(), q, q + hd, q + 2 * hd, d, nullptr, window);
  std::vector<float> ref(L * hd);
  ops::sliding_window_attention(ref.data(), q, q + hd, q + 2 * hd, d, nullptr, window);
  EXPECT_TRUE(test::all_close(out, ref, 1e-5f));
  for (float v : g) ASSERT_TRUE(std::isfinite(v));
}

TEST(LocalAttention, TrainingKernelsRefuseAnUnpaddedBatch) {
  const int64_t offsets[2] = {0, 3};
  ops::AttentionDims d{1, 3, 3, 1, 4};
  d.seq_offsets = offsets;
  std::vector<float> x(3 * 4), lse(3);
  EXPECT_THROW(ops::sliding_window_attention_train(x.data(), lse.data(), x.data(), x.data(), x.data(), d, nullptr, 1),
               std::invalid_argument);
}
