// ops/softmax.h: softmax, log-softmax and log-sum-exp of one row, exact (double) and fast (vm::fast_exp), and the
// long double reference, against torch.log_softmax / torch.softmax / torch.logsumexp in float64 of the same float
// rows (values printed by PyTorch 1.13: torch.tensor(row, dtype=torch.float32).double()).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/activation.h"
#include "ops/softmax.h"

using namespace tfm::ops;

namespace {

struct Row {
  const char* name;
  std::vector<float> x;
  double lse;
  std::vector<int64_t> idx;        // positions of the expected values below (all when empty)
  std::vector<double> log_probs;   // torch.log_softmax
  std::vector<double> probs;       // torch.softmax
};

std::vector<float> long_row() {  // 5000 logits in [-7.8, 7.8], exact in float: ((v * 7919) % 1000 - 500) / 64
  std::vector<float> x(5000);
  for (int64_t v = 0; v < 5000; ++v) x[v] = (float)((v * 7919) % 1000 - 500) / 64.0f;
  return x;
}

std::vector<Row> rows() {
  const double inf = INFINITY;
  return {
      {"mixed",
       {1.5f, -2.25f, 0.0f, 3.75f, 3.75f, -10.0f, 7.0f, 0.125f},
       7.080359444975487,
       {},
       {-5.580359444975487, -9.330359444975487, -7.080359444975487, -3.3303594449754876, -3.3303594449754876,
        -17.08035944497549, -0.08035944497548744, -6.955359444975487},
       {0.0037712097327516157, 8.869035206456054e-05, 0.0008414706316221853, 0.03578024172785156,
        0.03578024172785156, 3.820270757284098e-08, 0.922784596480627, 0.0009535111445238445}},
      {"large",
       {1000.0f, 999.0f, -1000.0f, 998.5f},
       1000.4643687841079,
       {},
       {-0.4643687841079449, -1.464368784107945, -2000.464368784108, -1.964368784107945},
       {0.6285317192117624, 0.23122389762214907, 0.0, 0.14024438316608848}},
      {"neginf",
       {-INFINITY, 2.0f, -INFINITY, 0.5f},
       2.2014132779827524,
       {},
       {-inf, -0.20141327798275246, -inf, -1.7014132779827524},
       {0.0, 0.8175744761936437, 0.0, 0.18242552380635632}},
      {"long",
       long_row(),
       13.5729981595507,
       {0, 1, 2, 3, 4999},
       {-21.3854981595507, -7.0261231595507, -8.2917481595507, -9.5573731595507, -20.1198731595507},
       {5.156988424203053e-10, 0.0008883691787344627, 0.0002505760327476533, 7.067821542052925e-05,
        1.8283111600565887e-09}},
  };
}

int64_t at(const Row& r, size_t i) { return r.idx.empty() ? (int64_t)i : r.idx[i]; }

// |got - want| <= rel * |want| + abs, with equal infinities accepted.
::testing::AssertionResult close(double got, double want, double rel, double abs) {
  if (std::isinf(want) && got == want) return ::testing::AssertionSuccess();
  if (std::fabs(got - want) <= rel * std::fabs(want) + abs) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << ", want " << want;
}

}  // namespace

TEST(Softmax, ExactMatchesTorchInFloat64) {
  for (const Row& r : rows()) {
    SCOPED_TRACE(r.name);
    const int64_t n = (int64_t)r.x.size();
    EXPECT_TRUE(close(logsumexp(r.x.data(), n), r.lse, 1e-13, 0.0));
    std::vector<float> ls = r.x, p(n);
    log_softmax(ls.data(), n);
    softmax(r.x.data(), n, p.data());
    std::vector<double> e(n);
    const double sum = softmax_exp(r.x.data(), n, e.data());
    for (size_t i = 0; i < r.log_probs.size(); ++i) {
      const int64_t v = at(r, i);
      // One rounding to float: half an ulp (6e-8 relative).
      EXPECT_TRUE(close(ls[v], r.log_probs[i], 6e-8, 0.0)) << "log_softmax[" << v << "]";
      EXPECT_TRUE(close(p[v], r.probs[i], 6e-8, 1e-45)) << "softmax[" << v << "]";
      EXPECT_TRUE(close(e[v] / sum, r.probs[i], 1e-13, 0.0)) << "softmax_exp[" << v << "]";
    }
  }
}

TEST(Softmax, SoftmaxInPlace) {
  const Row r = rows()[0];
  std::vector<float> x = r.x;
  softmax(x.data(), (int64_t)x.size(), x.data());
  for (size_t v = 0; v < x.size(); ++v) EXPECT_TRUE(close(x[v], r.probs[v], 6e-8, 0.0)) << v;
}

// fast_exp is within 2 ulp of exp: the normaliser within ~3e-7 absolute (float logits, double sum); log_softmax_fast
// subtracts it rounded to float.
TEST(Softmax, FastMatchesTorchWithinFloatRounding) {
  for (const Row& r : rows()) {
    if (std::string(r.name) == "neginf") continue;  // -inf logits are the exact kind's (decoding bans tokens there)
    SCOPED_TRACE(r.name);
    const int64_t n = (int64_t)r.x.size();
    float mx = -INFINITY;
    for (float v : r.x) mx = std::max(mx, v);
    EXPECT_TRUE(close(logsumexp_fast(r.x.data(), n, mx), r.lse, 0.0, 3e-7));
    std::vector<float> ls = r.x;
    log_softmax_fast(ls.data(), n);
    for (size_t i = 0; i < r.log_probs.size(); ++i) {
      const int64_t v = at(r, i);
      // x - (float)lse: the float rounding of lse (half an ulp of |lse|) comes on top.
      EXPECT_TRUE(close(ls[v], r.log_probs[i], 1.2e-7, 4e-7 + 6e-8 * std::fabs(r.lse)))
          << "log_softmax_fast[" << v << "]";
    }
  }
}

TEST(Softmax, ReferenceMatchesTorch) {
  for (const Row& r : rows()) {
    SCOPED_TRACE(r.name);
    std::vector<long double> y(r.x.size());
    log_softmax_ref(r.x.data(), (int64_t)r.x.size(), y.data());
    for (size_t i = 0; i < r.log_probs.size(); ++i)
      EXPECT_TRUE(close((double)y[at(r, i)], r.log_probs[i], 1e-14, 0.0)) << at(r, i);
  }
}

// Every token banned (decoding): log_softmax leaves the row alone, logsumexp is log 0.
TEST(Softmax, AllMinusInfinityRow) {
  std::vector<float> x(6, -INFINITY);
  EXPECT_EQ(logsumexp(x.data(), 6), -INFINITY);
  log_softmax(x.data(), 6);
  for (float v : x) EXPECT_EQ(v, -INFINITY);
}

// torch.sigmoid of float32 values (printed by PyTorch 1.13).
TEST(Softmax, SigmoidMatchesTorch) {
  const std::vector<float> x = {-3.0f, 0.0f, 0.5f, 20.0f, -100.0f};
  const std::vector<double> want = {0.04742587357759476, 0.5, 0.622459352016449, 1.0, 0.0};
  std::vector<float> y(x.size());
  sigmoid_forward(y.data(), x.data(), (int64_t)x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(close(y[i], want[i], 1.2e-7, 0.0)) << x[i];
}
