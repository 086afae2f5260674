// Fused inference kernels (issue 9 part 3) against the plain references, on both kernel ISAs where the CPU has
// AVX-512 (ops/isa.h): add + LayerNorm, blocked online-softmax attention, softmax, GELU.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/rng.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/isa.h"
#include "ops/layer_norm.h"
#include "core/profile.h"
#include "ops/softmax.h"
#include "test_util.h"

using namespace tfm;
using namespace tfm::ops;
using tfm::test::all_close;
using tfm::test::random_vec;

namespace {

// The kernel ISAs this CPU can run; each test runs once per entry and restores the process default.
std::vector<KernelIsa> isas() {
  std::vector<KernelIsa> v = {KernelIsa::Avx2};
  if (cpu_has_avx512()) v.push_back(KernelIsa::Avx512);
  return v;
}
struct IsaScope {
  KernelIsa saved = kernel_isa();
  explicit IsaScope(KernelIsa isa) { set_kernel_isa(isa); }
  ~IsaScope() { set_kernel_isa(saved); }
};

}  // namespace

TEST(FusedKernels, IsaOverrideSwitchesAndRejectsMissingAvx512) {
  {
    IsaScope s(KernelIsa::Avx2);
    EXPECT_EQ(kernel_isa(), KernelIsa::Avx2);
  }
  if (cpu_has_avx512()) {
    IsaScope s(KernelIsa::Avx512);
    EXPECT_EQ(kernel_isa(), KernelIsa::Avx512);
  } else {
    EXPECT_THROW(set_kernel_isa(KernelIsa::Avx512), std::invalid_argument);
  }
}

// ---------------------------------------------------------------- add + LayerNorm

TEST(FusedKernels, AddLayerNormMatchesReferenceOnOddSizes) {
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t N : {1, 7, 64})
      for (int64_t C : {1, 5, 17, 100, 768, 1031}) {
        SCOPED_TRACE(std::string(kernel_isa_name(isa)) + " N=" + std::to_string(N) + " C=" + std::to_string(C));
        auto x = random_vec(N * C, 1 + C, -2.0f, 3.0f), r = random_vec(N * C, 2 + N, -1.0f, 1.0f);
        for (int64_t i = 0; i < N * C; ++i) x[i] += 5.0f;  // a large row mean, as residual streams have
        auto w = random_vec(C, 3), b = random_vec(C, 4);
        std::vector<float> sum(N * C), ref(N * C), out(N * C), sum_out(N * C);
        for (int64_t i = 0; i < N * C; ++i) sum[i] = x[i] + r[i];
        layer_norm_forward_ref(ref.data(), sum.data(), w.data(), b.data(), N, C, 1e-5f);
        // Out of place, with and without the sum.
        add_layer_norm_forward(out.data(), nullptr, x.data(), r.data(), w.data(), b.data(), N, C, 1e-5f);
        EXPECT_TRUE(all_close(out, ref, 2e-5f, 2e-5f));
        add_layer_norm_forward(out.data(), sum_out.data(), x.data(), r.data(), w.data(), b.data(), N, C, 1e-5f);
        EXPECT_TRUE(all_close(out, ref, 2e-5f, 2e-5f));
        EXPECT_TRUE(all_close(sum_out, sum, 0.0f));
        // Post-LN in place: out = x.
        std::vector<float> xi = x;
        add_layer_norm_forward(xi.data(), nullptr, xi.data(), r.data(), w.data(), b.data(), N, C, 1e-5f);
        EXPECT_TRUE(all_close(xi, ref, 2e-5f, 2e-5f));
        // Post-LN in place on the residual: out = residual.
        std::vector<float> ri = r;
        add_layer_norm_forward(ri.data(), nullptr, x.data(), ri.data(), w.data(), b.data(), N, C, 1e-5f);
        EXPECT_TRUE(all_close(ri, ref, 2e-5f, 2e-5f));
        // Pre-LN as the encoders call it: x += f_out (sum into x), f_out = LN(x).
        xi = x;
        ri = r;
        add_layer_norm_forward(ri.data(), xi.data(), xi.data(), ri.data(), w.data(), b.data(), N, C, 1e-5f);
        EXPECT_TRUE(all_close(ri, ref, 2e-5f, 2e-5f));
        EXPECT_TRUE(all_close(xi, sum, 0.0f));
        // Plain LayerNorm (same kernel, no residual) still matches its reference.
        layer_norm_forward(out.data(), nullptr, nullptr, sum.data(), w.data(), b.data(), N, C, 1e-5f);
        EXPECT_TRUE(all_close(out, ref, 2e-5f, 2e-5f));
      }
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
void check_attention(MaskForm form, int64_t B, int64_t H, int64_t Dh, int64_t Lq, int64_t Lk) {
  const int64_t D = H * Dh, ld = 3 * D + 5, cap = Lk + 3, out_ld = D + 3;
  auto q = random_vec(B * Lq * ld, 100 + Dh, -2.0f, 2.0f);
  auto kv = random_vec(B * cap * ld, 200 + Lk, -2.0f, 2.0f);
  MaskBufs mb;
  AttentionMask m = make_mask(form, mb, B, Lq, Lk);
  AttentionDims d{B, Lq, Lk, H, Dh};
  d.q_ld = d.k_ld = d.v_ld = ld;
  d.k_bs = d.v_bs = cap * ld;
  d.out_ld = out_ld;
  const float* k = kv.data() + D;
  const float* v = kv.data() + 2 * D;
  std::vector<float> ref(B * Lq * out_ld, 0.0f), probs(B * H * Lq * Lk);
  attention_forward_ref(ref.data(), nullptr, q.data(), k, v, d, m);
  std::string what = std::string(form_name(form)) + " B=" + std::to_string(B) + " H=" + std::to_string(H) +
                     " Dh=" + std::to_string(Dh) + " Lq=" + std::to_string(Lq) + " Lk=" + std::to_string(Lk);
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    std::vector<float> out(B * Lq * out_ld, 0.0f);
    attention_forward(out.data(), nullptr, q.data(), k, v, d, m);
    ASSERT_TRUE(all_close(out, ref, 2e-5f, 2e-5f)) << what << " " << kernel_isa_name(isa);
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

TEST(BlockedAttention, EmptyKeysGiveZeros) {
  const int64_t B = 2, H = 2, Dh = 8, Lq = 3, D = H * Dh;
  auto q = random_vec(B * Lq * D, 5);
  std::vector<float> out(B * Lq * D, 1.0f);
  AttentionDims d{B, Lq, 0, H, Dh};
  attention_forward(out.data(), nullptr, q.data(), q.data(), q.data(), d, AttentionMask{});
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// ---------------------------------------------------------------- softmax, GELU (per-ISA copies)

TEST(FusedKernels, SoftmaxMatchesReferenceOnBothIsas) {
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t rows : {1, 7, 300})
      for (int64_t cols : {1, 3, 17, 64, 1000}) {
        auto x = random_vec(rows * cols, 40 + cols, -30.0f, 30.0f);
        std::vector<float> out(rows * cols), ref(rows * cols);
        softmax_forward(out.data(), x.data(), rows, cols);
        softmax_forward_ref(ref.data(), x.data(), rows, cols);
        EXPECT_TRUE(all_close(out, ref, 1e-6f, 1e-5f)) << kernel_isa_name(isa) << " " << rows << "x" << cols;
        softmax_forward(x.data(), x.data(), rows, cols);  // in place
        EXPECT_TRUE(all_close(x, ref, 1e-6f, 1e-5f)) << kernel_isa_name(isa) << " in place";
      }
  }
}

