// Softmax, log-softmax and log-sum-exp over one row x[n] (torch.softmax / torch.log_softmax / torch.logsumexp
// along the last dimension), max-shifted: the one implementation that scores, decoding, sampling, pooling heads
// and evaluation losses call (attention and cross-entropy keep their fused kernels in their own files).
//
// Two precisions, each with one fixed order of arithmetic so that its callers' results do not change:
//   exact: exp in double of (double)x[v] - max, the sum in double in index order, each output rounded to float
//          once. Used where a row is short (labels, scores) or its probabilities are compared (sampling, top-p).
//   fast:  exp in float by vm::fast_exp (within 2 ulp) of x[v] - max, the sum in double over the simd lanes: as
//          exact as the float logits, vectorised; beam search's per-step normaliser over 10^4-10^5 words.
// max is the first largest of x in index order (`<` comparisons, as std::max_element); x holding a NaN is not
// defined here beyond "no crash".
#pragma once
#include <cstdint>

namespace tfm::ops {

// ---- exact (double) ----
// log(sum_v exp(x[v])) = max + log(sum_v exp(x[v] - max)). A row whose max is not finite (all -inf, e.g. every
// token banned) returns that max (-inf: log 0; +inf).
double logsumexp(const float* x, int64_t n);
// x[v] = (float)((double)x[v] - logsumexp(x)), in place. A row whose max is not finite is left unchanged.
void log_softmax(float* x, int64_t n);
// y[v] = (float)(exp(x[v] - max) / sum); y may be x.
void softmax(const float* x, int64_t n, float* y);
// The unnormalised softmax: e[v] = exp((double)x[v] - max) (e [n] double, written); returns their sum in index
// order (the normaliser: e[v] / sum is the probability).
double softmax_exp(const float* x, int64_t n, double* e);

// ---- fast (vm::fast_exp) ----
// max + log(sum_v fast_exp(x[v] - max)) with the row's max given (the caller has it already).
double logsumexp_fast(const float* x, int64_t n, float max);
// x[v] -= (float)logsumexp_fast(x, n, max(x)), in place.
void log_softmax_fast(float* x, int64_t n);

// ---- reference ----
// log_softmax(x) in long double with std::exp / std::log, written to y [n] (tests hold the two kinds above to it).
void log_softmax_ref(const float* x, int64_t n, long double* y);

}  // namespace tfm::ops
