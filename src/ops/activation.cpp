#include "ops/activation.h"

#include <cmath>
#include <stdexcept>

#include "ops/activation_impl.h"
#include "ops/isa.h"
#include "ops/vec_math.h"

namespace tfm::ops {

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::Gelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::GeluTanh;
  if (name == "relu") return Activation::Relu;
  if (name == "silu" || name == "swish") return Activation::Silu;
  throw std::invalid_argument("unsupported activation '" + name +
                              "' (expected gelu, gelu_new, gelu_pytorch_tanh, relu, silu or swish)");
}

namespace {
using detail::act_impl;
using detail::kInvSqrt2;
using detail::kSqrt2OverPi;

void act_avx2(float* out, const float* inp, int64_t i0, int64_t i1, Activation act) {
  act_impl(out, inp, i0, i1, act);
}
TFM_TARGET_AVX512 void act_avx512(float* out, const float* inp, int64_t i0, int64_t i1, Activation act) {
  act_impl(out, inp, i0, i1, act);
}

void act_backward_avx2(float* dinp, const float* dout, const float* inp, int64_t i0, int64_t i1, Activation act) {
  detail::act_backward_impl(dinp, dout, inp, i0, i1, act);
}
TFM_TARGET_AVX512 void act_backward_avx512(float* dinp, const float* dout, const float* inp, int64_t i0, int64_t i1,
                                           Activation act) {
  detail::act_backward_impl(dinp, dout, inp, i0, i1, act);
}

void act_value_deriv_avx2(float* value, float* deriv, const float* inp, int64_t i0, int64_t i1, Activation act) {
  detail::act_value_deriv_impl(value, deriv, inp, i0, i1, act);
}
TFM_TARGET_AVX512 void act_value_deriv_avx512(float* value, float* deriv, const float* inp, int64_t i0, int64_t i1,
                                              Activation act) {
  detail::act_value_deriv_impl(value, deriv, inp, i0, i1, act);
}

// range(i0, i1) over [0, n): on the calling thread up to 65536 elements, else in chunks of 16384 over the threads.
template <class Range>
void over_chunks(int64_t n, const Range& range) {
  if (n <= 65536) {
    range(0, n);
    return;
  }
  const int64_t chunk = 16384;
#pragma omp parallel for schedule(static)
  for (int64_t i0 = 0; i0 < n; i0 += chunk) range(i0, i0 + chunk < n ? i0 + chunk : n);
}

}  // namespace

void activation_value_and_derivative(float* value, float* deriv, const float* inp, int64_t n, Activation act) {
  auto fn = kernel_isa() == KernelIsa::Avx512 ? act_value_deriv_avx512 : act_value_deriv_avx2;
  over_chunks(n, [&](int64_t i0, int64_t i1) { fn(value, deriv, inp, i0, i1, act); });
}

void activation_forward(float* out, const float* inp, int64_t n, Activation act) {
  auto fn = kernel_isa() == KernelIsa::Avx512 ? act_avx512 : act_avx2;
  over_chunks(n, [&](int64_t i0, int64_t i1) { fn(out, inp, i0, i1, act); });
}

void activation_backward(float* dinp, const float* dout, const float* inp, int64_t n, Activation act) {
  auto fn = kernel_isa() == KernelIsa::Avx512 ? act_backward_avx512 : act_backward_avx2;
  over_chunks(n, [&](int64_t i0, int64_t i1) { fn(dinp, dout, inp, i0, i1, act); });
}

