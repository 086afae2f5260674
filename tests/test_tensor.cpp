#include <gtest/gtest.h>

#include "core/tensor.h"

using namespace tfm;

TEST(Tensor, ReshapeInfersOneDimension) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.reshape({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_THROW(t.reshape({5, -1}), std::invalid_argument);
}

TEST(Tensor, FromValuesChecksCount) {
  EXPECT_THROW(Tensor::from_f32({2, 2}, {1, 2, 3}), std::invalid_argument);
  Tensor t = Tensor::from_i64({3}, {4, 5, 6});
  EXPECT_EQ(t.i64()[2], 6);
  EXPECT_THROW(t.f32(), std::logic_error);
}
