// RMSNorm as an option of nn::LayerNorm (LayerNorm::load_rms; Gemma's (1 + w) variant with offset 1), and the
// identity norm (LayerNorm::identity): forwards against a double-precision reference, backward against finite
// differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/layers.h"
#include "nn/params.h"
#include "test_util.h"

using namespace tfm;

namespace {
struct Rms {
  nn::ParamStore store;
  nn::LayerNorm n;
  Rms(int64_t C, float offset) {
    n = nn::LayerNorm::load_rms(nn::Vars(store).prefix("norm"), C, 1e-6f, offset);
    store.finalize();
    store.all_data() = test::random_vec(C, 51, 0.5f, 1.5f);
  }
};
}  // namespace

TEST(RmsNorm, ForwardMatchesTheReference) {
  const int64_t N = 5, C = 12;
  for (float offset : {0.0f, 1.0f}) {
    Rms m(C, offset);
    const std::vector<float> x = test::random_vec(N * C, 52, -2.0f, 2.0f);
    std::vector<float> ref(N * C), out(N * C), inf(N * C);
    for (int64_t n = 0; n < N; ++n) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += (double)x[n * C + c] * x[n * C + c];
      const double r = 1 / std::sqrt(ss / C + 1e-6);
      for (int64_t c = 0; c < C; ++c) ref[n * C + c] = (float)(x[n * C + c] * r * (offset + m.n.weight.data()[c]));
    }
    m.n.forward(out.data(), x.data(), N);
    m.n.forward_inference(inf.data(), x.data(), N);
    EXPECT_TRUE(test::all_close(out, ref, 1e-5f));
    EXPECT_TRUE(test::all_close(inf, ref, 1e-5f));
    // The fused residual form: out = norm(y + residual), sum_out = y + residual.
    const std::vector<float> y = test::random_vec(N * C, 53);
    std::vector<float> res = x, fused(N * C);
    for (int64_t i = 0; i < N * C; ++i) res[i] = x[i] - y[i];
    std::vector<float> sum(N * C);
    m.n.add_forward_inference(fused.data(), sum.data(), y.data(), res.data(), N);
    EXPECT_TRUE(test::all_close(fused, ref, 1e-5f));
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 6;
  for (float offset : {0.0f, 1.0f}) {
    Rms m(C, offset);
    std::vector<float> x = test::random_vec(N * C, 54, -2.0f, 2.0f);
    const std::vector<float> w = test::random_vec(N * C, 55);
    auto loss = [&] {
      std::vector<float> out(N * C);
      m.n.forward_inference(out.data(), x.data(), N);
      double s = 0;
      for (int64_t i = 0; i < N * C; ++i) s += (double)out[i] * w[i];
      return s;
    };
    std::vector<float> out(N * C), dx(N * C, 1.0f);
    m.n.forward(out.data(), x.data(), N);
    m.store.zero_grad();
    m.n.backward(dx.data(), w.data(), /*accumulate=*/true);  // adds to the ones
    const std::vector<float> dw = m.store.all_grad();
    const float eps = 1e-2f;
    for (size_t i = 0; i < x.size(); ++i) {
      const float xi = x[i];
      x[i] = xi + eps;
      const double lp = loss();
      x[i] = xi - eps;
      const double lm = loss();
      x[i] = xi;
      EXPECT_NEAR(dx[i] - 1.0f, (lp - lm) / (2 * eps), 2e-3) << "x " << i;
    }
    std::vector<float>& p = m.store.all_data();
    for (int64_t c = 0; c < C; ++c) {
      const float pc = p[c];
      p[c] = pc + eps;
      const double lp = loss();
      p[c] = pc - eps;
      const double lm = loss();
      p[c] = pc;
      EXPECT_NEAR(dw[c], (lp - lm) / (2 * eps), 2e-3) << "weight " << c;
    }
  }
}

TEST(IdentityNorm, PassesValuesAndGradientsThrough) {
  const nn::LayerNorm id0 = nn::LayerNorm::identity(4);
  nn::LayerNorm id = id0;
  EXPECT_TRUE(id.is_identity());
  const std::vector<float> x = test::random_vec(8, 56), y = test::random_vec(8, 57);
  std::vector<float> out(8), sum(8), d(8, 1.0f);
  id.forward(out.data(), x.data(), 2);
  EXPECT_EQ(out, x);
  id.add_forward_inference(out.data(), sum.data(), x.data(), y.data(), 2);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out[i], x[i] + y[i]);
    EXPECT_EQ(sum[i], x[i] + y[i]);
  }
  id.backward(d.data(), y.data(), /*accumulate=*/true);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(d[i], 1.0f + y[i]);
}
