// int8 and bf16 products on CPUs without VNNI / AVX512_BF16 / AMX, tested on every CPU: this test binary runs its
// own reduced-precision tests again in a child process with oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, read
// by oneDNN at start-up: its AVX2 kernels, as on Zen 3 or Haswell, which sum u8 x s8 pairs in saturating int16),
// so their quantisation, rounding and epilogue logic is checked on that path wherever the suite runs:
//   - int8: 7-bit weights (ops::int8_weight_max() 63), stored 8-bit weights requantised at load;
//   - bf16: the emulated bf16 arithmetic (TFM_EMULATE_BF16=1), and with the emulation off, the fp32 fallback.
// The DISABLED_ tests below run only in such a child (--gtest_also_run_disabled_tests).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "run_tfm.h"
#include "test_util.h"

using namespace tfm::ops;

namespace {

std::string self_binary() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, (size_t)n) : std::string();
}

// Runs the tests matching `filter` in a child of this binary under `env`; expects every one to pass and none to be
// skipped except those matching `may_skip` (a regex on the test name). Returns how many ran.
int run_child(const std::string& filter, const std::vector<std::string>& env, const std::string& may_skip = "") {
  tfm::test::TempFolder dir;
  tfm::test::RunOptions o;
  o.binary = self_binary();
  o.env = env;
  const tfm::test::TfmRun r = tfm::test::run_tfm_with(
      dir.path, {"--gtest_also_run_disabled_tests", "--gtest_filter=" + filter, "--gtest_brief=0"}, "", o);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.signal, 0);
  const std::regex skipped(R"(\[  SKIPPED \] ([A-Za-z0-9_]+\.[A-Za-z0-9_/]+))");
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), skipped), end; it != end; ++it) {
    const std::string name = (*it)[1];
    if (may_skip.empty() || !std::regex_search(name, std::regex(may_skip)))
      ADD_FAILURE() << name << " was skipped under " << ::testing::PrintToString(env) << "\n" << r.out.substr(0, 8000);
  }
  std::smatch m;
  const std::regex passed(R"(\[  PASSED  \] (\d+) test)");
  return std::regex_search(r.out, m, passed) ? std::atoi(m[1].str().c_str()) : 0;
}

}  // namespace

// Every int8 and bf16 test of the Linear, of the fused producers and of the golden models, on oneDNN's AVX2
// kernels: int8 with 7-bit weights (the models' token cosines >= 0.999 to fp32), bf16 emulated.
TEST(Int8WithoutVnni, ReducedPrecisionTestsPassOnTheAvx2Kernels) {
  const int ran = run_child(
      "Int8Linear.*:Bf16Linear.*:PackedLinear.*:Dtypes.*:NnBlock.FusedQuantisation*:"
      "Int8WithoutVnniChild.*",
      {"ONEDNN_MAX_CPU_ISA=AVX2", "TFM_EMULATE_BF16=1"},
      // The fp32 fallback is tested by the next test (with the emulation off).
      "WithoutBf16InstructionsBf16WeightsMultiplyInFp32");
  EXPECT_GE(ran, 20);
}

// The same on oneDNN's AVX-512 kernels without VNNI (Skylake-SP, Cascade Lake's predecessors), where this CPU has
// AVX-512.
TEST(Int8WithoutVnni, Int8TestsPassOnTheAvx512KernelsWithoutVnni) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU (the AVX2 run above covers it)";
  const int ran = run_child("Int8Linear.*:PackedLinear.*Int8*:Dtypes.Golden*:Int8WithoutVnniChild.*",
                            {"ONEDNN_MAX_CPU_ISA=AVX512_CORE", "TFM_EMULATE_BF16=1"});
  EXPECT_GE(ran, 5);
}

// bf16 without instructions or emulation: the fp32 product of the bf16 weights.
TEST(Int8WithoutVnni, Bf16FallsBackToFp32WithoutEmulation) {
  EXPECT_EQ(run_child("PackedLinear.WithoutBf16InstructionsBf16WeightsMultiplyInFp32:Int8WithoutVnniChild.*",
                      {"ONEDNN_MAX_CPU_ISA=AVX2", "TFM_EMULATE_BF16=0"}),
            1 + 3);
}

