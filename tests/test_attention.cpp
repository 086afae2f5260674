// Attention, all in one place (ops/attention.h, ops/attention_train.h): every mask form of attention_forward
// against the double-precision reference and its backward against finite differences; the blocked online-softmax
// inference kernel on both kernel ISAs; the small-head training kernels against a double-precision backward; and
// the KV-step kernel of incremental decoding (attention_step) against its reference and against attention_forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <vector>

#include "core/rng.h"
#include "ops/attention.h"
#include "ops/attention_train.h"
#include "ops/dropout.h"
#include "ops/gemm_bf16.h"
#include "ops/isa.h"
#include "test_util.h"

using namespace tfm;
using namespace tfm::ops;
using tfm::test::all_close;
using tfm::test::expect_gradient;
using tfm::test::max_abs_diff;
using tfm::test::random_vec;

using tfm::test::isas;
using tfm::test::IsaScope;
using tfm::test::BlockedAttentionScope;

// ---------------------------------------------------------------- attention masks

namespace {
struct AttnCase {
  std::string name;
  std::function<void(AttentionMask&, std::vector<float>&, std::vector<int64_t>&, int64_t B, int64_t Lq, int64_t Lk)> setup;
};

std::vector<AttnCase> attention_cases() {
  return {
      {"none", [](AttentionMask&, auto&, auto&, int64_t, int64_t, int64_t) {}},
      {"key_padding",
       [](AttentionMask& m, std::vector<float>& f, auto&, int64_t B, int64_t Lq, int64_t Lk) {
         f.assign(B * Lk, 1.0f);
         for (int64_t j = Lk - 2; j < Lk; ++j) f[1 * Lk + j] = 0.0f;  // batch 1: last two keys padded
         for (int64_t j = 0; j < Lk; ++j) f[0 * Lk + j] = 0.0f;       // batch 0: every key padded -> zeros
         m.key_mask = f.data();
       }},
      {"query_key_outer",
       [](AttentionMask& m, std::vector<float>& f, auto&, int64_t B, int64_t Lq, int64_t Lk) {
         f.assign(B * Lq + B * Lk, 1.0f);
         f[1 * Lq + Lq - 1] = 0.0f;            // batch 1: last query padded -> zero row
         f[B * Lq + 0 * Lk + 1] = 0.0f;        // batch 0: key 1 padded
         m.query_mask = f.data();
         m.key_mask = f.data() + B * Lq;
       }},
      {"general_3d",
       [](AttentionMask& m, std::vector<float>& f, auto&, int64_t B, int64_t Lq, int64_t Lk) {
         Rng rng(11);
         f.resize(B * Lq * Lk);
         for (auto& x : f) x = rng.uniform() < 0.3f ? 0.0f : 1.0f;
         for (int64_t j = 0; j < Lk; ++j) f[(0 * Lq + 1) * Lk + j] = 0.0f;  // one fully masked row
         m.mask = f.data();
       }},
      {"valid_lens_1d",
       [](AttentionMask& m, auto&, std::vector<int64_t>& l, int64_t B, int64_t, int64_t Lk) {
         l = {0, 3};  // valid_len 0 -> zeros
         m.valid_lens = l.data();
       }},
      {"valid_lens_2d",
       [](AttentionMask& m, auto&, std::vector<int64_t>& l, int64_t B, int64_t Lq, int64_t Lk) {
         l.resize(B * Lq);
         for (int64_t i = 0; i < B * Lq; ++i) l[i] = (i * 3) % (Lk + 1);
         m.valid_lens = l.data();
         m.valid_lens_per_query = true;
       }},
      {"causal", [](AttentionMask& m, auto&, auto&, int64_t, int64_t, int64_t) { m.causal = true; }},
      {"causal_and_padding",
       [](AttentionMask& m, std::vector<float>& f, auto&, int64_t B, int64_t Lq, int64_t Lk) {
         f.assign(B * Lk, 1.0f);
         f[1 * Lk + 0] = 0.0f;
         m.key_mask = f.data();
         m.causal = true;
       }},
  };
}
}  // namespace

class AttentionMasks : public ::testing::TestWithParam<int> {};

