// Fast kernels against their plain reference kernels, mask semantics, and finite-difference gradient checks.
#include <gtest/gtest.h>

#include <functional>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"
#include "test_util.h"

using namespace tfm;
using namespace tfm::ops;
using tfm::test::all_close;
using tfm::test::expect_gradient;
using tfm::test::random_vec;

TEST(Ops, LinearMatchesReference) {
  const int64_t N = 37, I = 29, O = 41;
  auto x = random_vec(N * I, 1), w = random_vec(O * I, 2), b = random_vec(O, 3);
  std::vector<float> y(N * O), yr(N * O);
  linear_forward(y.data(), x.data(), w.data(), b.data(), N, I, O);
  linear_forward_ref(yr.data(), x.data(), w.data(), b.data(), N, I, O);
  EXPECT_TRUE(all_close(y, yr, 1e-5f, 1e-5f));
  linear_forward(y.data(), x.data(), w.data(), nullptr, N, I, O);
  linear_forward_ref(yr.data(), x.data(), w.data(), nullptr, N, I, O);
  EXPECT_TRUE(all_close(y, yr, 1e-5f, 1e-5f));
}

TEST(Ops, LayerNormMatchesReference) {
  const int64_t N = 13, C = 768;
  auto x = random_vec(N * C, 4, -3.0f, 5.0f), w = random_vec(C, 5), b = random_vec(C, 6);
  std::vector<float> y(N * C), yr(N * C);
  for (float eps : {1e-12f, 1e-5f}) {
    layer_norm_forward(y.data(), nullptr, nullptr, x.data(), w.data(), b.data(), N, C, eps);
    layer_norm_forward_ref(yr.data(), x.data(), w.data(), b.data(), N, C, eps);
    EXPECT_TRUE(all_close(y, yr, 1e-5f, 1e-5f));
  }
}

TEST(Ops, ActivationsMatchReference) {
  auto x = random_vec(10000, 7, -12.0f, 12.0f);
  x[0] = 0.0f;
  x[1] = -1e-4f;
  for (Activation a : {Activation::Gelu, Activation::GeluTanh, Activation::Relu}) {
    std::vector<float> y(x.size()), yr(x.size());
    activation_forward(y.data(), x.data(), (int64_t)x.size(), a);
    activation_forward_ref(yr.data(), x.data(), (int64_t)x.size(), a);
    EXPECT_TRUE(all_close(y, yr, 1e-6f, 1e-6f)) << (int)a;
  }
  EXPECT_THROW(parse_activation("mish"), std::invalid_argument);
  EXPECT_EQ(parse_activation("gelu_pytorch_tanh"), Activation::GeluTanh);
}

TEST(Ops, EmbeddingRejectsOutOfRangeIds) {
  std::vector<float> w(4 * 3), out(2 * 3);
  std::vector<int64_t> ids = {1, 4};
  try {
    embedding_forward(out.data(), ids.data(), w.data(), 2, 4, 3);
    FAIL() << "expected out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("token id 4"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- other backward passes

namespace {
double dotR(const std::vector<float>& y, const std::vector<float>& R) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += (double)y[i] * R[i];
  return s;
}
}  // namespace

TEST(OpsGrad, Linear) {
  const int64_t N = 4, I = 5, O = 3;
  auto x = random_vec(N * I, 41), w = random_vec(O * I, 42), b = random_vec(O, 43), R = random_vec(N * O, 44);
  auto f = [&] {
    std::vector<float> y(N * O);
    linear_forward(y.data(), x.data(), w.data(), b.data(), N, I, O);
    return dotR(y, R);
  };
  std::vector<float> dx(N * I), dw(O * I, 0.0f), db(O, 0.0f);
  linear_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, I, O);
  expect_gradient(x, dx, f, "dx");
  expect_gradient(w, dw, f, "dw");
  expect_gradient(b, db, f, "db");
}

TEST(OpsGrad, LayerNorm) {
  const int64_t N = 3, C = 8;
  auto x = random_vec(N * C, 61, -2, 2), w = random_vec(C, 62), b = random_vec(C, 63), R = random_vec(N * C, 64);
  auto f = [&] {
    std::vector<float> y(N * C);
    layer_norm_forward(y.data(), nullptr, nullptr, x.data(), w.data(), b.data(), N, C, 1e-5f);
    return dotR(y, R);
  };
  std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0.0f), db(C, 0.0f);
  layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  layer_norm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  expect_gradient(x, dx, f, "dx");
  expect_gradient(w, dw, f, "dw");
  expect_gradient(b, db, f, "db");
}

