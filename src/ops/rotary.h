// Rotary position embeddings (Su et al. 2021, RoFormer), in the "rotate_half" layout of Hugging Face's
// apply_rotary_pos_emb (Llama, Gemma, ModernBERT): a head vector x [head_dim] is split into halves x1 = x[:d/2],
// x2 = x[d/2:], and at position p
//   out[i]       = x1[i] cos(p f_i) - x2[i] sin(p f_i)
//   out[i + d/2] = x2[i] cos(p f_i) + x1[i] sin(p f_i),      f_i = 1 / theta^(2i / head_dim),  i < d/2.
#pragma once
#include <cstdint>

namespace tfm::ops {

// rope_scaling: how the frequencies f_i are scaled for inputs longer than the trained length.
//  - Ntk: Alibaba GTE "new" (NTKScalingRotaryEmbedding of its modeling.py, config `rope_scaling: {type: ntk,
//    factor, mixed_b}`): without mixed_b, f_i = 1 / ((theta * factor)^(2i / dim) * factor^(2 / dim)); with it,
//    f_i = 1 / (theta^(2i / dim) * exp(a (i + 1)^mixed_b)), a = ln(factor) / (dim / 2)^mixed_b. GTE builds these
//    tables at load (its cache is max_position_embeddings * factor > max_position_embeddings long), so they apply
//    at every length.
//  - Dynamic: dynamic NTK (transformers' _compute_dynamic_ntk_parameters, NomicBERT's rotary_scaling_factor): a
//    call whose positions span seq_len > max_positions uses theta' = theta * (factor * seq_len / max_positions -
//    (factor - 1))^(dim / (dim - 2)); shorter calls the unscaled theta. The tables then depend on the call's
//    length (its largest position + 1), as Hugging Face recomputes them when a longer input comes.
struct RotaryScaling {
  enum class Kind { None, Ntk, Dynamic };
  Kind kind = Kind::None;
  double factor = 1.0;
  int64_t max_positions = 0;  // Dynamic: max_position_embeddings (the trained length), > 0
  double mixed_b = 0.0;       // Ntk: GTE's mixed_b; 0: none
  bool scales(int64_t seq_len) const {
    return kind == Kind::Ntk || (kind == Kind::Dynamic && seq_len > max_positions);
  }
};

// inv_freq [dim / 2] = f_i of a call whose positions span seq_len (read by Dynamic only), computed as the
// references do (the exponent 2i / dim and the power in float32, the scaled base in double). dim even, positive;
// std::invalid_argument for a scaling whose factor is not positive or (Dynamic) whose max_positions is not.
void rotary_inv_freq(float* inv_freq, int64_t dim, double theta, const RotaryScaling& scaling = {},
                     int64_t seq_len = 0);
// cos, sin: [seq_len, half] written with cos / sin(p * inv_freq[i]) (the product in float32) for p < seq_len.
void rotary_tables_from(float* cos, float* sin, int64_t seq_len, int64_t half, const float* inv_freq);

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
// Plain reference of rotary_apply: element by element, the angles computed again in double precision (the
// scaled frequencies too: RotaryScaling's formulas in double, Dynamic at this call's seq_len).
void rotary_apply_ref(float* x, int64_t batch, int64_t seq_len, int64_t num_heads, int64_t head_dim, int64_t ld,
                      double theta, int64_t rotary_dim = 0, const RotaryScaling& scaling = {});

}  // namespace tfm::ops
