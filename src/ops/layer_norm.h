// LayerNorm over the last dimension (torch.nn.LayerNorm; biased variance, eps inside the square root).
#pragma once
#include <cstdint>

#include "ops/gemm.h"

namespace tfm::ops {
// out[N, C] = (inp - mean) * rstd * weight + bias. mean[N], rstd[N] are saved for backward when non-null.
// In-place (out == inp) allowed.
void layer_norm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int64_t N, int64_t C, float eps);
// Residual add fused into LayerNorm: out[N, C] = LayerNorm(x + residual), and sum_out[N, C] = x + residual when
// non-null (pre-LN, where the residual stream continues). Reads x and residual without a temporary; post-LN
// (BERT: LayerNorm(dense(h) + h)) passes sum_out = null. out and sum_out may each alias x or residual
// (element-wise in place) but not each other. Same statistics as layer_norm_forward (two-pass variance).
// Vectorised for kernel_isa() (ops/isa.h).
void add_layer_norm_forward(float* out, float* sum_out, const float* x, const float* residual, const float* weight,
                            const float* bias, int64_t N, int64_t C, float eps);
// add_layer_norm_forward (residual non-null) or LayerNorm(x) (residual null; sum_out ignored) that also writes its
// output rows, each while it is in cache, as the input of a following product taking ct (PackedLinear::input_type()):
// prepared is reset to [N, C] of ct and holds exactly what prepare_input(prepared, ct, out, N, C) gives. ct F32:
// the plain call (prepared emptied). out itself is written in fp32 as well (the residual stream needs it).
void layer_norm_forward_to(float* out, float* sum_out, const float* x, const float* residual, const float* weight,
                           const float* bias, int64_t N, int64_t C, float eps, ComputeType ct,
                           PreparedInput& prepared);
// dinp[N, C] written; dweight[C], dbias[C] accumulated (+=); dbias null: a LayerNorm without bias
// (nn.LayerNorm(bias=False)).
// Rows run in parallel blocks of 64 (per-ISA copies, ops/isa.h); the weight / bias sums of the blocks are added
// in block order, so the result does not depend on the thread count.
void layer_norm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);
void layer_norm_forward_ref(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                            int64_t C, float eps);
// layer_norm_backward in double precision from inp alone (its own mean and variance, eps as the forward's): the
// tests' reference. dinp written; dweight, dbias (or null) added to.
void layer_norm_backward_ref(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, int64_t N, int64_t C, float eps);
}  // namespace tfm::ops