TEST(OpsGrad, ActivationsOnBothIsas) {
  for (KernelIsa isa : tfm::test::isas()) {
    tfm::test::IsaScope scope(isa);
    for (Activation a : {Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Silu}) {
      auto x = random_vec(20, 71, -3, 3), R = random_vec(20, 72);
      for (auto& v : x)
        if (std::fabs(v) < 0.05f) v = 0.5f;  // ReLU's kink is not differentiable
      auto f = [&] {
        std::vector<float> y(20);
        activation_forward(y.data(), x.data(), 20, a);
        return dotR(y, R);
      };
      std::vector<float> dx(20);
      activation_backward(dx.data(), R.data(), x.data(), 20, a);
      expect_gradient(x, dx, f, std::string(kernel_isa_name(isa)) + " act" + std::to_string((int)a), {1e-3, 2e-3, 2e-2});
    }
  }
}

TEST(OpsGrad, EmbeddingScattersIntoRows) {
  const int64_t V = 5, C = 3;
  std::vector<int64_t> ids = {2, 0, 2};
  auto w = random_vec(V * C, 81), R = random_vec(3 * C, 82);
  auto f = [&] {
    std::vector<float> y(3 * C);
    embedding_forward(y.data(), ids.data(), w.data(), 3, V, C);
    return dotR(y, R);
  };
  std::vector<float> dw(V * C, 0.0f);
  embedding_backward(dw.data(), R.data(), ids.data(), 3, C);
  expect_gradient(w, dw, f, "dw");
}

TEST(Ops, DropoutKeepsExpectedFractionAndScales) {
  Rng rng(3);
  std::vector<float> m(100000);
  dropout_mask(m.data(), (int64_t)m.size(), 0.25f, rng);
  int64_t kept = 0;
  for (float v : m) {
    ASSERT_TRUE(v == 0.0f || std::fabs(v - 1.0f / 0.75f) < 1e-6f);
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept / 100000.0, 0.75, 0.01);
  EXPECT_THROW(dropout_mask(m.data(), 1, 1.0f, rng), std::invalid_argument);
}

// dropout_draw + dropout_fill (what a training forward keeps, and backward's mask written again) give
// dropout_mask's mask bit for bit, leave the generator (or the row keys' call count) where dropout_mask leaves it,
// and write the same mask every time: unkeyed, keyed by rows, keyed attention weights.
TEST(Ops, DropoutDrawThenFillIsDropoutMask) {
  const AttentionDropoutDims dims{2, 3, 5};
  RowKeys keys;
  keys.key = 99;
  keys.rows = {7, 11};
  for (int mode = 0; mode < 3; ++mode) {
    const int64_t n = mode == 2 ? 2 * 30 : 1000;
    Rng a(5), b(5);
    RowKeys ka = keys, kb = keys;
    if (mode > 0) {
      a.set_row_keys(&ka);
      b.set_row_keys(&kb);
    }
    const AttentionDropoutDims* d = mode == 2 ? &dims : nullptr;
    std::vector<float> expected(n), m1(n, -1.0f), m2(n, -2.0f);
    dropout_mask(expected.data(), n, 0.3f, a, d);
    const DropoutDraw draw = dropout_draw(n, 0.3f, b, d);
    ASSERT_TRUE(draw.defined());
    dropout_fill(m1.data(), draw);
    dropout_fill(m2.data(), draw);
    EXPECT_EQ(m1, expected) << "mode " << mode;
    EXPECT_EQ(m2, expected) << "mode " << mode;
    EXPECT_EQ(ka.calls, kb.calls);
    EXPECT_EQ(a.next_u64(), b.next_u64()) << "mode " << mode;  // the same draws consumed
    int64_t dropped = 0;
    for (float v : m1) dropped += v == 0.0f;
    EXPECT_GT(dropped, 0) << "mode " << mode;
    EXPECT_LT(dropped, n) << "mode " << mode;
  }
  Rng r(1);
  EXPECT_THROW(dropout_draw(10, 1.0f, r), std::invalid_argument);
}
