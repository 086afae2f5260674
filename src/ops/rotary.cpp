#include "ops/rotary.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "ops/isa.h"

namespace tfm::ops {
namespace {

// One token row: every head's halves rotated by the position's angles (c, s: [half]).
// sign -1: the transposed rotation (backward).
// rot: the rotated leading dimensions of each head (head_dim unless partial).
TFM_ALWAYS_INLINE void rotate_row(float* x, int64_t num_heads, int64_t head_dim, int64_t rot, const float* c,
                                  const float* s0, float sign) {
  const int64_t half = rot / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* x1 = x + h * head_dim;
    float* x2 = x1 + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      const float s = sign * s0[i];
      x1[i] = a * c[i] - b * s;
      x2[i] = b * c[i] + a * s;
    }
  }
}

void rotate_rows_avx2(float* x, int64_t r0, int64_t r1, int64_t L, int64_t nh, int64_t hd, int64_t rot, int64_t ld,
                      const float* cos, const float* sin, float sign) {
  const int64_t half = rot / 2;
  for (int64_t r = r0; r < r1; ++r)
    rotate_row(x + r * ld, nh, hd, rot, cos + (r % L) * half, sin + (r % L) * half, sign);
}
TFM_TARGET_AVX512 void rotate_rows_avx512(float* x, int64_t r0, int64_t r1, int64_t L, int64_t nh, int64_t hd,
                                          int64_t rot, int64_t ld, const float* cos, const float* sin, float sign) {
  const int64_t half = rot / 2;
  for (int64_t r = r0; r < r1; ++r)
    rotate_row(x + r * ld, nh, hd, rot, cos + (r % L) * half, sin + (r % L) * half, sign);
}

void rotate_rows(float* x, int64_t batch, int64_t seq_len, int64_t num_heads, int64_t head_dim, int64_t ld,
                 const float* cos, const float* sin, float sign, int64_t rot) {
  if (rot == 0) rot = head_dim;
  const int64_t rows = batch * seq_len;
  auto fn = kernel_isa() == KernelIsa::Avx512 ? rotate_rows_avx512 : rotate_rows_avx2;
  constexpr int64_t kChunk = 64;
  const int64_t nchunk = (rows + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (rows * num_heads * head_dim > 65536)
  for (int64_t t = 0; t < nchunk; ++t) {
    const int64_t r0 = t * kChunk, r1 = r0 + kChunk < rows ? r0 + kChunk : rows;
    fn(x, r0, r1, seq_len, num_heads, head_dim, rot, ld, cos, sin, sign);
  }
}

}  // namespace

void rotary_apply(float* x, int64_t batch, int64_t seq_len, int64_t num_heads, int64_t head_dim, int64_t ld,
                  const float* cos, const float* sin, int64_t rotary_dim) {
  rotate_rows(x, batch, seq_len, num_heads, head_dim, ld, cos, sin, 1.0f, rotary_dim);
}

void rotary_backward(float* dx, int64_t batch, int64_t seq_len, int64_t num_heads, int64_t head_dim, int64_t ld,
                     const float* cos, const float* sin, int64_t rotary_dim) {
  rotate_rows(dx, batch, seq_len, num_heads, head_dim, ld, cos, sin, -1.0f, rotary_dim);
}

namespace {
void check_scaling(const RotaryScaling& s) {
  if (s.kind == RotaryScaling::Kind::None) return;
  if (!(s.factor > 0.0)) throw std::invalid_argument("rotary: rope_scaling factor must be positive");
  if (s.kind == RotaryScaling::Kind::Dynamic && s.max_positions <= 0)
    throw std::invalid_argument("rotary: dynamic rope_scaling needs max_position_embeddings > 0");
}
// The scaled base of Dynamic at seq_len (theta unless seq_len > max_positions).
double dynamic_base(double theta, int64_t dim, const RotaryScaling& s, int64_t seq_len) {
  if (s.kind != RotaryScaling::Kind::Dynamic || !s.scales(seq_len)) return theta;
  return theta * std::pow(s.factor * (double)seq_len / (double)s.max_positions - (s.factor - 1.0),
                          (double)dim / (double)(dim - 2));
}
}  // namespace