TEST_P(AttentionMasks, FastMatchesReferenceAndMaskedRowsAreZero) {
  AttnCase c = attention_cases()[GetParam()];
  const int64_t B = 2, H = 3, Dh = 4, Lq = 5, Lk = 5, D = H * Dh;
  auto q = random_vec(B * Lq * D, 21), k = random_vec(B * Lk * D, 22), v = random_vec(B * Lk * D, 23);
  AttentionMask m;
  std::vector<float> fbuf;
  std::vector<int64_t> lbuf;
  c.setup(m, fbuf, lbuf, B, Lq, Lk);
  AttentionDims d{B, Lq, Lk, H, Dh};
  std::vector<float> out(B * Lq * D), out_ref(B * Lq * D), p(B * H * Lq * Lk), p_ref(B * H * Lq * Lk);
  attention_forward(out.data(), p.data(), q.data(), k.data(), v.data(), d, m);
  attention_forward_ref(out_ref.data(), p_ref.data(), q.data(), k.data(), v.data(), d, m);
  EXPECT_TRUE(all_close(out, out_ref, 1e-5f, 1e-5f)) << c.name;
  EXPECT_TRUE(all_close(p, p_ref, 1e-6f, 1e-5f)) << c.name;
  // Masked entries carry exactly zero weight; rows with no visible key are zero, never NaN.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        bool any = false;
        for (int64_t j = 0; j < Lk; ++j) {
          float w = p[((b * H + h) * Lq + i) * Lk + j];
          if (!m.visible(b, i, j, Lq, Lk)) {
            EXPECT_EQ(w, 0.0f) << c.name;
          }
          any |= m.visible(b, i, j, Lq, Lk);
        }
        if (!any) {
          for (int64_t x = 0; x < Dh; ++x) EXPECT_EQ(out[(b * Lq + i) * D + h * Dh + x], 0.0f) << c.name;
        }
      }
}

// Finite differences of L = sum(out * R) against attention_backward, for every mask form.
TEST_P(AttentionMasks, GradientMatchesFiniteDifferences) {
  AttnCase c = attention_cases()[GetParam()];
  const int64_t B = 2, H = 2, Dh = 3, Lq = 4, Lk = 5, D = H * Dh;
  auto q = random_vec(B * Lq * D, 31), k = random_vec(B * Lk * D, 32), v = random_vec(B * Lk * D, 33);
  auto R = random_vec(B * Lq * D, 34);
  AttentionMask m;
  std::vector<float> fbuf;
  std::vector<int64_t> lbuf;
  c.setup(m, fbuf, lbuf, B, Lq, Lk);
  AttentionDims d{B, Lq, Lk, H, Dh};
  // Dropout multipliers exercise the dropped-weights path of the backward too.
  std::vector<float> dm(B * H * Lq * Lk);
  Rng rng(5);
  dropout_mask(dm.data(), (int64_t)dm.size(), 0.2f, rng);
  auto loss = [&]() {
    std::vector<float> o(B * Lq * D), pr(B * H * Lq * Lk);
    attention_forward(o.data(), pr.data(), q.data(), k.data(), v.data(), d, m, dm.data());
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += (double)o[i] * R[i];
    return s;
  };
  std::vector<float> o(B * Lq * D), pr(B * H * Lq * Lk), dq(q.size()), dk(k.size()), dv(v.size());
  attention_forward(o.data(), pr.data(), q.data(), k.data(), v.data(), d, m, dm.data());
  attention_backward(dq.data(), dk.data(), dv.data(), R.data(), pr.data(), q.data(), k.data(), v.data(), d, dm.data());
  expect_gradient(q, dq, loss, c.name + " dq");
  expect_gradient(k, dk, loss, c.name + " dk");
  expect_gradient(v, dv, loss, c.name + " dv");
}

INSTANTIATE_TEST_SUITE_P(AllForms, AttentionMasks, ::testing::Range(0, 8));

