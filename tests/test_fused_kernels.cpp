// Fused inference kernels (issue 9 part 3) against the plain references, on both kernel ISAs where the CPU has
// AVX-512 (ops/isa.h): add + LayerNorm, blocked online-softmax attention, GELU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "core/rng.h"
#include "core/threading.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/isa.h"
#include "ops/layer_norm.h"
#include "core/profile.h"
#include "test_util.h"

using namespace tfm;
using namespace tfm::ops;

namespace {
float bf16_to_float(uint16_t v) {  // a bf16 bit pattern's value
  const uint32_t bits = (uint32_t)v << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
}  // namespace
using tfm::test::all_close;
using tfm::test::random_vec;

using tfm::test::isas;
using tfm::test::IsaScope;

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

// add + LayerNorm (and plain LayerNorm) writing its output also as the next product's input (bf16, or s8 with a
// scale per row): on both ISA copies, the fp32 output is the plain call's bit for bit, the prepared rows are
// prepare_input's of that output bit for bit, and against the plain references (layer_norm_forward_ref, then
// prepare_input_ref) within one bf16 ulp / one s8 step. A row holding a NaN gives scale NaN and zeros there only.
TEST(FusedKernels, LayerNormWritesTheProductInputOnBothIsas) {
  using tfm::test::prepared_close;
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t N : {1, 9, 64})  // 64 x 768 runs in parallel chunks
      for (int64_t C : {17, 768})
        for (ComputeType ct : {ComputeType::BF16, ComputeType::I8})
          for (bool residual : {true, false}) {
            SCOPED_TRACE(std::string(kernel_isa_name(isa)) + " N=" + std::to_string(N) + " C=" + std::to_string(C) +
                         " " + compute_type_name(ct) + (residual ? " add" : " plain"));
            auto x = random_vec(N * C, 70 + C, -2.0f, 3.0f), r = random_vec(N * C, 71 + N, -1.0f, 1.0f);
            auto w = random_vec(C, 72), b = random_vec(C, 73);
            for (int64_t n = 0; n < N; ++n)  // rows of different magnitude: a scale from the wrong row shows
              for (int64_t c = 0; c < C; ++c) x[n * C + c] *= 1.0f + (float)(n % 4);
            if (N > 1) x[C + 3] = NAN;  // row 1
            std::vector<float> want(N * C), out(N * C), sum(N * C), sum_want(N * C);
            const float* res = residual ? r.data() : nullptr;
            if (residual)
              add_layer_norm_forward(want.data(), sum_want.data(), x.data(), res, w.data(), b.data(), N, C, 1e-5f);
            else
              layer_norm_forward(want.data(), nullptr, nullptr, x.data(), w.data(), b.data(), N, C, 1e-5f);
            PreparedInput q, from_out, ref;
            layer_norm_forward_to(out.data(), sum.data(), x.data(), res, w.data(), b.data(), N, C, 1e-5f, ct, q);
            EXPECT_EQ(std::memcmp(out.data(), want.data(), sizeof(float) * N * C), 0);  // NaN rows too
            if (residual) { EXPECT_EQ(std::memcmp(sum.data(), sum_want.data(), sizeof(float) * N * C), 0); }
            prepare_input(from_out, ct, out.data(), N, C);
            EXPECT_TRUE(prepared_close(q, from_out));
            std::vector<float> xs(N * C), lref(N * C);
            for (int64_t i = 0; i < N * C; ++i) xs[i] = x[i] + (residual ? r[i] : 0.0f);
            layer_norm_forward_ref(lref.data(), xs.data(), w.data(), b.data(), N, C, 1e-5f);
            prepare_input_ref(ref, ct, lref.data(), N, C);
            if (ct == ComputeType::I8) {
              EXPECT_TRUE(prepared_close(q, ref, 1, 1, 2e-5f));
            } else {  // one bf16 unit, or 1e-5 near zero (outputs are O(1); the reference sums in another order)
              for (int64_t i = 0; i < N * C; ++i) {
                const int ulps = std::abs((int)(int16_t)q.bf16[i] - (int)(int16_t)ref.bf16[i]);
                if (ulps > 1) { ASSERT_NEAR(bf16_to_float(q.bf16[i]), bf16_to_float(ref.bf16[i]), 1e-5f) << "element " << i; }
              }
            }
            if (ct == ComputeType::I8 && N > 1) {
              EXPECT_TRUE(std::isnan(q.scale[1]));
              for (int64_t c = 0; c < C; ++c) ASSERT_EQ(q.s8[C + c], 0);
              EXPECT_TRUE(std::isfinite(q.scale[0]));
            }
          }
  }
  PreparedInput q;  // F32: the plain call, nothing prepared
  std::vector<float> x = random_vec(8 * 16, 80), w(16, 1.0f), b(16, 0.0f), out(8 * 16);
  layer_norm_forward_to(out.data(), nullptr, x.data(), nullptr, w.data(), b.data(), 8, 16, 1e-5f, ComputeType::F32, q);
  EXPECT_EQ(q.ct, ComputeType::F32);
  EXPECT_FALSE(q.holds(ComputeType::F32, 8, 16));
}

