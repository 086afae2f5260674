#include "ops/softmax.h"

#include <cmath>

#include "ops/vec_math.h"

namespace tfm::ops {

namespace {
float row_max(const float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t v = 0; v < n; ++v) mx = x[v] > mx ? x[v] : mx;
  return mx;
}
// sum_v exp((double)x[v] - mx) in index order.
double exp_sum(const float* x, int64_t n, float mx) {
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) sum += std::exp((double)x[v] - mx);
  return sum;
}
}  // namespace

double logsumexp(const float* x, int64_t n) {
  const float mx = row_max(x, n);
  if (!std::isfinite(mx)) return mx;
  return (double)mx + std::log(exp_sum(x, n, mx));
}

void log_softmax(float* x, int64_t n) {
  const float mx = row_max(x, n);
  if (!std::isfinite(mx)) return;  // all -inf: nothing to normalise
  const double lse = (double)mx + std::log(exp_sum(x, n, mx));
  for (int64_t v = 0; v < n; ++v) x[v] = (float)((double)x[v] - lse);
}

void softmax(const float* x, int64_t n, float* y) {
  const float mx = row_max(x, n);
  const double sum = exp_sum(x, n, mx);
  for (int64_t v = 0; v < n; ++v) y[v] = (float)(std::exp((double)x[v] - mx) / sum);
}

double softmax_exp(const float* x, int64_t n, double* e) {
  const float mx = row_max(x, n);
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) sum += e[v] = std::exp((double)x[v] - mx);
  return sum;
}

double logsumexp_fast(const float* x, int64_t n, float max) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t v = 0; v < n; ++v) sum += (double)vm::fast_exp(x[v] - max);
  return (double)max + std::log(sum);
}

void log_softmax_fast(float* x, int64_t n) {
  const float lse = (float)logsumexp_fast(x, n, row_max(x, n));
#pragma omp simd
  for (int64_t v = 0; v < n; ++v) x[v] -= lse;
}

void log_softmax_ref(const float* x, int64_t n, long double* y) {
  long double mx = -INFINITY;
  for (int64_t v = 0; v < n; ++v) mx = std::fmax(mx, (long double)x[v]);
  long double sum = 0;
  for (int64_t v = 0; v < n; ++v) sum += std::exp((long double)x[v] - mx);
  const long double lse = mx + std::log(sum);
  for (int64_t v = 0; v < n; ++v) y[v] = (long double)x[v] - lse;
}

}  // namespace tfm::ops
