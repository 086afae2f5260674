// Mixed-precision training ("precision": "bf16", issue 12 part 3): the bf16 GEMM against a double-precision
// product of bf16-rounded operands, a small model's bf16 loss curve against its fp32 curve, and bad values refused.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/rng.h"
#include "models/seq2seq.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "run_tfm.h"
#include "test_util.h"
#include "train/optim.h"
#include "train/recipe.h"

using namespace tfm;

namespace {
std::vector<float> randn(int64_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.normal();
  return v;
}
// Round to nearest even bf16, written independently of the code under test: the nearer of the two bf16
// neighbours of x (finite, normal), ties to the one with an even last bit.
float rne_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x), lo = u & 0xffff0000u, hi = lo + 0x10000u;
  const float flo = std::bit_cast<float>(lo), fhi = std::bit_cast<float>(hi);
  const double dlo = std::fabs((double)x - flo), dhi = std::fabs((double)fhi - x);
  if (dlo != dhi) return dlo < dhi ? flo : fhi;
  return ((lo >> 16) & 1u) ? fhi : flo;
}
}  // namespace

TEST(TrainPrecision, RoundingIsToNearestEven) {
  std::vector<float> x = randn(10000, 5);
  x.push_back(1.0f + 1.0f / 256);  // a tie: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; even is 1
  x.push_back(1.0f + 3.0f / 256);  // a tie rounding up to the even 1 + 2^-6
  for (float v : x) ASSERT_EQ(ops::round_to_bf16(v), rne_bf16(v)) << v;
  EXPECT_EQ(ops::round_to_bf16(1.0f + 1.0f / 256), 1.0f);
  EXPECT_EQ(ops::round_to_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(ops::round_to_bf16(NAN)));
}

// Every transpose combination, a row stride wider than N, alpha and beta: gemm_bf16 equals the exact product of
// the bf16-rounded operands (only fp32 accumulation error remains: K = 300 terms of size ~1 give ~1e-5), and
// differs from the fp32 product by the bf16 rounding (relative 2^-9 per operand), so the rounding really happens.
TEST(TrainPrecision, Bf16GemmIsTheProductOfRoundedOperands) {
  if (!ops::bf16_gemm_available()) GTEST_SKIP() << "no bf16 instructions on this CPU (" << ops::cpu_isa_name() << ")";
  const int64_t M = 37, N = 45, K = 300, ldc = N + 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1;
      std::vector<float> A = randn((ta ? K : M) * lda, 1), B = randn((tb ? N : K) * ldb, 2);
      std::vector<float> C0 = randn(M * ldc, 3);
      std::vector<float> Ar(A), Br(B);
      for (auto& x : Ar) x = rne_bf16(x);
      for (auto& x : Br) x = rne_bf16(x);
      std::vector<float> got(C0), want(C0), fp32(C0);
      ops::gemm_bf16(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, got.data(), ldc);
      ops::gemm_ref(ta, tb, M, N, K, 0.5f, Ar.data(), lda, Br.data(), ldb, 1.0f, want.data(), ldc);
      ops::gemm_ref(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, fp32.data(), ldc);
      double err = 0, diff_fp32 = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          err = std::max(err, (double)std::fabs(got[i * ldc + j] - want[i * ldc + j]));
          diff_fp32 = std::max(diff_fp32, (double)std::fabs(got[i * ldc + j] - fp32[i * ldc + j]));
        }
      EXPECT_LT(err, 1e-3) << "trans_a " << ta << " trans_b " << tb;
      EXPECT_GT(diff_fp32, 1e-2) << "the operands were not rounded to bf16";
      for (int64_t i = 0; i < M; ++i)  // padding columns of C untouched
        for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(got[i * ldc + j], C0[i * ldc + j]);
      // beta = 0 ignores C (NaN-safe)
      std::vector<float> nan_c(M * ldc, NAN);
      ops::gemm_bf16(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, nan_c.data(), ldc);
      EXPECT_TRUE(std::isfinite(nan_c[0]) && std::isfinite(nan_c[(M - 1) * ldc + N - 1]));
    }
}

