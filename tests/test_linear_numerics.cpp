// Exact numerics of the reduced-precision Linear (ops/gemm.h, the one GEMM seam) that cosine bounds cannot see:
// bf16 rounds activations to nearest even, int8 quantises each token with its own scale, and a NaN or infinity
// in an activation comes out as NaN, never as a finite answer. Each expected value is computed here from the
// documented rule (torch's .to(torch.bfloat16); q = round_half_even(x / (max|x| / 127))), not from the code.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <tuple>

#include "ops/activation.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/matmul.h"
#include "test_util.h"

using namespace tfm::ops;
using tfm::test::random_vec;

namespace {

// The nearest bf16 (8 significant bits) to x, ties to even: torch's x.to(torch.bfloat16) for finite x.
double bf16_rne(double x) {
  if (x == 0.0) return x;
  int e = 0;
  const double m = std::frexp(x, &e);  // |m| in [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);  // nearbyint: FE_TONEAREST, ties to even
}
// The same with the low bits dropped (what a truncating conversion gives), to show the inputs tell them apart.
double bf16_trunc(double x) {
  int e = 0;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::trunc(std::ldexp(m, 8)), e - 8);
}

// Inputs where rounding to nearest even, truncation and rounding half away from zero all differ:
// 1 + 3/256 is halfway between 1 + 1/128 and 1 + 2/128 (even: up; truncation: down), 1 + 1/256 halfway between
// 1 and 1 + 1/128 (even: down; half away: up), 1 + 3/256 + 2^-12 just above a tie (nearest: up).
std::vector<float> tie_inputs(int64_t n) {
  const float base[] = {1.0f + 3.0f / 256, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256 + 1.0f / 4096, 1.0f + 5.0f / 256,
                        1.0f + 255.0f / 256, 1.0f + 7.0f / 256 - 1.0f / 4096, 1.0f + 2.0f / 256, 1.0f};
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const float v = base[i % 8] * std::ldexp(1.0f, (int)(i / 8 % 3));  // scales 1, 2, 4: still exact ties
    x[i] = (i / 3) % 2 ? -v : v;
  }
  return x;
}

// Whether a bf16 PackedLinear runs bf16 arithmetic here: the CPU's instructions, or their emulation
// (TFM_EMULATE_BF16=1, which the test suite sets); and why not.
bool bf16_linear() { return has_native_product(ComputeType::BF16) || bf16_gemm_emulated(); }
std::string no_bf16() {
  return std::string("no bf16 matmul on this CPU (") + cpu_isa_name() +
         ") and TFM_EMULATE_BF16 unset: PackedLinear multiplies in fp32";
}

}  // namespace

// Weights bf16 holds exactly (k/64, |k| <= 8) and inputs at or near bf16 ties: every product and partial sum is
// exact in fp32 whatever the summation order, so the output must equal, bit for bit, the product of the inputs
// rounded to nearest even. Truncating (or rounding half away from zero) shifts every tie the same way and
// changes the output.
TEST(Bf16Linear, RoundsActivationsToNearestEvenBitExact) {
  const int64_t N = 12, I = 64, O = 24;
  std::vector<float> w(O * I), b(O);
  for (int64_t i = 0; i < O * I; ++i) w[i] = (float)((i * 7 + i / I) % 17 - 8) / 64.0f;
  for (int64_t o = 0; o < O; ++o) b[o] = (float)(o % 5 - 2) / 16.0f;
  std::vector<float> x = tie_inputs(N * I);
  for (int64_t n = 0; n < N; ++n) std::rotate(x.begin() + n * I, x.begin() + n * I + n % 8, x.begin() + (n + 1) * I);
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  std::vector<float> want(N * O), trunc(N * O);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double acc = b[o], acc_t = b[o];
      for (int64_t i = 0; i < I; ++i) {
        acc += bf16_rne(x[n * I + i]) * w[o * I + i];
        acc_t += bf16_trunc(x[n * I + i]) * w[o * I + i];
      }
      want[n * O + o] = (float)acc;
      trunc[n * O + o] = (float)acc_t;
    }
  int64_t differ = 0;
  for (int64_t i = 0; i < N * O; ++i) differ += want[i] != trunc[i];
  ASSERT_GT(differ, N * O / 2) << "the inputs must tell rounding from truncation";
  if (!bf16_linear()) GTEST_SKIP() << no_bf16();
  PackedLinear lin(w.data(), b.data(), I, O, ComputeType::BF16);
  std::vector<float> y(N * O);
  lin.forward(y.data(), x.data(), N);
  for (int64_t i = 0; i < N * O; ++i) ASSERT_EQ(y[i], want[i]) << "row " << i / O << " column " << i % O;
  // The same inputs rounded to nearest even give a different answer than the fp32 product (the test can fail).
  std::vector<float> f32(N * O);
  linear_forward_ref(f32.data(), x.data(), w.data(), b.data(), N, I, O);
  EXPECT_NE(f32, want);
}

