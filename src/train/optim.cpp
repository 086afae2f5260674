#include "train/optim.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/threading.h"

namespace tfm {

void Adam::step(nn::ParamStore& params, float lr, float grad_scale) {
  ++t_;
  const float b1 = opt_.beta1, b2 = opt_.beta2;
  const float bc1 = 1.0f - std::pow(b1, (float)t_);
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(b2, (float)t_));
  const float step_size = lr / bc1;
  float* __restrict p = params.all_data().data();
  const float* __restrict g = params.all_grad().data();
  float* __restrict m = m_.data();
  float* __restrict v = v_.data();
  const int64_t n = params.total();
  const float wd = opt_.weight_decay, eps = opt_.eps;
  // Branch-free so the loop vectorises: AdamW decays p first (decay = 1 - lr wd), Adam adds l2 p to the
  // gradient; with weight_decay 0 both factors are exact no-ops (p * 1, g + 0 p).
  const float decay = opt_.decoupled_weight_decay ? 1.0f - lr * wd : 1.0f;
  const float l2 = opt_.decoupled_weight_decay ? 0.0f : wd;
  auto update = [&](int64_t begin, int64_t end, float decay_i, float l2_i) {
#pragma omp parallel for simd schedule(static) if (parallel_worth(end - begin))
    for (int64_t i = begin; i < end; ++i) {
      const float pi = p[i];
      const float gi = g[i] * grad_scale + l2_i * pi;
      const float mi = m[i] * b1 + (1.0f - b1) * gi;
      const float vi = v[i] * b2 + (1.0f - b2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      p[i] = pi * decay_i - step_size * mi / denom;
    }
  };
  if (decay_.empty()) {
    update(0, n, decay, l2);
    return;
  }
  const auto& entries = params.entries();
  if (decay_.size() != entries.size()) throw std::logic_error("Adam::set_decay: one flag per parameter expected");
  for (size_t e = 0; e < entries.size(); ++e)
    update(entries[e].offset, entries[e].offset + entries[e].numel, decay_[e] ? decay : 1.0f, decay_[e] ? l2 : 0.0f);
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
