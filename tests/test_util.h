// Shared helpers for the test suite.
#pragma once
#include "test_paths.h"
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rng.h"
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

}  // namespace tfm::test
