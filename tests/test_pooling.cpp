// models/pooling.h mean_pool, the one mean pooling (sentence-transformers' Pooling and the ModernBERT "mean"
// classifier head), against sentence-transformers' formula run by PyTorch 1.13 in float32:
//   m = mask.unsqueeze(-1).expand(h.size()).float()
//   torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9)
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "core/tensor.h"
#include "models/pooling.h"

using namespace tfm;

namespace {
// h[b, l, k] = ((b * 31 + l * 7 + k * 3) % 17) / 8 - 1 + 0.001 (k + 1), as the PyTorch script built it.
Tensor hidden(int64_t B, int64_t L, int64_t H) {
  Tensor h = Tensor::empty({B, L, H});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t k = 0; k < H; ++k)
        h.f32()[(b * L + l) * H + k] =
            (float)((double)((b * 31 + l * 7 + k * 3) % 17) / 8.0 - 1.0 + 0.001 * (double)(k + 1));
  return h;
}
}  // namespace

TEST(MeanPool, MatchesSentenceTransformersFormula) {
  const int64_t B = 3, L = 4, H = 5;
  const Tensor h = hidden(B, L, H);
  Tensor mask = Tensor::zeros({B, L}, DType::I64);
  for (int64_t l : {0, 1, 2}) mask.i64()[0 * L + l] = 1;  // row 0: three real tokens; row 1: one; row 2: none
  mask.i64()[1 * L + 0] = 1;
  const std::vector<float> want = {-0.124000013f, -0.456333369f, -0.080333315f, 0.295666635f,  -0.036666673f,
                                   0.750999987f,  -0.998000026f, -0.621999979f, -0.246000007f, 0.129999995f,
                                   0.0f,          0.0f,          0.0f,          0.0f,          0.0f};
  const Tensor out = mean_pool(h, mask);
  ASSERT_EQ(out.shape(), (Shape{B, H}));
  for (int64_t i = 0; i < B * H; ++i)
    EXPECT_NEAR(out.f32()[i], want[i], 1e-7f + 2e-7f * std::fabs(want[i])) << "row " << i / H << " column " << i % H;
  // The same numbers as pool() with mean on (one code path).
  PoolingConfig c;
  c.mean = true;
  const Tensor p = pool(c, h, mask);
  for (int64_t i = 0; i < B * H; ++i) EXPECT_EQ(out.f32()[i], p.f32()[i]);
}

// No mask: every position counts.
TEST(MeanPool, UndefinedMaskMeansEveryPosition) {
  const int64_t B = 2, L = 3, H = 4;
  const Tensor h = hidden(B, L, H);
  const Tensor out = mean_pool(h, Tensor());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < H; ++k) {
      double s = 0;
      for (int64_t l = 0; l < L; ++l) s += h.f32()[(b * L + l) * H + k];
      EXPECT_NEAR(out.f32()[b * H + k], s / L, 1e-7) << b << " " << k;
    }
}

TEST(MeanPool, RefusesWrongShapes) {
  EXPECT_THROW(mean_pool(Tensor::zeros({2, 3}), Tensor()), std::invalid_argument);
  EXPECT_THROW(mean_pool(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 4}, DType::I64)), std::invalid_argument);
}
