// Elementwise activations: GELU (exact erf form, torch.nn.functional.gelu), GELU tanh form (HF "gelu_new" /
// "gelu_pytorch_tanh"), ReLU, SiLU (HF "silu" / "swish": x * sigmoid(x), Marian), tanh. Forward may run in place.
#pragma once
#include <cstdint>
#include <string>

namespace tfm::ops {

enum class Activation { Gelu, GeluTanh, Relu, Silu };
// "gelu" -> Gelu, "gelu_new" / "gelu_pytorch_tanh" -> GeluTanh, "relu" -> Relu, "silu" / "swish" -> Silu; throws
// std::invalid_argument.
Activation parse_activation(const std::string& name);

// out[n] = act(inp[n])
void activation_forward(float* out, const float* inp, int64_t n, Activation act);
// dinp[n] = dout[n] * act'(inp[n]) (written)
void activation_backward(float* dinp, const float* dout, const float* inp, int64_t n, Activation act);
void activation_forward_ref(float* out, const float* inp, int64_t n, Activation act);
// out[n] = tanh(inp[n]) (BERT pooler)
void tanh_forward(float* out, const float* inp, int64_t n);

}  // namespace tfm::ops
