#include "train/optim.h"

#include <cmath>

namespace tfm {

void Adam::step(ParamTable& params, float lr) {
  ++t_;
  const float b1 = opt_.beta1, b2 = opt_.beta2;
  const float bc1 = 1.0f - std::pow(b1, (float)t_);
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(b2, (float)t_));
  const float step_size = lr / bc1;
  float* p = params.all_data().data();
  const float* g = params.all_grad().data();
  const int64_t n = params.total();
  const float wd = opt_.weight_decay;
  const bool decoupled = opt_.decoupled_weight_decay;
#pragma omp parallel for simd if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    if (wd != 0.0f) {
      if (decoupled)
        p[i] *= 1.0f - lr * wd;
      else
        gi += wd * p[i];
    }
    m_[i] = m_[i] * b1 + (1.0f - b1) * gi;
    v_[i] = v_[i] * b2 + (1.0f - b2) * gi * gi;
    float denom = std::sqrt(v_[i]) / bc2_sqrt + opt_.eps;
    p[i] -= step_size * m_[i] / denom;
  }
}

double clip_grad_norm(ParamTable& params, double theta) {
  std::vector<float>& g = params.all_grad();
  double sq = 0.0;
  for (float x : g) sq += (double)x * x;
  double norm = std::sqrt(sq);
  if (norm > theta) {
    float s = (float)(theta / norm);
    for (float& x : g) x *= s;
  }
  return norm;
}

}  // namespace tfm