namespace {
// fn(value-like outputs at column offset c0 of row n, biased inputs buf[0, len)) over [N, C] in row chunks of at
// most kBiasChunk columns: inp + bias into a stack buffer, then the unbiased kernel on it (the same bits as
// adding the bias first). Rows on the threads as over_chunks does for elements.
constexpr int64_t kBiasChunk = 512;
template <class Fn>
void over_biased_rows(const float* inp, const float* bias, int64_t N, int64_t C, const Fn& fn) {
  auto rows = [&](int64_t r0, int64_t r1) {
    alignas(64) float buf[kBiasChunk];
    for (int64_t n = r0; n < r1; ++n)
      for (int64_t c0 = 0; c0 < C; c0 += kBiasChunk) {
        const int64_t len = C - c0 < kBiasChunk ? C - c0 : kBiasChunk;
        const float* x = inp + n * C + c0;
        const float* b = bias + c0;
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) buf[j] = x[j] + b[j];
        fn(n * C + c0, buf, len);
      }
  };
  if (N * C <= 65536 || N < 2) {
    rows(0, N);
    return;
  }
  const int64_t grain = (16384 + C - 1) / C;  // rows per chunk: about over_chunks' 16,384 elements
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < N; r0 += grain) rows(r0, r0 + grain < N ? r0 + grain : N);
}
}  // namespace

void activation_forward_bias(float* out, const float* inp, const float* bias, int64_t N, int64_t C, Activation act) {
  if (!bias) return activation_forward(out, inp, N * C, act);
  auto fn = kernel_isa() == KernelIsa::Avx512 ? act_avx512 : act_avx2;
  over_biased_rows(inp, bias, N, C, [&](int64_t off, const float* x, int64_t len) { fn(out + off, x, 0, len, act); });
}

void activation_value_and_derivative_bias(float* value, float* deriv, const float* inp, const float* bias, int64_t N,
                                          int64_t C, Activation act) {
  if (!bias) return activation_value_and_derivative(value, deriv, inp, N * C, act);
  auto fn = kernel_isa() == KernelIsa::Avx512 ? act_value_deriv_avx512 : act_value_deriv_avx2;
  over_biased_rows(inp, bias, N, C,
                   [&](int64_t off, const float* x, int64_t len) { fn(value + off, deriv + off, x, 0, len, act); });
}

void activation_backward_ref(float* dinp, const float* dout, const float* inp, int64_t n, Activation act) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i], g = dout[i];
    double d = 0;
    switch (act) {
      case Activation::Gelu:
        d = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
        break;
      case Activation::GeluTanh: {
        const double t = std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x));
        d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
        break;
      }
      case Activation::Relu: d = x > 0 ? 1.0 : 0.0; break;
      case Activation::Silu: {
        const double s = 1.0 / (1.0 + std::exp(-x));
        d = s * (1.0 + x * (1.0 - s));
        break;
      }
    }
    dinp[i] = (float)(g * d);
  }
}

void glu_forward(float* gated, const float* inter, int64_t N, int64_t I, Activation act) {
#pragma omp parallel for if (N * I > 65536)
  for (int64_t n = 0; n < N; ++n) {
    float* g = gated + n * I;
    const float* in = inter + n * 2 * I;
    activation_forward(g, in, I, act);
    for (int64_t i = 0; i < I; ++i) g[i] *= in[I + i];
  }
}

void glu_backward(float* dinter, const float* dgated, const float* inter, int64_t N, int64_t I, Activation act) {
#pragma omp parallel for if (N * I > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const float* in = inter + n * 2 * I;
    const float* dg = dgated + n * I;
    float* d = dinter + n * 2 * I;
    for (int64_t i = 0; i < I; ++i) d[i] = dg[i] * in[I + i];  // d act(input)
    activation_backward(d, d, in, I, act);
    activation_forward(d + I, in, I, act);  // d gate = dgated * act(input)
    for (int64_t i = 0; i < I; ++i) d[I + i] *= dg[i];
  }
}

void activation_forward_ref(float* out, const float* inp, int64_t n, Activation act) {
  for (int64_t i = 0; i < n; ++i) {
    double x = inp[i];
    switch (act) {
      case Activation::Gelu: out[i] = (float)(0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)))); break;
      case Activation::GeluTanh:
        out[i] = (float)(0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))));
        break;
      case Activation::Relu: out[i] = (float)(x < 0 ? 0 : x); break;
      case Activation::Silu: out[i] = (float)(x / (1.0 + std::exp(-x))); break;
    }
  }
}

void tanh_forward(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = vm::fast_tanh(inp[i]);
}

void sigmoid_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-inp[i]));
}

}  // namespace tfm::ops
