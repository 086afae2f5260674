// Shared state under threads: cached oneDNN primitives run by several threads at once (each with its own
// scratchpad), and the decode profile's counters (atomic adds).
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include "core/profile.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::random_vec;

namespace {

// `threads` threads each run the same product (one cached primitive) `reps` times; every result must equal the
// one a single call gives (bit for bit: same primitive, same data).
void expect_same_under_threads(
    const std::function<void(float*)>& product, int64_t n, int threads = 6, int reps = 20) {
  std::vector<float> want(n);
  product(want.data());
  std::vector<int> bad(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<float> got(n);
      for (int r = 0; r < reps; ++r) {
        product(got.data());
        if (got != want) ++bad[t];
      }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t << ": results differed from one call";
}

}  // namespace

// The matmul products of training (precision bf16) cache one primitive per shape; threads running it at once each
// need their own scratchpad (oneDNN's library-owned one is shared).
TEST(Concurrency, CachedTrainingMatmulsGiveTheSameResultOnEveryThread) {
  const int64_t M = 96, N = 384, K = 768;
  auto a = random_vec(M * K, 71), b = random_vec(N * K, 72);
  if (!ops::bf16_gemm_available()) GTEST_SKIP() << "no bf16 GEMM on this CPU";
  expect_same_under_threads(
      [&](float* c) { ops::gemm_bf16(true, false, M, N, K, 0.5f, a.data(), M, b.data(), N, 0.0f, c, N); }, M * N);
}

// TFM_DECODE_PROFILE=1's totals are added to from every decoding thread: no update may be lost.
TEST(Concurrency, DecodeProfileCountsEveryStepFromEveryThread) {
  decode_profile::Totals totals;
  const int threads = 8, steps = 50000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int s = 0; s < steps; ++s) {
        totals.add_step(3);
        totals.nanoseconds[decode_profile::kSelect].fetch_add(2, std::memory_order_relaxed);
      }
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(totals.steps.load(), (int64_t)threads * steps);
  EXPECT_EQ(totals.rows.load(), 3 * (int64_t)threads * steps);
  EXPECT_EQ(totals.nanoseconds[decode_profile::kSelect].load(), 2 * (int64_t)threads * steps);
  totals.steps = 0;  // nothing to print at destruction
}