// The bf16 product of training (precision "bf16") rounds both operands the same way.
TEST(Bf16Linear, TrainingProductRoundsToNearestEvenBitExact) {
  if (!bf16_gemm_available()) GTEST_SKIP() << "no bf16 GEMM on this CPU (" << cpu_isa_name() << ")";
  const int64_t M = 9, N = 20, K = 48;
  std::vector<float> a = tie_inputs(M * K), b = tie_inputs(N * K);
  std::reverse(b.begin(), b.end());
  std::vector<float> want(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += bf16_rne(a[i * K + k]) * bf16_rne(b[j * K + k]);
      want[i * N + j] = (float)acc;
    }
  std::vector<float> c(M * N, NAN);
  gemm_bf16(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(c[i], want[i]) << "element " << i;
  for (float v : {1.0f + 3.0f / 256, -(1.0f + 3.0f / 256), 1.0f + 1.0f / 256, 3.0e38f, -1e-30f})
    EXPECT_EQ((double)round_to_bf16(v), bf16_rne(v)) << v;
}

namespace {

// Symmetric int8 quantisation as documented in ops/gemm.h, in fp32 as torch would compute it: scale = max|v| / qmax
// (1 for all zeros), q = round_half_even(v * (1 / scale)) clamped to [-qmax, qmax]. Activations have qmax 127,
// weights int8_weight_max() (63 on a CPU without VNNI).
float quantise(std::vector<int>& q, const float* v, int64_t n, int qmax = 127) {
  float mx = 0.0f;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, std::fabs(v[i]));
  const float fq = (float)qmax, scale = mx > 0.0f ? mx / fq : 1.0f, inv = 1.0f / scale;
  q.resize(n);
  for (int64_t i = 0; i < n; ++i) q[i] = (int)std::clamp(std::nearbyint(v[i] * inv), -fq, fq);
  return scale;
}

// Rows and output features of very different magnitudes (a scale taken from the wrong row or from the whole
// tensor changes every other row's rounding).
struct Int8Case {
  int64_t N = 13, I = 200, O = 40;
  std::vector<float> w, b, x;
  Int8Case() {
    w = random_vec(O * I, 31, -0.05f, 0.05f);
    b = random_vec(O, 32, -0.5f, 0.5f);
    x = random_vec(N * I, 33, -1.0f, 1.0f);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < I; ++i) w[o * I + i] *= 1.0f + (float)(o % 5) * 3.0f;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < I; ++i) x[n * I + i] *= std::ldexp(1.0f, (int)(n % 7) * 2 - 6) * (1.0f + 0.1f * n);
  }
};

struct Int8Scales {
  Int8ActivationScales saved = int8_activation_scales();
  explicit Int8Scales(Int8ActivationScales s) { set_int8_activation_scales(s); }
  ~Int8Scales() { set_int8_activation_scales(saved); }
};

}  // namespace

