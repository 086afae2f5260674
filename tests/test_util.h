// Shared helpers for the test suite: ISA scopes, fixture paths, random inputs, and the numeric comparisons every
// test uses (tolerances, max_abs_diff, cosines, central finite differences of a backward pass).
#pragma once
#include "test_paths.h"
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/gemm.h"
#include "ops/attention.h"
#include "ops/isa.h"

namespace tfm::test {

// The kernel ISAs this CPU can run (ops/isa.h); a test runs once per entry under an IsaScope, which restores the
// process default.
inline std::vector<ops::KernelIsa> isas() {
  std::vector<ops::KernelIsa> v = {ops::KernelIsa::Avx2};
  if (ops::cpu_has_avx512()) v.push_back(ops::KernelIsa::Avx512);
  return v;
}
struct IsaScope {
  ops::KernelIsa saved = ops::kernel_isa();
  explicit IsaScope(ops::KernelIsa isa) { ops::set_kernel_isa(isa); }
  ~IsaScope() { ops::set_kernel_isa(saved); }
};

// Inference attention forced onto the blocked kernel (ops::force_blocked_attention) for the scope, or left to the
// ISA's choice.
struct BlockedAttentionScope {
  explicit BlockedAttentionScope(bool on) { ops::force_blocked_attention(on); }
  ~BlockedAttentionScope() { ops::force_blocked_attention(false); }
};

// An environment variable set (value non-null) or removed (null) for the scope, then restored: for the children a
// test spawns (test::run_tfm reads the test's environment).
struct EnvScope {
  std::string name, saved;
  bool had;
  EnvScope(const char* n, const char* value) : name(n) {
    const char* old = std::getenv(n);
    had = old != nullptr;
    if (had) saved = old;
    if (value) setenv(n, value, 1);
    else unsetenv(n);
  }
  ~EnvScope() {
    if (had) setenv(name.c_str(), saved.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

inline std::string source_dir() { return TFM_SOURCE_DIR; }
inline std::string fixture(const std::string& rel) { return source_dir() + "/tests/fixtures/" + rel; }
inline std::string data_dir() {
  const char* d = std::getenv("TFM_DATA_DIR");
  return d && *d ? d : source_dir() + "/../shared/data";
}

inline std::vector<float> random_vec(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

// |a - b| <= atol + rtol * |b| elementwise (llm.c validate_result); reports the worst element.
inline ::testing::AssertionResult all_close(const float* a, const float* b, size_t n, float atol, float rtol = 0.0f) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    double err = std::fabs((double)a[i] - b[i]);
    double tol = atol + rtol * std::fabs((double)b[i]);
    if (!(err <= tol)) {  // also catches NaN
      if (std::isnan(err) || err - tol > worst) {
        worst = std::isnan(err) ? INFINITY : err - tol;
        at = i;
      }
    }
  }
  if (worst == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << at << ": got " << a[at] << ", expected " << b[at]
                                       << " (atol " << atol << ", rtol " << rtol << ")";
}
inline ::testing::AssertionResult all_close(const std::vector<float>& a, const std::vector<float>& b, float atol,
                                            float rtol = 0.0f) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size " << a.size() << " vs " << b.size();
  return all_close(a.data(), b.data(), a.size(), atol, rtol);
}

// Two GEMM inputs prepared in the same type (ops/gemm.h PreparedInput): equal shapes; bf16 bits within max_ulps
// of each other; s8 values within max_q of each other, with scales within relative scale_rtol (NaN matching NaN).
// All zero: bit for bit.
inline ::testing::AssertionResult prepared_close(const ops::PreparedInput& a, const ops::PreparedInput& b,
                                                 int max_ulps = 0, int max_q = 0, float scale_rtol = 0.0f) {
  if (a.ct != b.ct || a.rows != b.rows || a.cols != b.cols)
    return ::testing::AssertionFailure() << "type/shape " << (int)a.ct << " [" << a.rows << ", " << a.cols << "] vs "
                                         << (int)b.ct << " [" << b.rows << ", " << b.cols << "]";
  const int64_t n = a.rows * a.cols;
  if (a.ct == ops::ComputeType::BF16) {
    for (int64_t i = 0; i < n; ++i)
      if (std::abs((int)(int16_t)a.bf16[i] - (int)(int16_t)b.bf16[i]) > max_ulps)
        return ::testing::AssertionFailure() << "bf16 element " << i << ": " << a.bf16[i] << " vs " << b.bf16[i];
  } else if (a.ct == ops::ComputeType::I8) {
    for (int64_t r = 0; r < a.rows; ++r) {
      const float sa = a.scale[r], sb = b.scale[r];
      if (std::isnan(sa) != std::isnan(sb) || (!std::isnan(sa) && std::fabs(sa - sb) > scale_rtol * std::fabs(sb)))
        return ::testing::AssertionFailure() << "scale of row " << r << ": " << sa << " vs " << sb;
    }
    for (int64_t i = 0; i < n; ++i)
      if (std::abs((int)a.s8[i] - (int)b.s8[i]) > max_q)
        return ::testing::AssertionFailure() << "s8 element " << i << " (row " << i / a.cols << "): " << (int)a.s8[i]
                                             << " vs " << (int)b.s8[i];
  }
  return ::testing::AssertionSuccess();
}

// Largest |a - b| over the elements (a NaN difference counts as infinity); a size mismatch fails the test and
// returns infinity.
template <class A, class B>
double max_abs_diff(const A* a, const B* b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs((double)a[i] - (double)b[i]);
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}
template <class A, class B>
double max_abs_diff(const std::vector<A>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return INFINITY;
  return max_abs_diff(a.data(), b.data(), a.size());
}
// fp32 tensors of the same shape.
inline double max_abs_diff(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  return max_abs_diff(got.f32(), want.f32(), (size_t)got.numel());
}

// Cosine of two vectors of n floats, in double.
inline double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
  return ab / std::sqrt(aa * bb);
}

// Smallest cosine over the rows of [N, C] tensors (rows with attention_mask 0 skipped when a mask is given); a NaN
// row counts as -2.
inline double min_row_cosine(const Tensor& a, const Tensor& b, const Tensor& mask = Tensor()) {
  EXPECT_EQ(a.shape(), b.shape());
  const int64_t C = a.size(-1), N = a.numel() / C;
  double worst = 1.0;
  for (int64_t n = 0; n < N; ++n) {
    if (mask.defined() && mask.i64()[n] == 0) continue;
    const double c = cosine(a.f32() + n * C, b.f32() + n * C, C);
    if (!(c >= worst)) worst = std::isnan(c) ? -2.0 : c;
  }
  return worst;
}

// The central difference (loss(x + h e_i) - loss(x - h e_i)) / 2h of a scalar loss() that reads x; x[i] is restored.
template <class T, class Loss>
double central_difference(T* x, size_t i, T h, Loss&& loss) {
  const T keep = x[i];
  x[i] = keep + h;
  const double up = loss();
  x[i] = keep - h;
  const double down = loss();
  x[i] = keep;
  return (up - down) / (2 * h);
}

// A gradient check: step h, |analytic - numeric| <= atol + rtol * |numeric| (or * |analytic| with
// rtol_of_analytic), every `stride`-th coordinate, reporting at most max_failures coordinates.
struct GradCheck {
  double h = 1e-2;
  double atol = 2e-3, rtol = 2e-2;
  bool rtol_of_analytic = false;
  size_t stride = 1;
  int max_failures = INT_MAX;
};

// The analytic gradient g of loss() (a scalar function of the n values at x) against central differences.
template <class T, class Loss>
void expect_gradient(T* x, const float* g, size_t n, Loss&& loss, const std::string& what, const GradCheck& c = {}) {
  int bad = 0;
  for (size_t i = 0; i < n && bad < c.max_failures; i += c.stride) {
    const double num = central_difference(x, i, (T)c.h, loss);
    const double tol = c.atol + c.rtol * std::fabs(c.rtol_of_analytic ? (double)g[i] : num);
    if (!(std::fabs((double)g[i] - num) <= tol)) {
      ++bad;
      ADD_FAILURE() << what << "[" << i << "]: analytic " << g[i] << ", numeric " << num << " (tolerance " << tol
                    << ")";
    }
  }
}
template <class T, class Loss>
void expect_gradient(std::vector<T>& x, const std::vector<float>& g, Loss&& loss, const std::string& what,
                     const GradCheck& c = {}) {
  ASSERT_EQ(x.size(), g.size()) << what;
  expect_gradient(x.data(), g.data(), x.size(), loss, what, c);
}

}  // namespace tfm::test