// ---- run in the children above only

// oneDNN capped below VNNI: 7-bit weights, int8 still an int8 product, bf16 not native.
TEST(Int8WithoutVnniChild, DISABLED_SevenBitWeights) {
  EXPECT_EQ(cpu_isa_name().find("vnni"), std::string::npos) << cpu_isa_name();
  EXPECT_EQ(int8_weight_max(), 63);
  EXPECT_TRUE(has_native_product(ComputeType::I8));
  EXPECT_FALSE(has_native_product(ComputeType::BF16));
  PackedLinear lin(std::vector<float>(64 * 32, 0.5f).data(), nullptr, 64, 32, ComputeType::I8);
  EXPECT_EQ(lin.compute_type(), ComputeType::I8);
}

// The inputs that saturate vpmaddubsw's int16 pair sums with 8-bit weights: every activation at +-127 (u8 255 or 1
// after oneDNN's +128 shift) against weights at the row maximum. With 7-bit weights the int32 sums are exact, so
// the output is the integer reference times the scales (1e-6 relative); 8-bit weights there gave sums clipped to
// +-32,767 per pair (an error of 99%).
TEST(Int8WithoutVnniChild, DISABLED_SaturatingInputsGiveExactSums) {
  const int64_t N = 4, I = 512, O = 24;
  std::vector<float> w(O * I), x(N * I);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) w[o * I + i] = (o % 2 ? -1.0f : 1.0f) * (i % 5 == 0 ? 1.0f : 0.999f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < I; ++i) x[n * I + i] = (n % 2 ? -2.0f : 2.0f) * ((i + n) % 3 ? 1.0f : -1.0f);
  const int qmax = int8_weight_max();
  std::vector<int8_t> q(O * I);
  std::vector<float> scale(O);
  quantize_weights_s8(q.data(), scale.data(), w.data(), O, I, qmax);
  PackedLinear lin(w.data(), nullptr, I, O, ComputeType::I8);
  std::vector<float> y(N * O);
  lin.forward(y.data(), x.data(), N);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      int64_t acc = 0;  // activations: max |x| = 2 gives scale 2 / 127 and q = +-127
      for (int64_t i = 0; i < I; ++i) acc += (int64_t)(x[n * I + i] > 0 ? 127 : -127) * q[o * I + i];
      const double want = (double)acc * (2.0 / 127.0) * scale[o];
      ASSERT_NEAR(y[n * O + o], want, 1e-5 * std::fabs(want)) << "row " << n << " column " << o;
    }
}

// Weights stored with 8 bits (tfm convert) are requantised to int8_weight_max() at load: from_int8 and lazy parts
// give the product of the dequantised weights quantised again, bit for bit.
TEST(Int8WithoutVnniChild, DISABLED_StoredEightBitWeightsAreRequantised) {
  const int64_t I = 96, P = 16, O = 2 * P, N = 5;
  auto w = tfm::test::random_vec(O * I, 90, -0.05f, 0.05f), b = tfm::test::random_vec(O, 91),
       x = tfm::test::random_vec(N * I, 92);
  std::vector<int8_t> q(O * I);
  std::vector<float> scale(O), widened(O * I);
  quantize_weights_s8(q.data(), scale.data(), w.data(), O, I, 127);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) widened[o * I + i] = (float)q[o * I + i] * scale[o];
  std::vector<float> want(N * O), y(N * O);
  PackedLinear(widened.data(), b.data(), I, O, ComputeType::I8).forward(want.data(), x.data(), N);
  int released = 0;
  PackedLinear stored = PackedLinear::from_int8(q.data(), scale.data(), b.data(), I, O);
  PackedLinear lazy = PackedLinear::lazy({q.data(), q.data() + P * I}, scale.data(), b.data(), I, P, ComputeType::I8,
                                         nullptr, [&released] { ++released; });
  EXPECT_EQ(released, 1) << "requantised parts are let go at once";
  for (const PackedLinear* p : {&stored, &lazy}) {
    EXPECT_EQ(p->compute_type(), ComputeType::I8);
    p->forward(y.data(), x.data(), N);
    EXPECT_EQ(y, want);
  }
}