// A score bias shared by the batch (MPNet's relative position bias): attention_backward's dbias against central
// differences of L = sum(out * R) in each bias entry, on the fused small-head kernel (head_dim 8) and the GEMM one
// (head_dim 3), with key padding and dropout; keys padded in every row get exactly 0. dq, dk, dv still match
// their finite differences with the bias in, and dbias = 0 in every entry is what a bias-free call leaves alone.
TEST(AttentionScoreBias, GradientMatchesFiniteDifferencesOnBothKernels) {
  for (const ops::KernelIsa isa : isas())
    for (const int64_t Dh : {int64_t{3}, int64_t{8}}) {
      IsaScope scope(isa);
      const int64_t B = 2, H = 2, L = 5, D = H * Dh;
      auto q = random_vec(B * L * D, 41), k = random_vec(B * L * D, 42), v = random_vec(B * L * D, 43);
      auto R = random_vec(B * L * D, 44), bias = random_vec(H * L * L, 45);
      std::vector<float> key_mask(B * L, 1.0f);
      key_mask[0 * L + 4] = key_mask[1 * L + 4] = 0.0f;  // key 4 padded in both rows: no bias gradient
      key_mask[1 * L + 3] = 0.0f;
      AttentionMask m;
      m.key_mask = key_mask.data();
      m.bias = bias.data();
      AttentionDims d{B, L, L, H, Dh};
      std::vector<float> dm(B * H * L * L);
      Rng rng(6);
      dropout_mask(dm.data(), (int64_t)dm.size(), 0.2f, rng);
      auto loss = [&]() {
        std::vector<float> o(B * L * D), pr(B * H * L * L);
        attention_forward(o.data(), pr.data(), q.data(), k.data(), v.data(), d, m, dm.data());
        double sum = 0;
        for (size_t i = 0; i < o.size(); ++i) sum += (double)o[i] * R[i];
        return sum;
      };
      std::vector<float> o(B * L * D), pr(B * H * L * L), dq(q.size()), dk(k.size()), dv(v.size());
      std::vector<float> dbias(H * L * L, NAN);
      attention_forward(o.data(), pr.data(), q.data(), k.data(), v.data(), d, m, dm.data());
      attention_backward(dq.data(), dk.data(), dv.data(), R.data(), pr.data(), q.data(), k.data(), v.data(), d,
                         dm.data(), dbias.data());
      const std::string where = std::string(ops::kernel_isa_name(isa)) + " Dh " + std::to_string(Dh);
      expect_gradient(bias, dbias, loss, where + " dbias");
      expect_gradient(q, dq, loss, where + " dq");
      expect_gradient(k, dk, loss, where + " dk");
      expect_gradient(v, dv, loss, where + " dv");
      double total = 0;
      for (int64_t hi = 0; hi < H * L; ++hi) {
        EXPECT_EQ(dbias[hi * L + 4], 0.0f) << where << " row " << hi;
        total += std::fabs(dbias[hi * L + 3]);
      }
      EXPECT_GT(total, 0.0) << where;  // key 3 is visible in batch row 0: a gradient
      // Without dbias the same call leaves dq, dk, dv as they were.
      std::vector<float> dq2(q.size()), dk2(k.size()), dv2(v.size());
      attention_backward(dq2.data(), dk2.data(), dv2.data(), R.data(), pr.data(), q.data(), k.data(), v.data(), d,
                         dm.data());
      EXPECT_EQ(dq2, dq) << where;
      EXPECT_EQ(dk2, dk) << where;
      EXPECT_EQ(dv2, dv) << where;
    }
}


// ---------------------------------------------------------------- blocked attention (probs == nullptr)