// Per-token int8 (the default) against the documented quantisation computed here: the int32 sums are exact, so
// the only differences left are the fp32 rounding of the dequantisation (relative 1e-6).
TEST(Int8Linear, PerTokenScalesMatchTheDocumentedQuantisation) {
  Int8Scales per_token(Int8ActivationScales::PerToken);
  Int8Case c;
  std::vector<std::vector<int>> qw(c.O);
  std::vector<float> sw(c.O);
  for (int64_t o = 0; o < c.O; ++o) sw[o] = quantise(qw[o], c.w.data() + o * c.I, c.I, int8_weight_max());
  std::vector<float> want(c.N * c.O);
  for (int64_t n = 0; n < c.N; ++n) {
    std::vector<int> qx;
    const float sx = quantise(qx, c.x.data() + n * c.I, c.I);
    for (int64_t o = 0; o < c.O; ++o) {
      int64_t acc = 0;
      for (int64_t i = 0; i < c.I; ++i) acc += (int64_t)qx[i] * qw[o][i];
      want[n * c.O + o] = (float)((double)acc * sx * sw[o] + c.b[o]);
    }
  }
  PackedLinear lin(c.w.data(), c.b.data(), c.I, c.O, ComputeType::I8);
  std::vector<float> y(c.N * c.O);
  lin.forward(y.data(), c.x.data(), c.N);
  for (int64_t n = 0; n < c.N; ++n) {
    float row_max = 0.0f;
    for (int64_t o = 0; o < c.O; ++o) row_max = std::max(row_max, std::fabs(want[n * c.O + o]));
    for (int64_t o = 0; o < c.O; ++o)
      ASSERT_NEAR(y[n * c.O + o], want[n * c.O + o], 1e-6f * row_max + 1e-6f) << "row " << n << " column " << o;
  }
}

// With one scale per token a row's result does not depend on the other rows of the call: each row alone, bit for
// bit the same as in the batch (what keeps a served request independent of its batch-mates).
TEST(Int8Linear, PerTokenRowDoesNotDependOnItsBatchMates) {
  Int8Scales per_token(Int8ActivationScales::PerToken);
  Int8Case c;
  PackedLinear lin(c.w.data(), c.b.data(), c.I, c.O, ComputeType::I8);
  std::vector<float> all(c.N * c.O);
  lin.forward(all.data(), c.x.data(), c.N, Epilogue::Gelu);
  for (int64_t n = 0; n < c.N; ++n) {
    std::vector<float> one(c.O);
    lin.forward(one.data(), c.x.data() + n * c.I, 1, Epilogue::Gelu);
    for (int64_t o = 0; o < c.O; ++o) ASSERT_EQ(one[o], all[n * c.O + o]) << "row " << n << " column " << o;
  }
}

// A NaN or an infinity in an activation surfaces as NaN in that row's outputs, as the fp32 product gives it, for
// every compute type and epilogue; the other rows are unaffected (int8 per tensor falls back to per-row scales for
// such a call). Before: int8 quantised NaN to -127 and returned finite numbers.
TEST(Int8Linear, NonFiniteActivationGivesNaNRowsNotFiniteAnswers) {
  Int8Case c;
  std::vector<float> bad = c.x;
  bad[2 * c.I + 17] = NAN;
  bad[5 * c.I + 3] = INFINITY;
  bad[7 * c.I + c.I - 1] = -INFINITY;
  const std::vector<int64_t> bad_rows = {2, 5, 7};
  for (auto [ct, scales] : {std::pair{ComputeType::I8, Int8ActivationScales::PerToken},
                            std::pair{ComputeType::I8, Int8ActivationScales::PerTensor},
                            std::pair{ComputeType::BF16, Int8ActivationScales::PerToken},
                            std::pair{ComputeType::F32, Int8ActivationScales::PerToken}}) {
    Int8Scales s(scales);
    PackedLinear lin;
    try {
      lin = PackedLinear(c.w.data(), c.b.data(), c.I, c.O, ct);
    } catch (const std::runtime_error& e) {
      continue;  // bf16 on a CPU without it
    }
    for (Epilogue ep : {Epilogue::None, Epilogue::Relu, Epilogue::Gelu}) {
      SCOPED_TRACE(std::string(compute_type_name(ct)) + (scales == Int8ActivationScales::PerTensor ? " per tensor" : "") +
                   " epilogue " + std::to_string((int)ep));
      std::vector<float> y(c.N * c.O), clean(c.N * c.O);
      lin.forward(y.data(), bad.data(), c.N, ep);
      for (int64_t n = 0; n < c.N; ++n) {
        const bool is_bad = std::find(bad_rows.begin(), bad_rows.end(), n) != bad_rows.end();
        int64_t non_finite = 0;
        for (int64_t o = 0; o < c.O; ++o) {
          const float v = y[n * c.O + o];
          non_finite += !std::isfinite(v);
          // Without an activation every output of a bad row is NaN or infinite; relu(-inf) is 0 in fp32.
          if (is_bad && ep == Epilogue::None) {
            ASSERT_FALSE(std::isfinite(v)) << "row " << n << " column " << o << " is finite: " << v;
          }
        }
        // oneDNN's fused ReLU (fp32, bf16) is max(x, 0), which maps NaN to 0 (in a model the residual path still
        // carries the NaN); int8 applies its activation after dequantisation, where NaN stays NaN.
        const bool fused_relu = ep == Epilogue::Relu && ct != ComputeType::I8;
        if (is_bad && !fused_relu) {
          EXPECT_GT(non_finite, c.O / 4) << "row " << n;
        } else if (!is_bad) {
          EXPECT_EQ(non_finite, 0) << "row " << n;
        }
      }
      // Per token, the good rows are exactly what they are without the bad ones.
      if (ct == ComputeType::I8) {
        Int8Scales pt(Int8ActivationScales::PerToken);
        lin.forward(clean.data(), c.x.data(), c.N, ep);
        for (int64_t n : {0, 1, 3, 4, 6, 8, 12})
          for (int64_t o = 0; o < c.O; ++o) ASSERT_EQ(y[n * c.O + o], clean[n * c.O + o]) << "row " << n;
      }
    }
  }
}