// ---------------------------------------------------------------- LayerNorm backward (per-ISA copies)

// Against layer_norm_backward_ref (double precision: dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)),
// dw += sum dy xhat, db += sum dy), accumulating onto non-zero dw / db; 130 x 384 runs the parallel row blocks (a ragged last block), the small shapes the serial path.
// The gradient itself is checked by finite differences in OpsGrad.LayerNorm (tests/test_ops.cpp).
TEST(FusedKernels, LayerNormBackwardMatchesReferenceOnBothIsas) {
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    for (auto [N, C] : {std::pair<int64_t, int64_t>{3, 5}, {7, 100}, {130, 384}}) {
      SCOPED_TRACE(std::string(kernel_isa_name(isa)) + " N=" + std::to_string(N) + " C=" + std::to_string(C));
      auto x = random_vec(N * C, 90 + C, -2.0f, 3.0f), dy = random_vec(N * C, 91 + N, -1.0f, 1.0f);
      auto w = random_vec(C, 92), b = random_vec(C, 93);
      std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0.5f), db(C, -0.25f);
      layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
      layer_norm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
      std::vector<float> rdx(N * C), rdw(C, 0.5f), rdb(C, -0.25f);
      layer_norm_backward_ref(rdx.data(), rdw.data(), rdb.data(), dy.data(), x.data(), w.data(), N, C, 1e-5f);
      EXPECT_TRUE(all_close(dx, rdx, 1e-4f, 1e-4f));
      EXPECT_TRUE(all_close(dw, rdw, 1e-4f, 1e-4f));
      EXPECT_TRUE(all_close(db, rdb, 1e-4f, 1e-5f));
    }
  }
}

// The row blocks' weight sums are added in block order: 1 and 2 threads give the same bits.
TEST(FusedKernels, LayerNormBackwardDoesNotDependOnTheThreadCount) {
  const int64_t N = 1000, C = 384;  // above the parallel grain
  auto x = random_vec(N * C, 94, -2.0f, 3.0f), dy = random_vec(N * C, 95), w = random_vec(C, 96), b = random_vec(C, 97);
  std::vector<float> y(N * C), mean(N), rstd(N);
  layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  auto run = [&](int threads, std::vector<float>& dx, std::vector<float>& dw, std::vector<float>& db) {
    const int prev = get_num_threads();
    set_num_threads(threads);
    dx.assign(N * C, 0.0f);
    dw.assign(C, 0.0f);
    db.assign(C, 0.0f);
    layer_norm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                        C);
    set_num_threads(prev);
  };
  std::vector<float> dx1, dw1, db1, dx2, dw2, db2;
  run(1, dx1, dw1, db1);
  run(2, dx2, dw2, db2);
  EXPECT_TRUE(all_close(dx1, dx2, 0.0f));
  EXPECT_TRUE(all_close(dw1, dw2, 0.0f));
  EXPECT_TRUE(all_close(db1, db2, 0.0f));
}

// ---------------------------------------------------------------- GELU (per-ISA copies)

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

// The backward copies against the double-precision reference, in place too (FeedForward calls it so), with a
// ragged parallel end; finite differences of the same kernels: OpsGrad.ActivationsOnBothIsas (tests/test_ops.cpp).
TEST(FusedKernels, ActivationBackwardMatchesReferenceOnBothIsas) {
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t n : {1, 13, 100003}) {
      auto x = random_vec(n, 60 + n, -8.0f, 8.0f), g = random_vec(n, 61 + n, -2.0f, 2.0f);
      for (Activation act : {Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Silu}) {
        std::vector<float> dx(n), ref(n), inplace = g;
        activation_backward(dx.data(), g.data(), x.data(), n, act);
        activation_backward_ref(ref.data(), g.data(), x.data(), n, act);
        EXPECT_TRUE(all_close(dx, ref, 2e-5f, 2e-5f)) << kernel_isa_name(isa) << " n=" << n << " act=" << (int)act;
        activation_backward(inplace.data(), inplace.data(), x.data(), n, act);
        EXPECT_TRUE(all_close(inplace, dx, 0.0f)) << kernel_isa_name(isa) << " in place, act=" << (int)act;
      }
    }
  }
}