namespace {

enum class MaskForm { None, KeyMask, QueryKey, General3d, ValidLens1d, ValidLens2d, Causal, CausalOffsetPadding };
const char* form_name(MaskForm f) {
  static const char* names[] = {"none", "key_mask", "query_key", "general_3d", "valid_lens_1d", "valid_lens_2d",
                                "causal", "causal_offset_padding"};
  return names[(int)f];
}

struct MaskBufs {
  std::vector<float> f;
  std::vector<int64_t> l;
};

// Each form masks something in every batch row, and batch 0 has rows with no visible key where the form allows.
AttentionMask make_mask(MaskForm form, MaskBufs& mb, int64_t B, int64_t Lq, int64_t Lk) {
  AttentionMask m;
  Rng rng(7 + Lq * 31 + Lk);
  switch (form) {
    case MaskForm::None: break;
    case MaskForm::KeyMask:
      mb.f.assign(B * Lk, 1.0f);
      if (B > 1)
        for (int64_t j = 0; j < Lk; ++j) mb.f[j] = 0.0f;  // batch 0: all keys padded -> zero rows
      for (int64_t j = Lk / 2; j < Lk; ++j) mb.f[(B - 1) * Lk + j] = (j % 3 == 0) ? 1.0f : 0.0f;  // holes
      m.key_mask = mb.f.data();
      break;
    case MaskForm::QueryKey:
      mb.f.assign(B * Lq + B * Lk, 1.0f);
      mb.f[Lq - 1] = 0.0f;                        // batch 0: last query padded
      mb.f[B * Lq + (B - 1) * Lk + (Lk - 1)] = 0.0f;  // last batch: last key padded
      m.query_mask = mb.f.data();
      m.key_mask = mb.f.data() + B * Lq;
      break;
    case MaskForm::General3d:
      mb.f.resize(B * Lq * Lk);
      for (auto& x : mb.f) x = rng.uniform() < 0.4f ? 0.0f : 1.0f;
      for (int64_t j = 0; j < Lk; ++j) mb.f[j] = 0.0f;  // (b 0, i 0) fully masked
      m.mask = mb.f.data();
      break;
    case MaskForm::ValidLens1d:
      mb.l = {0, Lk > 3 ? Lk - 3 : 1};
      mb.l.resize(B, Lk);
      m.valid_lens = mb.l.data();
      break;
    case MaskForm::ValidLens2d:
      mb.l.resize(B * Lq);
      for (int64_t i = 0; i < B * Lq; ++i) mb.l[i] = (i * 37) % (Lk + 1);  // includes 0 (zero row) and Lk
      m.valid_lens = mb.l.data();
      m.valid_lens_per_query = true;
      break;
    case MaskForm::Causal: m.causal = true; break;
    case MaskForm::CausalOffsetPadding:  // decoder self-attention over a cache: query i sits at key i + offset
      mb.f.assign(B * Lk, 1.0f);
      mb.f[(B - 1) * Lk + 0] = 0.0f;
      m.key_mask = mb.f.data();
      m.causal = true;
      m.causal_offset = Lk > Lq ? Lk - Lq : 0;
      break;
  }
  return m;
}

// One case: strided q/k/v (rows of a wider fused buffer, a KV cache with spare rows), the blocked path on every
// ISA against attention_forward_ref, and the probs path (oneDNN GEMMs) as a second opinion.
// bias: none, one [H, Lq, Lk] table for every batch row (bias_batch_stride 0, MPNet), or one per row.
enum class BiasForm { None, Shared, PerBatch };
void check_attention(MaskForm form, int64_t B, int64_t H, int64_t Dh, int64_t Lq, int64_t Lk,
                     BiasForm bias = BiasForm::None) {
  const int64_t D = H * Dh, ld = 3 * D + 5, cap = Lk + 3, out_ld = D + 3;
  auto q = random_vec(B * Lq * ld, 100 + Dh, -2.0f, 2.0f);
  auto kv = random_vec(B * cap * ld, 200 + Lk, -2.0f, 2.0f);
  MaskBufs mb;
  AttentionMask m = make_mask(form, mb, B, Lq, Lk);
  std::vector<float> bias_buf;
  if (bias != BiasForm::None) {
    bias_buf = random_vec((bias == BiasForm::PerBatch ? B : 1) * H * Lq * Lk, 300 + Lk, -3.0f, 3.0f);
    m.bias = bias_buf.data();
    m.bias_batch_stride = bias == BiasForm::PerBatch ? H * Lq * Lk : 0;
  }
  AttentionDims d{B, Lq, Lk, H, Dh};
  d.q_ld = d.k_ld = d.v_ld = ld;
  d.k_bs = d.v_bs = cap * ld;
  d.out_ld = out_ld;
  const float* k = kv.data() + D;
  const float* v = kv.data() + 2 * D;
  std::vector<float> ref(B * Lq * out_ld, 0.0f), probs(B * H * Lq * Lk);
  attention_forward_ref(ref.data(), nullptr, q.data(), k, v, d, m);
  std::string what = std::string(form_name(form)) + " bias=" + std::to_string((int)bias) + " B=" + std::to_string(B) + " H=" + std::to_string(H) +
                     " Dh=" + std::to_string(Dh) + " Lq=" + std::to_string(Lq) + " Lk=" + std::to_string(Lk);
  for (KernelIsa isa : isas())
    for (bool blocked : {false, true}) {  // the ISA's own choice, then the blocked kernel forced
    IsaScope scope(isa);
    BlockedAttentionScope force(blocked);
    std::vector<float> out(B * Lq * out_ld, 0.0f);
    attention_forward(out.data(), nullptr, q.data(), k, v, d, m);
    ASSERT_TRUE(all_close(out, ref, 2e-5f, 2e-5f)) << what << " " << kernel_isa_name(isa) << " blocked " << blocked;
    // Rows with no visible key are exactly zero.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Lq; ++i) {
        bool any = false;
        for (int64_t j = 0; j < Lk && !any; ++j) any = m.visible(b, i, j, Lq, Lk);
        if (!any) {
          for (int64_t c = 0; c < D; ++c) ASSERT_EQ(out[(b * Lq + i) * out_ld + c], 0.0f) << what;
        }
      }
  }
  std::vector<float> out_p(B * Lq * out_ld, 0.0f);
  attention_forward(out_p.data(), probs.data(), q.data(), k, v, d, m);
  EXPECT_TRUE(all_close(out_p, ref, 2e-5f, 2e-5f)) << what << " (probs path)";
}

}  // namespace

class BlockedAttention : public ::testing::TestWithParam<int> {};

TEST_P(BlockedAttention, MatchesReferenceAcrossKeyBlocksHeadDimsAndStrides) {
  const MaskForm form = (MaskForm)GetParam();
  for (int64_t Dh : {8, 24, 64, 80})
    for (int64_t Lk : {1, 5, 32, 33, 63, 64, 65, 130, 600}) {  // <= 32 keys: the GEMM path
      for (int64_t Lq : {1, 7}) check_attention(form, 2, 2, Dh, Lq, Lk);
      if (Lk == 65 || Lk == 600) check_attention(form, 2, 2, Dh, 37, Lk);  // several query tiles and key blocks
      if (HasFatalFailure()) return;
    }
}