void rotary_inv_freq(float* inv_freq, int64_t dim, double theta, const RotaryScaling& s, int64_t seq_len) {
  check_scaling(s);
  const int64_t half = dim / 2;
  const bool ntk = s.kind == RotaryScaling::Kind::Ntk, mixed = ntk && s.mixed_b != 0.0;
  // modeling_rope_utils default: inv_freq = 1 / (base ** (arange(0, dim, 2).float() / dim)) in float32.
  const double base = ntk ? (mixed ? theta : theta * s.factor) : dynamic_base(theta, dim, s, seq_len);
  const double a = mixed ? std::log(s.factor) / std::pow((double)half, s.mixed_b) : 0.0;
  for (int64_t i = 0; i < half; ++i) {
    const float e = (float)(2 * i) / (float)dim;
    float f = (float)(1.0 / std::pow(base, (double)e));
    if (ntk && !mixed) f = f / (float)std::pow(s.factor, 2.0 / (double)dim);  // inv_freq / factor ** (2 / dim)
    if (mixed) f = f / (float)std::exp(a * std::pow((double)(i + 1), s.mixed_b));  // inv_freq / lambda_1_m
    inv_freq[i] = f;
  }
}

void rotary_tables_from(float* cos, float* sin, int64_t seq_len, int64_t half, const float* inv_freq) {
  // freqs = position_ids.float() @ inv_freq (one float32 product per entry); cos = freqs.cos().
  for (int64_t p = 0; p < seq_len; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = (float)p * inv_freq[i];
      cos[p * half + i] = (float)std::cos((double)angle);
      sin[p * half + i] = (float)std::sin((double)angle);
    }
}

void rotary_tables(float* cos, float* sin, int64_t seq_len, int64_t head_dim, double theta) {
  std::vector<float> inv_freq(head_dim / 2);
  rotary_inv_freq(inv_freq.data(), head_dim, theta);
  rotary_tables_from(cos, sin, seq_len, head_dim / 2, inv_freq.data());
}

void rotary_apply_ref(float* x, int64_t batch, int64_t seq_len, int64_t num_heads, int64_t head_dim, int64_t ld,
                      double theta, int64_t rotary_dim, const RotaryScaling& scaling) {
  check_scaling(scaling);
  const int64_t rot = rotary_dim ? rotary_dim : head_dim, half = rot / 2;
  const bool ntk = scaling.kind == RotaryScaling::Kind::Ntk, mixed = ntk && scaling.mixed_b != 0.0;
  std::vector<double> freq(half);
  for (int64_t i = 0; i < half; ++i) {
    const double e = (double)(2 * i) / (double)rot;
    if (ntk && !mixed) {
      freq[i] = 1.0 / (std::pow(theta * scaling.factor, e) * std::pow(scaling.factor, 2.0 / (double)rot));
    } else if (mixed) {
      const double a = std::log(scaling.factor) / std::pow((double)half, scaling.mixed_b);
      freq[i] = 1.0 / (std::pow(theta, e) * std::exp(a * std::pow((double)(i + 1), scaling.mixed_b)));
    } else {
      freq[i] = 1.0 / std::pow(dynamic_base(theta, rot, scaling, seq_len), e);
    }
  }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t l = 0; l < seq_len; ++l)
      for (int64_t h = 0; h < num_heads; ++h) {
        float* v = x + (b * seq_len + l) * ld + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = (double)l * freq[i];
          const double a = v[i], c = v[i + half];
          v[i] = (float)(a * std::cos(angle) - c * std::sin(angle));
          v[i + half] = (float)(c * std::cos(angle) + a * std::sin(angle));
        }
      }
}

}  // namespace tfm::ops