// ---- GEMM inputs written by their producer (ops/gemm.h PreparedInput, PackedLinear::forward_to)

namespace {
struct FusedQuantScope {
  bool saved = fused_quantisation();
  explicit FusedQuantScope(bool on) { set_fused_quantisation(on); }
  ~FusedQuantScope() { set_fused_quantisation(saved); }
};
}  // namespace

// On both ISA copies: a product read from a prepared input equals the product of the fp32 rows it was prepared
// from, bit for bit (a NaN row included); forward_to's output equals forward() followed by prepare_input (bit for
// bit from an int8 product, whose epilogue and prepare_input share one row kernel; within one bf16 ulp from a bf16
// product, whose bf16 output oneDNN rounds itself), for every pairing of bf16 and int8 products.
TEST(Int8Linear, PreparedInputAndForwardToMatchTheFp32PathOnBothIsas) {
  if (!bf16_linear()) GTEST_SKIP() << no_bf16();
  using tfm::test::prepared_close;
  Int8Scales per_token(Int8ActivationScales::PerToken);
  FusedQuantScope fused(true);
  Int8Case c;
  c.x[2 * c.I + 5] = NAN;
  for (KernelIsa isa : tfm::test::isas()) {
    tfm::test::IsaScope scope(isa);
    for (ComputeType ct : {ComputeType::BF16, ComputeType::I8}) {
      PackedLinear lin(c.w.data(), c.b.data(), c.I, c.O, ct);
      ASSERT_EQ(lin.input_type(), ct);
      PreparedInput px;
      prepare_input(px, ct, c.x.data(), c.N, c.I);
      for (Epilogue ep : {Epilogue::None, Epilogue::Gelu, Epilogue::GeluTanh, Epilogue::Relu}) {
        SCOPED_TRACE(std::string(kernel_isa_name(isa)) + " " + compute_type_name(ct) + " epilogue " +
                     std::to_string((int)ep));
        std::vector<float> y(c.N * c.O), yp(c.N * c.O), work(c.N * c.O);
        lin.forward(y.data(), c.x.data(), c.N, ep);
        lin.forward(yp.data(), px, ep);
        EXPECT_EQ(std::memcmp(y.data(), yp.data(), sizeof(float) * y.size()), 0);
        for (ComputeType next_ct : {ComputeType::BF16, ComputeType::I8})
          for (bool from_prepared : {false, true}) {
            PreparedInput next, want;
            lin.forward_to(next, next_ct, work.data(), c.x.data(), from_prepared ? &px : nullptr, c.N, ep);
            prepare_input(want, next_ct, y.data(), c.N, c.O);
            EXPECT_TRUE(prepared_close(next, want, ct == ComputeType::BF16 ? 1 : 0, 0, 0.0f))
                << "next " << compute_type_name(next_ct) << " from prepared " << from_prepared;
          }
      }
    }
  }
}

