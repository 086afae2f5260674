// Rotary position embeddings (Su et al. 2021, RoFormer), in the "rotate_half" layout of Hugging Face's
// apply_rotary_pos_emb (Llama, Gemma, ModernBERT): a head vector x [head_dim] is split into halves x1 = x[:d/2],
// x2 = x[d/2:], and at position p
//   out[i]       = x1[i] cos(p f_i) - x2[i] sin(p f_i)
//   out[i + d/2] = x2[i] cos(p f_i) + x1[i] sin(p f_i),      f_i = 1 / theta^(2i / head_dim),  i < d/2.
#pragma once
#include <cstdint>

namespace tfm::ops {

// cos, sin: [seq_len, head_dim / 2], written: the angles p * f_i for positions p = 0 .. seq_len - 1, computed as
// Hugging Face's default rope does (inv_freq and the product p * inv_freq in float32, then cos / sin), so the
// tables equal its cos / sin up to the last bit of cos / sin. head_dim must be even and positive.
void rotary_tables(float* cos, float* sin, int64_t seq_len, int64_t head_dim, double theta);

// rotary_dim (0: head_dim): partial rotary (GPT-NeoX / Phi partial_rotary_factor): only each head's first
// rotary_dim columns are rotated, as a head of rotary_dim (tables of rotary_tables(..., rotary_dim, theta)); the
// rest pass through.
// Rotates, in place, the first num_heads head vectors of every token row of x: token (b, l) is the row
// x + (b * seq_len + l) * ld, head h its slice [h * head_dim, (h + 1) * head_dim), at position l.
// cos, sin: rotary_tables of at least seq_len positions. Vectorised for kernel_isa() (ops/isa.h).
void rotary_apply(float* x, int64_t batch, int64_t seq_len, int64_t num_heads, int64_t head_dim, int64_t ld,
                  const float* cos, const float* sin, int64_t rotary_dim = 0);
// Backward of rotary_apply: the rotation is orthogonal, so the gradient of its input is the gradient of its output
// rotated by the transposed matrix (the angle -p f_i): in place on dx, same layout and tables as rotary_apply.
void rotary_backward(float* dx, int64_t batch, int64_t seq_len, int64_t num_heads, int64_t head_dim, int64_t ld,
                     const float* cos, const float* sin, int64_t rotary_dim = 0);
// Plain reference of rotary_apply: element by element, the angles computed again in double precision.
void rotary_apply_ref(float* x, int64_t batch, int64_t seq_len, int64_t num_heads, int64_t head_dim, int64_t ld,
                      double theta, int64_t rotary_dim = 0);

}  // namespace tfm::ops
