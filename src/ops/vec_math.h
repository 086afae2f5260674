// Branch-free float approximations of exp, erf and tanh that GCC auto-vectorises (AVX2) inside loops.
// std::exp / std::erf do not vectorise without -ffast-math, and they dominate softmax and GELU time.
// Accuracy: exp within 2 ulp on [-87, 88]; erf within 3e-7 absolute; tanh within 3e-7 absolute.
#pragma once
#include <bit>
#include <cstdint>

namespace tfm::vm {

inline float fast_exp(float x_in) {
  float x = x_in < -87.3f ? -87.3f : (x_in > 88.3f ? 88.3f : x_in);
  // x = n ln2 + r, |r| <= ln2/2; round-to-nearest by the 1.5*2^23 trick (branch-free, vectorisable).
  const float shifter = 12582912.0f;
  float n = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  // Minimax polynomial for exp(r) on [-ln2/2, ln2/2] (Cephes expf).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = (int32_t)n + 127;
  e = e < 1 ? 1 : e;  // keep 2^n a normal number; exp(-87.3) is ~1e-38, still normal
  float y = p * std::bit_cast<float>(e << 23);
  return x_in < -87.3f ? 0.0f : y;  // underflow to 0 as expf does (no denormals)
}

// erf by Abramowitz & Stegun 7.1.26: 1 - t (a1 + a2 t + ... + a5 t^4) exp(-x^2), t = 1 / (1 + p |x|), absolute
// error <= 1.5e-7 (the form of PyTorch's vectorised erf). gauss receives exp(-x^2), which GELU's derivative
// reuses (its normal density at sqrt(2) x), so value and derivative cost one exp.
inline float fast_erf(float x, float& gauss) {
  const float z = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * z);
  const float poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  gauss = fast_exp(-z * z);
  const float r = 1.0f - poly * gauss;
  return x < 0 ? -r : r;
}
inline float fast_erf(float x) {
  float gauss;
  return fast_erf(x, gauss);
}

inline float fast_tanh(float x) {
  float ax = x < 0 ? -x : x;
  // For small |x| the exp form loses digits; use the odd Taylor series there.
  float e = fast_exp(-2.0f * ax);
  float big = (1.0f - e) / (1.0f + e);
  float x2 = ax * ax;
  float small = ax * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
  float r = ax < 0.0625f ? small : big;
  return x < 0 ? -r : r;
}

}  // namespace tfm::vm
