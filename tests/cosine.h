// Cosine similarity helpers of the dtype tests (test_family_heads.cpp, test_family_matrix.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/tensor.h"

namespace tfm::test {

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

}  // namespace tfm::test
