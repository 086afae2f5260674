#include "train/optim.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/threading.h"

namespace tfm {

namespace {

struct AdamConstants {
  float grad_scale, beta1, beta2, bc2_sqrt, step_size, eps, decay, l2;
};

// Elements [0, n) of one Adam update. A plain function with restrict pointers: GCC vectorises it outright (the same
// loop in a lambda under `omp parallel for simd` read its pointers through the closure and ran scalar below 2^18
// elements, behind a runtime overlap check). IEEE sqrt and division give the scalar loop's values.
void adam_update(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                 const AdamConstants c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i];
    const float gi = g[i] * c.grad_scale + c.l2 * pi;
    const float mi = m[i] * c.beta1 + (1.0f - c.beta1) * gi;
    const float vi = v[i] * c.beta2 + (1.0f - c.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    p[i] = pi * c.decay - c.step_size * mi / denom;
  }
}

}  // namespace

void Adam::step(nn::ParamStore& params, float lr, float grad_scale) {
  ++t_;
  const float b1 = opt_.beta1, b2 = opt_.beta2;
  const float bc1 = 1.0f - std::pow(b1, (float)t_);
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(b2, (float)t_));
  float* p = params.all_data().data();
  const float* g = params.all_grad().data();
  float* m = m_.data();
  float* v = v_.data();
  const int64_t n = params.total();
  const float wd = opt_.weight_decay;
  // Branch-free so the loop vectorises: AdamW decays p first (decay = 1 - lr wd), Adam adds l2 p to the
  // gradient; with weight_decay 0 both factors are exact no-ops (p * 1, g + 0 p).
  const float decay = opt_.decoupled_weight_decay ? 1.0f - lr * wd : 1.0f;
  const float l2 = opt_.decoupled_weight_decay ? 0.0f : wd;
  const AdamConstants base{grad_scale, b1, b2, bc2_sqrt, lr / bc1, opt_.eps, decay, l2};
  auto update = [&](int64_t begin, int64_t end, bool decays) {
    AdamConstants c = base;
    if (!decays) c.decay = 1.0f, c.l2 = 0.0f;
    const int64_t len = end - begin;
    if (!parallel_worth(len)) {
      adam_update(p + begin, g + begin, m + begin, v + begin, len, c);
      return;
    }
    constexpr int64_t kChunk = 1 << 14;  // elements a task; any split gives the same values (element-wise)
#pragma omp parallel for schedule(static)
    for (int64_t i0 = begin; i0 < end; i0 += kChunk) {
      const int64_t k = std::min(kChunk, end - i0);
      adam_update(p + i0, g + i0, m + i0, v + i0, k, c);
    }
  };
  if (decay_.empty()) {
    update(0, n, true);
    return;
  }
  const auto& entries = params.entries();
  if (decay_.size() != entries.size()) throw std::logic_error("Adam::set_decay: one flag per parameter expected");
  for (size_t e = 0; e < entries.size(); ++e) update(entries[e].offset, entries[e].offset + entries[e].numel, decay_[e]);
}

double grad_norm(const nn::ParamStore& params) {
  const float* g = params.all_grad().data();
  const int64_t n = params.total();
  // Fixed blocks summed on the threads, then the blocks' sums in block order: the same result at every thread
  // count (an OpenMP reduction would combine partial sums in arrival order, which is not reproducible).
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> part(blocks);
#pragma omp parallel for schedule(static) if (parallel_worth(n))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i0 = b * kBlock, i1 = std::min(n, i0 + kBlock);
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = i0; i < i1; ++i) sq += (double)g[i] * g[i];
    part[b] = sq;
  }
  double sq = 0.0;
  for (double p : part) sq += p;
  return std::sqrt(sq);
}

double clip_grad_norm(nn::ParamStore& params, double theta) {
  std::vector<float>& g = params.all_grad();
  double norm = grad_norm(params);
  if (norm > theta) {
    float s = (float)(theta / norm);
    for (float& x : g) x *= s;
  }
  return norm;
}

}  // namespace tfm