// The fused int8 epilogue (dequantisation, bias, activation and the next product's s8 rows in one pass) against
// the plain reference built here: the documented quantisation of weights and inputs, exact integer sums,
// activation_forward_ref, then prepare_input_ref. Within one s8 step (the activations' fast erf / tanh and fp32
// rounding can move a value across a half), scales within 1e-5, on both ISA copies.
TEST(Int8Linear, FusedEpilogueToNextInputMatchesThePlainReference) {
  using tfm::test::prepared_close;
  Int8Scales per_token(Int8ActivationScales::PerToken);
  FusedQuantScope fused(true);
  Int8Case c;
  std::vector<std::vector<int>> qw(c.O);
  std::vector<float> sw(c.O), acc_scaled(c.N * c.O);
  for (int64_t o = 0; o < c.O; ++o) sw[o] = quantise(qw[o], c.w.data() + o * c.I, c.I, int8_weight_max());
  for (int64_t n = 0; n < c.N; ++n) {
    std::vector<int> qx;
    const float sx = quantise(qx, c.x.data() + n * c.I, c.I);
    for (int64_t o = 0; o < c.O; ++o) {
      int64_t acc = 0;
      for (int64_t i = 0; i < c.I; ++i) acc += (int64_t)qx[i] * qw[o][i];
      acc_scaled[n * c.O + o] = (float)((double)acc * sx * sw[o] + c.b[o]);
    }
  }
  PackedLinear lin(c.w.data(), c.b.data(), c.I, c.O, ComputeType::I8);
  for (KernelIsa isa : tfm::test::isas()) {
    tfm::test::IsaScope scope(isa);
    for (auto [ep, act] : {std::pair{Epilogue::Gelu, Activation::Gelu}, std::pair{Epilogue::GeluTanh, Activation::GeluTanh},
                           std::pair{Epilogue::Silu, Activation::Silu}}) {
      std::vector<float> yr(c.N * c.O), work(c.N * c.O);
      activation_forward_ref(yr.data(), acc_scaled.data(), c.N * c.O, act);
      PreparedInput next, ref;
      prepare_input_ref(ref, ComputeType::I8, yr.data(), c.N, c.O);
      lin.forward_to(next, ComputeType::I8, work.data(), c.x.data(), nullptr, c.N, ep);
      EXPECT_TRUE(prepared_close(next, ref, 0, 1, 1e-5f)) << kernel_isa_name(isa) << " epilogue " << (int)ep;
    }
  }
}

// What a product takes prepared: its own type per token; fp32 (nothing) for fp32, per-tensor int8 and with the
// fusion off; a mismatched prepared input is refused with std::invalid_argument, as is forward_to an fp32 input.
TEST(Int8Linear, PreparedInputTypeFollowsTheScalesAndTheSwitch) {
  Int8Case c;
  PackedLinear i8(c.w.data(), c.b.data(), c.I, c.O, ComputeType::I8);
  PackedLinear f32(c.w.data(), c.b.data(), c.I, c.O, ComputeType::F32);
  PreparedInput px;
  prepare_input(px, ComputeType::I8, c.x.data(), c.N, c.I);
  std::vector<float> y(c.N * c.O), work(c.N * c.O);
  {
    FusedQuantScope fused(true);
    Int8Scales per_token(Int8ActivationScales::PerToken);
    EXPECT_EQ(i8.input_type(), ComputeType::I8);
    EXPECT_EQ(f32.input_type(), ComputeType::F32);
    EXPECT_EQ(PackedLinear().input_type(), ComputeType::F32);
    EXPECT_THROW(f32.forward(y.data(), px), std::invalid_argument);
    PreparedInput narrow;
    prepare_input(narrow, ComputeType::I8, c.x.data(), c.N * 2, c.I / 2);
    EXPECT_THROW(i8.forward(y.data(), narrow), std::invalid_argument);
    PreparedInput next;
    EXPECT_THROW(i8.forward_to(next, ComputeType::F32, work.data(), c.x.data(), nullptr, c.N), std::invalid_argument);
    Int8Scales per_tensor(Int8ActivationScales::PerTensor);
    EXPECT_EQ(i8.input_type(), ComputeType::F32);
    EXPECT_THROW(i8.forward(y.data(), px), std::invalid_argument);
  }
  FusedQuantScope off(false);
  Int8Scales per_token(Int8ActivationScales::PerToken);
  EXPECT_EQ(i8.input_type(), ComputeType::F32);
}
