// Optimizers and gradient clipping over an nn::ParamStore's flat buffers.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "nn/params.h"

namespace tfm {

// torch.optim.Adam / AdamW (decoupled weight decay), PyTorch's single-tensor update:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// With decoupled_weight_decay (AdamW) p *= 1 - lr * weight_decay first; otherwise g += weight_decay * p (Adam).
struct AdamOptions {
  float lr = 0.001f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool decoupled_weight_decay = false;
};

class Adam {
 public:
  Adam(int64_t num_params, AdamOptions options) : opt_(options), m_(num_params, 0.0f), v_(num_params, 0.0f) {}
  // One update of params.data with params.grad at learning rate lr (the schedule's current value).
  // grad_scale multiplies every gradient as it is read (global-norm clipping fused into the update: the result
  // equals scaling the gradients first, bit for bit).
  void step(nn::ParamStore& params, float lr, float grad_scale = 1.0f);
  void step(nn::ParamStore& params) { step(params, opt_.lr); }
  // Per-parameter weight decay: decay[i] false exempts entry i of the store (Hugging Face Trainer's parameter
  // groups: no decay on biases and LayerNorm weights). Empty (the default): weight_decay applies to every entry.
  void set_decay(std::vector<bool> decay) { decay_ = std::move(decay); }
  int64_t steps() const { return t_; }
  AdamOptions& options() { return opt_; }
  // State for checkpoints: first and second moments and the step count.
  std::vector<float>& exp_avg() { return m_; }
  std::vector<float>& exp_avg_sq() { return v_; }
  void set_steps(int64_t t) { t_ = t; }

 private:
  AdamOptions opt_;
  std::vector<float> m_, v_;
  std::vector<bool> decay_;
  int64_t t_ = 0;
};

// d2l grad_clipping: norm = sqrt(sum g^2) over all parameters; if norm > theta, g *= theta / norm.
// Returns the norm before clipping (NaN/Inf when a gradient is not finite).
double clip_grad_norm(nn::ParamStore& params, double theta);
// The global norm sqrt(sum g^2) alone, and the factor clipping to theta applies (1 when norm <= theta), for
// Adam::step's grad_scale.
double grad_norm(const nn::ParamStore& params);
inline float clip_scale(double norm, double theta) { return norm > theta ? (float)(theta / norm) : 1.0f; }

}  // namespace tfm
