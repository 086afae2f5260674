// Parameter holders for the basic layers, with their inference forward. Training modules (with gradients and
// saved activations) live beside the models that use them.
#pragma once
#include <string>

#include "core/tensor.h"
#include "models/weights.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"

namespace tfm::nn {

// torch.nn.Linear: y = x W^T + b.
struct Linear {
  Tensor weight;  // [out_features, in_features]
  Tensor bias;    // [out_features], or undefined for bias=False
  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }
  // out: [N, out_features], inp: [N, in_features]
  void forward(float* out, const float* inp, int64_t N) const {
    ops::linear_forward(out, inp, weight.f32(), bias.defined() ? bias.f32() : nullptr, N, in_features(),
                        out_features());
  }
  // Reads "<prefix>.weight" (and "<prefix>.bias" when has_bias) from w.
  static Linear load(WeightSource& w, const std::string& prefix, int64_t in, int64_t out, bool has_bias = true) {
    Linear l;
    l.weight = w.get(prefix + ".weight", {out, in});
    if (has_bias) l.bias = w.get(prefix + ".bias", {out});
    return l;
  }
};

// torch.nn.LayerNorm over the last dimension.
struct LayerNorm {
  Tensor weight, bias;  // [normalized_shape]
  float eps = 1e-5f;
  // out, inp: [N, normalized_shape]; in-place allowed.
  void forward(float* out, const float* inp, int64_t N) const {
    ops::layer_norm_forward(out, nullptr, nullptr, inp, weight.f32(), bias.f32(), N, weight.size(0), eps);
  }
  static LayerNorm load(WeightSource& w, const std::string& prefix, int64_t C, float eps) {
    return {w.get(prefix + ".weight", {C}), w.get(prefix + ".bias", {C}), eps};
  }
};

}  // namespace tfm::nn