// A small d2l-shaped model trained 60 Adam steps on one batch from the same initial weights, in fp32 and in bf16.
// Tolerance: bf16 keeps 8 significant bits, so each product's operands carry a relative rounding error of up to
// 2^-9 (0.2%); the accumulated products err by well under 1%, and the loss, an average over 160 tokens of
// functions of them, moves by less. Over training the two runs drift apart like two seeds of floating-point
// noise, not systematically: we allow 3% of the initial loss at every step (measured here: 1.1%, 0.045 of
// 4.14, with the final losses 0.717 and 0.718), and require
// that both runs learn (final loss below 25% of the initial) and that the curves are not bit-identical (the bf16
// path is really taken).
TEST(TrainPrecision, Bf16LossCurveStaysCloseToFp32) {
  if (!ops::bf16_gemm_available()) GTEST_SKIP() << "no bf16 instructions on this CPU (" << ops::cpu_isa_name() << ")";
  Seq2SeqConfig c;
  c.num_hiddens = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.ffn_num_hiddens = 64;
  c.dropout = 0.0;
  c.num_steps = 10;
  c.src_vocab_size = 40;
  c.tgt_vocab_size = 40;
  c.decode_positions = "absolute";
  const int64_t B = 16, L = 10;
  Rng data(7);
  std::vector<int64_t> src(B * L), dec(B * L), lab(B * L), svl(B), tvl(B);
  for (int64_t b = 0; b < B; ++b) {
    svl[b] = 4 + (int64_t)data.below(L - 3);
    tvl[b] = 4 + (int64_t)data.below(L - 3);
    for (int64_t t = 0; t < L; ++t) {
      src[b * L + t] = 3 + (int64_t)data.below(37);
      lab[b * L + t] = 3 + (int64_t)data.below(37);
    }
    dec[b * L] = 1;
    for (int64_t t = 1; t < L; ++t) dec[b * L + t] = lab[b * L + t - 1];
  }
  Seq2SeqBatch batch{src.data(), svl.data(), dec.data(), lab.data(), tvl.data(), B, L, L};
  auto curve = [&](ops::ComputeType ct) {
    Seq2SeqModel model(c);
    Rng init(3);
    model.init(init);
    model.set_precision(ct);
    EXPECT_EQ(model.precision(), ct);
    Adam adam(model.params().total(), AdamOptions{0.005f});
    std::vector<double> losses;
    for (int step = 0; step < 60; ++step) {
      model.params().zero_grad();
      LossResult r = model.forward_backward(batch, nullptr, 0.1f, /*token_mean=*/true);
      losses.push_back(r.loss_sum);
      clip_grad_norm(model.params(), 1.0);
      adam.step(model.params());
    }
    return losses;
  };
  std::vector<double> f32 = curve(ops::ComputeType::F32), bf16 = curve(ops::ComputeType::BF16);
  double worst = 0;
  bool identical = true;
  for (size_t i = 0; i < f32.size(); ++i) {
    worst = std::max(worst, std::fabs(bf16[i] - f32[i]));
    identical = identical && bf16[i] == f32[i];
  }
  std::printf("bf16 vs fp32: largest loss gap %.4g over 60 steps (initial loss %.4g, final %.4g / %.4g)\n", worst, f32[0],
              f32.back(), bf16.back());
  EXPECT_LT(worst, 0.03 * f32[0]) << "largest gap " << worst << " with initial loss " << f32[0];
  EXPECT_LT(f32.back(), 0.25 * f32[0]);
  EXPECT_LT(bf16.back(), 0.25 * f32[0]);
  EXPECT_FALSE(identical) << "bf16 training gave the fp32 losses bit for bit: the bf16 GEMM was not used";
  EXPECT_THROW(Seq2SeqModel(c).set_precision(ops::ComputeType::I8), std::invalid_argument);
}

TEST(TrainPrecision, BadPrecisionIsRefused) {
  try {
    RecipeConfig::from_json(nlohmann::json{{"precision", "fp16"}}, "c.json");
    FAIL() << "precision fp16 accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "c.json: key 'precision' must be 'fp32' or 'bf16', found 'fp16'");
  }
  EXPECT_THROW(RecipeConfig::from_json(nlohmann::json{{"precision", 16}}, "c.json"), std::runtime_error);
  EXPECT_EQ(RecipeConfig::from_json(nlohmann::json{{"precision", "bf16"}}, "c.json").precision, "bf16");
  EXPECT_EQ(RecipeConfig::from_json(nlohmann::json::object(), "c.json").precision, "fp32");
  test::TempFolder dir;
  test::TfmRun r = test::run_tfm_in(dir.path, {"train", "--config", test::source_dir() + "/configs/multi30k-en-fr.json",
                                               "--out", dir.path + "/run", "--set", "precision=half"});
  test::expect_one_line_error(r, "'precision' must be 'fp32' or 'bf16', found 'half'");
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/run"));
}

// On a CPU without bf16 instructions (simulated by capping oneDNN's ISA at AVX2) a bf16 run is refused before it
// writes anything, with one line naming the ISA.
TEST(TrainPrecision, Bf16IsRefusedWithoutBf16Instructions) {
  (void)ops::has_bf16_gemm();  // this process has read its own ISA before the variable is set for the child
  test::TempFolder dir;
  test::TfmRun r;
  {
    test::EnvScope dnnl("DNNL_MAX_CPU_ISA", "AVX2"), onednn("ONEDNN_MAX_CPU_ISA", "AVX2");
    test::EnvScope native("TFM_EMULATE_BF16", nullptr);  // the suite's emulation off: the refusal is the point
    r = test::run_tfm_in(dir.path, {"train", "--config", test::source_dir() + "/configs/multi30k-en-fr.json", "--out",
                                    dir.path + "/run", "--set", "precision=bf16"});
  }
  test::expect_one_line_error(r, "precision 'bf16' needs a CPU with bf16 instructions");
  EXPECT_NE(r.err.find("avx2"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/run"));
}