TEST_P(BlockedAttention, SquareEncoderShapes) {
  const MaskForm form = (MaskForm)GetParam();
  check_attention(form, 3, 4, 64, 128, 128);  // BERT-like, B * heads tasks
  check_attention(form, 1, 2, 32, 200, 200);  // few heads: query rows split into chunks
}

INSTANTIATE_TEST_SUITE_P(AllForms, BlockedAttention, ::testing::Range(0, 8),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(form_name((MaskForm)i.param)); });

// The additive score bias (MPNet's relative position bias) on the blocked kernel of every ISA and the GEMM path,
// with and without masks, shared across the batch and per batch row.
TEST(AttentionBias, BlockedAndGemmPathsMatchReferenceOnEveryIsa) {
  for (BiasForm bias : {BiasForm::Shared, BiasForm::PerBatch})
    for (MaskForm form : {MaskForm::None, MaskForm::KeyMask, MaskForm::Causal, MaskForm::General3d}) {
      for (int64_t Lk : {5, 32, 33, 65, 130}) check_attention(form, 2, 3, 16, Lk, Lk, bias);
      check_attention(form, 2, 2, 64, 7, 600, bias);
      check_attention(form, 1, 2, 32, 200, 200, bias);  // query rows split into chunks
      if (HasFatalFailure()) return;
    }
}

// The bf16 copy (AttentionDims::bf16 with AVX512-BF16 dot products) under every mask form, head_dims 64, 32 and
// 48 (a 16-element tail in the K transpose), key counts on and around its block sizes (32-key blocks up to 32
// keys, 64 above), strided q/k/v and out: it matches the double-precision reference on bf16-rounded q, k, v
// within the rounding of the softmax weights, and rows with no visible key are exactly zero. Skipped where the
// CPU has no AVX512_BF16: this copy is vdpbf16ps code that never runs there (bf16_kernel() is false, and a bf16
// model's attention runs the fp32 copies, checked on every CPU by Bf16Attention in test_unpadded.cpp).
TEST(Bf16Attention, EveryMaskFormMatchesRoundedReference) {
  if (!cpu_has_avx512_bf16())
    GTEST_SKIP() << "no AVX512_BF16: the vdpbf16ps attention copy does not run on this CPU (a bf16 model's "
                    "attention runs the fp32 copies here, tested by Bf16Attention.DotProductKernel...)";
  const bool saved_dot = kernel_bf16_dot();
  IsaScope scope(KernelIsa::Avx512);
  set_kernel_bf16_dot(true);
  for (int f = 0; f < 8; ++f)
    for (int64_t Dh : {64, 32, 48})
      for (auto [Lq, Lk] : {std::pair<int64_t, int64_t>{7, 1}, {5, 17}, {32, 32}, {9, 33}, {37, 64}, {13, 65},
                            {40, 130}, {7, 600}}) {
        const MaskForm form = (MaskForm)f;
        const int64_t B = 2, H = 2, D = H * Dh, ld = 3 * D + 5, cap = Lk + 3, out_ld = D + 3;
        auto q = random_vec(B * Lq * ld, 100 + Dh, -2.0f, 2.0f);
        auto kv = random_vec(B * cap * ld, 200 + Lk, -2.0f, 2.0f);
        for (auto& e : q) e = round_to_bf16(e);
        for (auto& e : kv) e = round_to_bf16(e);
        MaskBufs mb;
        AttentionMask m = make_mask(form, mb, B, Lq, Lk);
        AttentionDims d{B, Lq, Lk, H, Dh};
        d.q_ld = d.k_ld = d.v_ld = ld;
        d.k_bs = d.v_bs = cap * ld;
        d.out_ld = out_ld;
        d.scale = 0.125f;  // a power of two: bf16(q * scale) = bf16(q) * scale, as the rounded reference takes it
        std::vector<float> ref(B * Lq * out_ld, 0.0f), out(B * Lq * out_ld, 0.0f);
        attention_forward_ref(ref.data(), nullptr, q.data(), kv.data() + D, kv.data() + 2 * D, d, m);
        d.bf16 = true;
        attention_forward(out.data(), nullptr, q.data(), kv.data() + D, kv.data() + 2 * D, d, m);
        const std::string what = std::string(form_name(form)) + " Dh=" + std::to_string(Dh) +
                                 " Lq=" + std::to_string(Lq) + " Lk=" + std::to_string(Lk);
        ASSERT_TRUE(all_close(out, ref, 4e-3f, 1e-2f)) << what;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < Lq; ++i) {
            bool any = false;
            for (int64_t j = 0; j < Lk && !any; ++j) any = m.visible(b, i, j, Lq, Lk);
            if (!any) {
              for (int64_t c = 0; c < D; ++c) ASSERT_EQ(out[(b * Lq + i) * out_ld + c], 0.0f) << what;
            }
          }
      }
  set_kernel_bf16_dot(saved_dot);
}