TEST(FusedKernels, ActivationsMatchReferenceOnBothIsas) {
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t n : {1, 13, 100003}) {  // the last runs in parallel chunks with a ragged end
      auto x = random_vec(n, 50 + n, -8.0f, 8.0f);
      for (Activation act : {Activation::Gelu, Activation::GeluTanh, Activation::Relu}) {
        std::vector<float> out(n), ref(n);
        activation_forward(out.data(), x.data(), n, act);
        activation_forward_ref(ref.data(), x.data(), n, act);
        EXPECT_TRUE(all_close(out, ref, 2e-6f, 2e-6f)) << kernel_isa_name(isa) << " n=" << n << " act=" << (int)act;
      }
    }
  }
}

// ---------------------------------------------------------------- per-op timing hook (bench_encoder --breakdown)

TEST(FusedKernels, OpProfileTimesBertSectionsOnlyWhenOn) {
  auto model = load_encoder(tfm::test::fixture("bert"));
  auto io = SafeTensors::open(tfm::test::fixture("bert/io.safetensors"));
  Tensor ids = io.get("input_ids"), mask = io.get("attention_mask");
  const int64_t layers = model->config().num_hidden_layers;
  set_op_profiling(false);
  reset_op_profile();
  model->forward(ids, Tensor(), mask);
  EXPECT_TRUE(op_profile().empty());  // off: nothing recorded
  set_op_profiling(true);
  model->forward(ids, Tensor(), mask);
  set_op_profiling(false);
  std::map<std::string, OpStat> by_name;
  for (const OpStat& s : op_profile()) by_name[s.name] = s;
  for (const char* name : {"qkv_gemm", "attention", "attn_out_gemm", "ffn_in_gemm_act", "ffn_out_gemm"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name[name].calls, layers) << name;
    EXPECT_GT(by_name[name].seconds, 0.0) << name;
  }
  EXPECT_EQ(by_name["add_layernorm"].calls, 2 * layers);
  EXPECT_EQ(by_name["embeddings"].calls, 1);
  reset_op_profile();
  EXPECT_TRUE(op_profile().empty());
}
