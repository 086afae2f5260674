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

namespace {
struct MaskCase {
  const char* name;
  bool valid_lens, causal, query_mask;
};
const MaskCase kCases[] = {{"none", false, false, false},
                           {"valid_lens", true, false, false},
                           {"causal", false, true, false},
                           {"valid_lens+causal", true, true, false},
                           {"query_mask", false, false, true}};

// dq, dk, dv of attention_forward in double: A = P * M, dV = A^T dO, dP = (dO V^T) * M,
// dS = P * (dP - rowsum(dP * P)), dQ = scale dS K, dK = scale dS^T Q.
void backward_ref(std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv, const float* dout,
                  const float* P, const float* q, const float* k, const float* v, const float* M, int64_t B,
                  int64_t H, int64_t Lq, int64_t Lk, int64_t Dh) {
  const int64_t D = H * Dh;
  const double scale = 1.0 / std::sqrt((double)Dh);
  dq.assign(B * Lq * D, 0.0);
  dk.assign(B * Lk * D, 0.0);
  dv.assign(B * Lk * D, 0.0);
  std::vector<double> dS(Lk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const float* p = P + ((b * H + h) * Lq + i) * Lk;
        const float* m = M + ((b * H + h) * Lq + i) * Lk;
        const float* doi = dout + (b * Lq + i) * D + h * Dh;
        double s = 0;
        for (int64_t j = 0; j < Lk; ++j) {
          double da = 0;
          for (int64_t c = 0; c < Dh; ++c) da += (double)doi[c] * v[(b * Lk + j) * D + h * Dh + c];
          dS[j] = da * m[j];
          s += dS[j] * p[j];
          for (int64_t c = 0; c < Dh; ++c) dv[(b * Lk + j) * D + h * Dh + c] += (double)p[j] * m[j] * doi[c];
        }
        for (int64_t j = 0; j < Lk; ++j) {
          const double ds = scale * p[j] * (dS[j] - s);
          for (int64_t c = 0; c < Dh; ++c) {
            dq[(b * Lq + i) * D + h * Dh + c] += ds * k[(b * Lk + j) * D + h * Dh + c];
            dk[(b * Lk + j) * D + h * Dh + c] += ds * q[(b * Lq + i) * D + h * Dh + c];
          }
        }
      }
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs((double)a[i] - b[i]));
  return w;
}
}  // namespace

TEST(TrainKernels, SmallHeadAttentionMatchesReferenceForwardAndBackward) {
  for (int64_t Dh : {8, 16, 64})
    for (const MaskCase& mc : kCases) {
      const int64_t B = 3, H = 2, Lq = 7, Lk = mc.causal ? 7 : 6, D = H * Dh;
      auto q = random_vec(B * Lq * D, 1), k = random_vec(B * Lk * D, 2), v = random_vec(B * Lk * D, 3);
      auto dout = random_vec(B * Lq * D, 4);
      std::vector<int64_t> lens = {Lk, 3, 1};
      std::vector<float> qmask(B * Lq, 1.0f);
      qmask[2] = 0.0f;
      qmask[Lq + 5] = 0.0f;
      AttentionMask m;
      if (mc.valid_lens) m.valid_lens = lens.data();
      m.causal = mc.causal;
      if (mc.query_mask) m.query_mask = qmask.data();
      AttentionDims d{B, Lq, Lk, H, Dh};
      std::vector<float> drop(B * H * Lq * Lk);
      Rng rng(9);
      dropout_mask(drop.data(), (int64_t)drop.size(), 0.25f, rng);
      for (bool with_dropout : {false, true}) {
        const float* dm = with_dropout ? drop.data() : nullptr;
        std::vector<float> out(B * Lq * D, NAN), p(B * H * Lq * Lk, NAN), out_gen(out.size()), p_gen(p.size());
        ASSERT_TRUE(attention_forward_train(out.data(), p.data(), q.data(), k.data(), v.data(), d, m, dm)) << Dh;
        attention_forward(out_gen.data(), p_gen.data(), q.data(), k.data(), v.data(), d, m, dm);
        std::vector<float> p_ref(p.size()), out_ref(out.size());
        attention_forward_ref(out_ref.data(), p_ref.data(), q.data(), k.data(), v.data(), d, m);
        EXPECT_TRUE(test::all_close(p, p_ref, 1e-6f, 1e-5f)) << mc.name << " Dh " << Dh;
        if (!with_dropout) {
          EXPECT_TRUE(test::all_close(out, out_ref, 1e-5f, 1e-5f)) << mc.name << " Dh " << Dh;
        }
        EXPECT_TRUE(test::all_close(out, out_gen, 1e-5f, 1e-5f)) << mc.name << " Dh " << Dh << " dropout " << with_dropout;
        std::vector<float> ones(drop.size(), 1.0f);
        std::vector<double> dq_ref, dk_ref, dv_ref;
        backward_ref(dq_ref, dk_ref, dv_ref, dout.data(), p.data(), q.data(), k.data(), v.data(),
                     with_dropout ? drop.data() : ones.data(), B, H, Lq, Lk, Dh);
        std::vector<float> dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN);
        ASSERT_TRUE(attention_backward_train(dq.data(), dk.data(), dv.data(), dout.data(), p.data(), q.data(),
                                             k.data(), v.data(), d, dm));
        EXPECT_LT(max_abs_diff(dq, dq_ref), 1e-5) << mc.name << " Dh " << Dh;
        EXPECT_LT(max_abs_diff(dk, dk_ref), 1e-5) << mc.name << " Dh " << Dh;
        EXPECT_LT(max_abs_diff(dv, dv_ref), 1e-5) << mc.name << " Dh " << Dh;
      }
    }
}

TEST(TrainKernels, UnsupportedCasesAreLeftToTheGenericKernels) {
  const int64_t B = 1, H = 1, L = 3;
  std::vector<float> x(B * L * 12, 0.5f), out(x.size()), p(L * L), km(L, 1.0f);
  AttentionDims d12{B, L, L, H, 12};
  EXPECT_FALSE(attention_forward_train(out.data(), p.data(), x.data(), x.data(), x.data(), d12, {}, nullptr));
  AttentionDims d8{B, L, L, H, 8};
  AttentionMask with_key_mask;
  with_key_mask.key_mask = km.data();
  EXPECT_FALSE(attention_forward_train(out.data(), p.data(), x.data(), x.data(), x.data(), d8, with_key_mask, nullptr));
  EXPECT_FALSE(attention_forward_train(out.data(), nullptr, x.data(), x.data(), x.data(), d8, {}, nullptr));
}

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