// A bf16 model's blocked kernel (AttentionDims::bf16, AVX512-BF16 dot products where the CPU has them) adds the
// bias too: it matches the reference on bf16-rounded q, k, v with the bias, within the rounding of the weights,
// and is far from the reference without it. An unpadded batch refuses a bias (its layout is a padded batch's).
TEST(AttentionBias, Bf16KernelAddsTheBiasAndUnpaddedBatchesRefuseIt) {
  const bool saved_dot = kernel_bf16_dot();
  const int64_t B = 2, L = 70, heads = 4, Dh = 64, H = heads * Dh, ld = 3 * H;
  std::vector<float> x = random_vec(B * L * ld, 41, -2.0f, 2.0f), xr(x.size());
  for (size_t i = 0; i < x.size(); ++i) xr[i] = round_to_bf16(x[i]);
  std::vector<float> bias = random_vec(heads * L * L, 42, -3.0f, 3.0f), km(B * L, 1.0f);
  for (int64_t j = 50; j < L; ++j) km[1 * L + j] = 0.0f;
  AttentionDims d{B, L, L, heads, Dh};
  d.q_ld = d.k_ld = d.v_ld = ld;
  d.out_ld = H;
  d.scale = 0.125f;  // a power of two: bf16(q * scale) = bf16(q) * scale
  AttentionMask m;
  m.key_mask = km.data();
  m.bias = bias.data();
  std::vector<float> want(B * L * H), unbiased(B * L * H);
  attention_forward_ref(want.data(), nullptr, xr.data(), xr.data() + H, xr.data() + 2 * H, d, m);
  AttentionMask no_bias = m;
  no_bias.bias = nullptr;
  attention_forward_ref(unbiased.data(), nullptr, xr.data(), xr.data() + H, xr.data() + 2 * H, d, no_bias);
  for (KernelIsa isa : isas())
    for (bool dot : {false, true}) {
      if (dot && (!cpu_has_avx512_bf16() || isa != KernelIsa::Avx512)) continue;
      IsaScope scope(isa);
      set_kernel_bf16_dot(dot);
      AttentionDims db = d;
      db.bf16 = true;
      std::vector<float> got(B * L * H, NAN);
      attention_forward(got.data(), nullptr, xr.data(), xr.data() + H, xr.data() + 2 * H, db, m);
      EXPECT_TRUE(all_close(got, want, dot ? 4e-3f : 2e-5f, dot ? 1e-2f : 1e-4f)) << kernel_isa_name(isa) << dot;
      EXPECT_FALSE(all_close(got, unbiased, 5e-2f, 5e-2f)) << "the bias was not added";
    }
  if (cpu_has_avx512_bf16()) set_kernel_bf16_dot(saved_dot);
  std::vector<int64_t> off = {0, L, 2 * L};
  AttentionDims dv = d;
  dv.seq_offsets = off.data();
  AttentionMask only_bias;
  only_bias.bias = bias.data();
  std::vector<float> out(B * L * H);
  EXPECT_THROW(attention_forward(out.data(), nullptr, x.data(), x.data() + H, x.data() + 2 * H, dv, only_bias),
               std::invalid_argument);
}

// The reference's meaning of the bias, independently of the kernels: a bias of -1e4 on key j is key j masked out,
// and a bias constant along each row changes nothing (softmax shift invariance); a varying bias does change it.
TEST(AttentionBias, ReferenceBiasEqualsMaskingAndIsShiftInvariant) {
  const int64_t B = 2, H = 2, Dh = 8, L = 6, D = H * Dh;
  auto q = random_vec(B * L * D, 1), k = random_vec(B * L * D, 2), v = random_vec(B * L * D, 3);
  AttentionDims d{B, L, L, H, Dh};
  std::vector<float> key_mask(B * L, 1.0f), bias(H * L * L, 0.0f);
  key_mask[0 * L + 2] = key_mask[1 * L + 5] = 0.0f;
  std::vector<float> masked(B * L * D), biased(B * L * D), plain(B * L * D), shifted(B * L * D), varied(B * L * D);
  AttentionMask mk;
  mk.key_mask = key_mask.data();
  attention_forward_ref(masked.data(), nullptr, q.data(), k.data(), v.data(), d, mk);
  std::vector<float> per_batch(B * H * L * L, 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t x = 0; x < H * L; ++x)
      for (int64_t j = 0; j < L; ++j) per_batch[(b * H * L + x) * L + j] = key_mask[b * L + j] == 0.0f ? -1e4f : 0.0f;
  AttentionMask mb;
  mb.bias = per_batch.data();
  mb.bias_batch_stride = H * L * L;
  attention_forward_ref(biased.data(), nullptr, q.data(), k.data(), v.data(), d, mb);
  EXPECT_TRUE(all_close(biased, masked, 1e-6f));
  attention_forward_ref(plain.data(), nullptr, q.data(), k.data(), v.data(), d, AttentionMask{});
  for (int64_t x = 0; x < H * L; ++x)
    for (int64_t j = 0; j < L; ++j) bias[x * L + j] = 0.25f * (float)x;
  AttentionMask ms;
  ms.bias = bias.data();
  attention_forward_ref(shifted.data(), nullptr, q.data(), k.data(), v.data(), d, ms);
  EXPECT_TRUE(all_close(shifted, plain, 1e-6f));
  bias[3] = 2.0f;  // head 0, query 0, key 3
  attention_forward_ref(varied.data(), nullptr, q.data(), k.data(), v.data(), d, ms);
  EXPECT_FALSE(all_close(varied, plain, 1e-3f));
}