// The value-and-derivative pass (FeedForward's backward) writes activation_forward's values, bit for bit, and the
// factor activation_backward applies: g * deriv within a rounding of activation_backward(g), over x in place too.
TEST(FusedKernels, ActivationValueAndDerivativeMatchForwardAndBackwardOnBothIsas) {
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    for (int64_t n : {1, 13, 100003}) {
      auto x = random_vec(n, 70 + n, -8.0f, 8.0f), g = random_vec(n, 71 + n, -2.0f, 2.0f);
      for (Activation act : {Activation::Gelu, Activation::GeluTanh, Activation::Relu, Activation::Silu}) {
        std::vector<float> value(n), deriv(n), fwd(n), bwd(n), inplace = x;
        activation_value_and_derivative(value.data(), deriv.data(), x.data(), n, act);
        activation_forward(fwd.data(), x.data(), n, act);
        activation_backward(bwd.data(), g.data(), x.data(), n, act);
        EXPECT_EQ(value, fwd) << kernel_isa_name(isa) << " n=" << n << " act=" << (int)act;
        std::vector<float> chained(n);
        for (int64_t i = 0; i < n; ++i) chained[i] = g[i] * deriv[i];
        EXPECT_TRUE(all_close(chained, bwd, 1e-6f, 1e-6f)) << kernel_isa_name(isa) << " n=" << n << " act=" << (int)act;
        std::vector<float> value2(n);
        activation_value_and_derivative(value2.data(), inplace.data(), inplace.data(), n, act);
        EXPECT_EQ(value2, fwd) << kernel_isa_name(isa) << " in place, act=" << (int)act;
        EXPECT_EQ(inplace, deriv) << kernel_isa_name(isa) << " in place, act=" << (int)act;
      }
    }
  }
}

// The bias variants (a training FFN's linear1 without its bias): activation_forward / activation_value_and_derivative
// of the biased input, within the rounding by which a loop's scalar tail may differ from its vector body, at widths
// below, at and above the 512-column chunk, on one thread and on the threads; the forward's values and the
// value-and-derivative pass's are the same bits (FeedForward's backward recomputes the forward's act(h + b)); the
// input is left unchanged, or holds the derivative when deriv aliases it.
TEST(FusedKernels, BiasedActivationsEqualActivationsOfTheBiasedInput) {
  for (KernelIsa isa : isas()) {
    IsaScope scope(isa);
    for (auto [N, C] : {std::pair<int64_t, int64_t>{3, 7}, {2, 512}, {300, 1300}}) {
      auto x = random_vec(N * C, 80 + C, -6.0f, 6.0f), b = random_vec(C, 81 + C, -2.0f, 2.0f);
      std::vector<float> xb(N * C);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) xb[n * C + c] = x[n * C + c] + b[c];
      for (Activation act : {Activation::Gelu, Activation::GeluTanh, Activation::Silu}) {
        const std::string what = std::string(kernel_isa_name(isa)) + " " + std::to_string(N) + "x" +
                                 std::to_string(C) + " act=" + std::to_string((int)act);
        std::vector<float> out(N * C), ref(N * C), value(N * C), deriv(N * C), vref(N * C), dref(N * C);
        activation_forward_bias(out.data(), x.data(), b.data(), N, C, act);
        activation_forward(ref.data(), xb.data(), N * C, act);
        EXPECT_TRUE(all_close(out, ref, 1e-6f, 1e-6f)) << what;
        activation_value_and_derivative(vref.data(), dref.data(), xb.data(), N * C, act);
        std::vector<float> inplace = x;
        activation_value_and_derivative_bias(value.data(), inplace.data(), inplace.data(), b.data(), N, C, act);
        EXPECT_EQ(value, out) << what;
        EXPECT_TRUE(all_close(value, vref, 1e-6f, 1e-6f)) << what;
        EXPECT_TRUE(all_close(inplace, dref, 1e-6f, 1e-6f)) << what;
        activation_value_and_derivative_bias(value.data(), deriv.data(), x.data(), b.data(), N, C, act);
        EXPECT_EQ(deriv, inplace) << what;
        EXPECT_EQ(x, random_vec(N * C, 80 + C, -6.0f, 6.0f)) << what << ": input changed";
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
