// Shared helpers for the test suite.
#pragma once
#include "test_paths.h"
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rng.h"
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

}  // namespace tfm::test