TEST(BlockedAttention, EmptyKeysGiveZeros) {
  const int64_t B = 2, H = 2, Dh = 8, Lq = 3, D = H * Dh;
  auto q = random_vec(B * Lq * D, 5);
  std::vector<float> out(B * Lq * D, 1.0f);
  AttentionDims d{B, Lq, 0, H, Dh};
  attention_forward(out.data(), nullptr, q.data(), q.data(), q.data(), d, AttentionMask{});
  for (float x : out) EXPECT_EQ(x, 0.0f);
}


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

}  // namespace

TEST(TrainKernels, SmallHeadAttentionMatchesReferenceForwardAndBackward) {
  // Lengths of one, two and four vectors of keys (the kernels run 8 keys a vector pass, up to kFusedMaxKeys 32).
  for (int64_t L0 : {7, 13, 32})
  for (int64_t Dh : {8, 16, 64})
    for (const MaskCase& mc : kCases) {
      const int64_t B = 3, H = 2, Lq = L0, Lk = mc.causal ? L0 : L0 - 1, D = H * Dh;
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

// Above 32 keys training attention runs the per-head GEMM path (faster there): forward and backward against the
// references, with dropout and a padded key.
TEST(TrainKernels, LongSequencesRunThePerHeadGemmsAndMatchTheReference) {
  const int64_t B = 2, H = 3, L = 40, Dh = 32, D = H * Dh;
  auto q = random_vec(B * L * D, 11), k = random_vec(B * L * D, 12), v = random_vec(B * L * D, 13);
  auto dout = random_vec(B * L * D, 14);
  std::vector<float> out(B * L * D), p(B * H * L * L), drop(p.size()), km(B * L, 1.0f);
  km[L + 37] = 0.0f;
  AttentionDims d{B, L, L, H, Dh};
  EXPECT_FALSE(attention_forward_train(out.data(), p.data(), q.data(), k.data(), v.data(), d, {}, nullptr));
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  EXPECT_FALSE(attention_backward_train(dq.data(), dk.data(), dv.data(), dout.data(), p.data(), q.data(), k.data(),
                                        v.data(), d, nullptr));
  Rng rng(15);
  dropout_mask(drop.data(), (int64_t)drop.size(), 0.25f, rng);
  AttentionMask m;
  m.key_mask = km.data();
  for (bool with_dropout : {false, true}) {
    const float* dm = with_dropout ? drop.data() : nullptr;
    attention_forward(out.data(), p.data(), q.data(), k.data(), v.data(), d, m, dm);
    std::vector<float> p_ref(p.size()), out_ref(out.size());
    attention_forward_ref(out_ref.data(), p_ref.data(), q.data(), k.data(), v.data(), d, m);
    EXPECT_TRUE(test::all_close(p, p_ref, 1e-6f, 1e-5f));
    if (!with_dropout) { EXPECT_TRUE(test::all_close(out, out_ref, 1e-5f, 1e-5f)); }
    std::vector<float> ones(drop.size(), 1.0f);
    std::vector<double> dq_ref, dk_ref, dv_ref;
    backward_ref(dq_ref, dk_ref, dv_ref, dout.data(), p.data(), q.data(), k.data(), v.data(),
                 with_dropout ? drop.data() : ones.data(), B, H, L, L, Dh);
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), p.data(), q.data(), k.data(), v.data(), d, dm);
    EXPECT_LT(max_abs_diff(dq, dq_ref), 1e-5) << "dropout " << with_dropout;
    EXPECT_LT(max_abs_diff(dk, dk_ref), 1e-5) << "dropout " << with_dropout;
    EXPECT_LT(max_abs_diff(dv, dv_ref), 1e-5) << "dropout " << with_dropout;
  }
}


// ---------------------------------------------------------------- KV step (incremental decoding)

