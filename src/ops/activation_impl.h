// The forward body of the elementwise activations (ops/activation.h), TFM_ALWAYS_INLINE so that each ISA copy
// that inlines it vectorises it for its target (ops/isa.h): activation_forward and the int8 GEMM epilogue
// (ops/gemm.cpp) share it. Internal to src/ops.
#pragma once
#include <cstdint>

#include "ops/activation.h"
#include "ops/isa.h"
#include "ops/vec_math.h"

namespace tfm::ops::detail {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;

// GELU of one value, x Phi(x) with erf: every forward GELU of the project (act_impl, the int8 FFN-in epilogue).
TFM_ALWAYS_INLINE float gelu_erf(float x) { return 0.5f * x * (1.0f + vm::fast_erf(x * kInvSqrt2)); }

// Elements [i0, i1) of act(inp) into out (in place allowed).
TFM_ALWAYS_INLINE void act_impl(float* out, const float* inp, int64_t i0, int64_t i1, Activation act) {
  switch (act) {
    case Activation::Gelu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) out[i] = gelu_erf(inp[i]);
      break;
    case Activation::GeluTanh:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + vm::fast_tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
      }
      break;
    case Activation::Relu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) out[i] = inp[i] < 0.0f ? 0.0f : inp[i];  // NaN stays NaN, as torch.relu
      break;
    case Activation::Silu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) out[i] = inp[i] / (1.0f + vm::fast_exp(-inp[i]));
      break;
  }
}

// Elements [i0, i1) of dinp = dout * act'(inp) (in place on dout or inp allowed): the derivatives of the
// forward above (GELU: Phi(x) + x phi(x); tanh GELU; ReLU: dout where x > 0; SiLU: s (1 + x (1 - s))).
TFM_ALWAYS_INLINE void act_backward_impl(float* dinp, const float* dout, const float* inp, int64_t i0, int64_t i1,
                                         Activation act) {
  switch (act) {
    case Activation::Gelu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float x = inp[i];
        float gauss;  // exp(-x^2 / 2)
        const float cdf = 0.5f * (1.0f + vm::fast_erf(x * kInvSqrt2, gauss));
        const float pdf = 0.39894228040143268f * gauss;
        dinp[i] = dout[i] * (cdf + x * pdf);
      }
      break;
    case Activation::GeluTanh:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float x = inp[i];
        const float t = vm::fast_tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x));
        const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
      }
      break;
    case Activation::Relu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
      break;
    case Activation::Silu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float x = inp[i];
        const float s = 1.0f / (1.0f + vm::fast_exp(-x));
        dinp[i] = dout[i] * s * (1.0f + x * (1.0f - s));
      }
      break;
  }
}

// Elements [i0, i1) of value = act(inp) (act_impl's expression) and deriv = act'(inp) (act_backward_impl's factor);
// deriv may alias inp.
TFM_ALWAYS_INLINE void act_value_deriv_impl(float* value, float* deriv, const float* inp, int64_t i0, int64_t i1,
                                            Activation act) {
  switch (act) {
    case Activation::Gelu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float x = inp[i];
        float gauss;  // exp(-x^2 / 2)
        const float e = vm::fast_erf(x * kInvSqrt2, gauss);
        value[i] = 0.5f * x * (1.0f + e);
        const float cdf = 0.5f * (1.0f + e);
        const float pdf = 0.39894228040143268f * gauss;
        deriv[i] = cdf + x * pdf;
      }
      break;
    case Activation::GeluTanh:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float x = inp[i];
        const float t = vm::fast_tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x));
        value[i] = 0.5f * x * (1.0f + t);
        const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
        deriv[i] = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
      }
      break;
    case Activation::Relu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float x = inp[i];
        value[i] = x < 0.0f ? 0.0f : x;
        deriv[i] = x > 0.0f ? 1.0f : 0.0f;
      }
      break;
    case Activation::Silu:
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const float x = inp[i];
        value[i] = x / (1.0f + vm::fast_exp(-x));
        const float s = 1.0f / (1.0f + vm::fast_exp(-x));
        deriv[i] = s * (1.0f + x * (1.0f - s));
      }
      break;
  }
}

}  // namespace tfm::ops::detail
