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
// dinp[n] = dout[n] * act'(inp[n]) (written; in place on dout or inp allowed): the derivative of
// activation_forward's function (torch's GELU / tanh-GELU / ReLU / SiLU backward), vectorised per ISA
// (ops/isa.h, vm::fast_erf / fast_exp / fast_tanh) and run on the OpenMP threads above 65,536 elements.
void activation_backward(float* dinp, const float* dout, const float* inp, int64_t n, Activation act);
// Both in one pass, their erf / exp / tanh evaluated once: value[n] = act(inp[n]) as activation_forward writes it,
// and deriv[n] = act'(inp[n]), the factor activation_backward multiplies dout by (a training backward that needs
// both: the activation's output for the next product's weight gradient, and its derivative). deriv may alias inp
// (in place); value may not alias either. Threads as activation_forward.
void activation_value_and_derivative(float* value, float* deriv, const float* inp, int64_t n, Activation act);
// The same two with a per-column bias added to the input first, for a product whose bias was left out (a
// training FFN keeps h = x W^T without it): inp [N, C], bias [C] (null: none); the activation is of
// inp[n, c] + bias[c] (those functions of the biased values, up to the rounding by which their vector body and
// scalar tail may differ; the two bias variants write the same value bits, as the two above do). out / value
// [N, C] written; deriv may alias inp. inp itself is not changed (unless deriv aliases it).
void activation_forward_bias(float* out, const float* inp, const float* bias, int64_t N, int64_t C, Activation act);
void activation_value_and_derivative_bias(float* value, float* deriv, const float* inp, const float* bias, int64_t N,
                                          int64_t C, Activation act);
// Gated linear unit with activation `act` (Shazeer 2020, "GLU variants"; ModernBertMLP: input, gate =
// Wi(x).chunk(2, dim=-1), act(input) * gate): inter [N, 2I] holds the input half in columns [0, I) and the gate
// half in [I, 2I); gated [N, I] = act(inter[:, :I]) * inter[:, I:], written.
void glu_forward(float* gated, const float* inter, int64_t N, int64_t I, Activation act);
// Backward of glu_forward: dinter [N, 2I] written, dinter[:, :I] = dgated * gate * act'(input),
// dinter[:, I:] = dgated * act(input).
void glu_backward(float* dinter, const float* dgated, const float* inter, int64_t N, int64_t I, Activation act);
void activation_forward_ref(float* out, const float* inp, int64_t n, Activation act);
// activation_backward in double precision with std::erf / exp / tanh (the tests' reference).
void activation_backward_ref(float* dinp, const float* dout, const float* inp, int64_t n, Activation act);
// out[n] = tanh(inp[n]) (BERT pooler)
void tanh_forward(float* out, const float* inp, int64_t n);
// out[n] = 1 / (1 + exp(-inp[n])) with the float std::exp (torch.sigmoid; scores and Dense modules, not a hot
// loop). out may be inp.
void sigmoid_forward(float* out, const float* inp, int64_t n);

}  // namespace tfm::ops