namespace {
// A KV buffer of `rows` rows, and for R batch rows of Lk keys each a scattered row index (as beam search leaves it).
struct StepCase {
  int64_t R, heads, Dh, Lk, rows;
};
}  // namespace

TEST(AttentionStep, GatheredRowsMatchReference) {
  for (StepCase sc : {StepCase{3, 2, 8, 5, 17}, StepCase{4, 4, 16, 40, 200}, StepCase{64, 4, 64, 33, 2200}}) {
    const int64_t D = sc.heads * sc.Dh;
    auto k = random_vec(sc.rows * D, 101), v = random_vec(sc.rows * D, 102), q = random_vec(sc.R * D, 103);
    std::vector<int64_t> idx(sc.R * sc.Lk);
    Rng rng(104);
    for (auto& i : idx) i = (int64_t)(rng.uniform(0.0f, 1.0f) * (float)(sc.rows - 1));
    StepKeys kv;
    kv.k = k.data();
    kv.v = v.data();
    kv.kv_len = sc.Lk;
    kv.rows = idx.data();
    kv.rows_stride = sc.Lk;
    std::vector<float> out(sc.R * D), ref(sc.R * D), p(sc.R * sc.heads * sc.Lk), pr(p.size());
    attention_step(out.data(), p.data(), q.data(), sc.R, sc.heads, sc.Dh, kv);
    attention_step_ref(ref.data(), pr.data(), q.data(), sc.R, sc.heads, sc.Dh, kv);
    EXPECT_TRUE(all_close(out, ref, 1e-5f, 1e-5f)) << "R " << sc.R << " Lk " << sc.Lk;
    EXPECT_TRUE(all_close(p, pr, 1e-6f, 1e-5f)) << "R " << sc.R << " Lk " << sc.Lk;
    std::vector<float> no_probs(sc.R * D);  // without probs: a scratch row, same result
    attention_step(no_probs.data(), nullptr, q.data(), sc.R, sc.heads, sc.Dh, kv);
    EXPECT_EQ(no_probs, out);
  }
}

TEST(AttentionStep, SentenceBlocksWithValidLensMatchReferenceAndEmptyRowsAreZero) {
  const int64_t R = 5, heads = 2, Dh = 8, D = heads * Dh, Ls = 6, sentences = 3;
  auto k = random_vec(sentences * Ls * D, 111), v = random_vec(sentences * Ls * D, 112), q = random_vec(R * D, 113);
  std::vector<int64_t> blocks = {2, 0, 0, 1, 2}, valid = {6, 3, 0, 1, 9};  // 0: no visible key; 9 > Ls: all
  StepKeys kv;
  kv.k = k.data();
  kv.v = v.data();
  kv.kv_len = Ls;
  kv.blocks = blocks.data();
  kv.valid_lens = valid.data();
  std::vector<float> out(R * D), ref(R * D), p(R * heads * Ls), pr(p.size());
  attention_step(out.data(), p.data(), q.data(), R, heads, Dh, kv);
  attention_step_ref(ref.data(), pr.data(), q.data(), R, heads, Dh, kv);
  EXPECT_TRUE(all_close(out, ref, 1e-5f, 1e-5f));
  EXPECT_TRUE(all_close(p, pr, 1e-6f, 1e-5f));
  for (int64_t c = 0; c < D; ++c) EXPECT_EQ(out[2 * D + c], 0.0f);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < Ls; ++j) {
      EXPECT_EQ(p[(2 * heads + h) * Ls + j], 0.0f);
      if (j >= 3) { EXPECT_EQ(p[(1 * heads + h) * Ls + j], 0.0f) << "masked key " << j; }
    }
}

// A cached step gives what attention_forward gives the same query over contiguous keys (the teacher-forced
// forward), to rounding: the cached decoder must not drift from training.
TEST(AttentionStep, EqualsAttentionForwardForOneQuery) {
  const int64_t B = 3, heads = 4, Dh = 8, D = heads * Dh, Lk = 7;
  auto k = random_vec(B * Lk * D, 121), v = random_vec(B * Lk * D, 122), q = random_vec(B * D, 123);
  std::vector<int64_t> blocks = {0, 1, 2}, valid = {7, 4, 2};
  StepKeys kv;
  kv.k = k.data();
  kv.v = v.data();
  kv.kv_len = Lk;
  kv.blocks = blocks.data();
  kv.valid_lens = valid.data();
  std::vector<float> out(B * D), full(B * D), probs(B * heads * Lk);
  attention_step(out.data(), nullptr, q.data(), B, heads, Dh, kv);
  AttentionMask mask;
  mask.valid_lens = valid.data();
  attention_forward(full.data(), probs.data(), q.data(), k.data(), v.data(), AttentionDims{B, 1, Lk, heads, Dh}, mask);
  EXPECT_TRUE(all_close(out, full, 1e-6f, 1e-6f));
}
