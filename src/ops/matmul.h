// Linear layers and matrix products on row-major float32 buffers; GEMM is ops::gemm (oneDNN).
// Accumulation rule (all ops/): parameter gradients add (+=), activation gradients are written (=).
#pragma once
#include <cstdint>

namespace tfm::ops {

// out[N, out_features] = inp[N, in_features] @ weight[out_features, in_features]^T + bias[out_features]
// (torch.nn.functional.linear). bias may be null.
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t in_features, int64_t out_features);
// dinp[N, in] = dout @ weight (written, or added when accumulate_dinp; skipped if dinp is null);
// dweight[out, in] += dout^T @ inp; dbias[out] += column sums of dout (skipped if null).
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t in_features, int64_t out_features,
                     bool accumulate_dinp = false);
// dbias[C] += column sums of d [N, C] with row stride ld (rows in order per column; column blocks on the threads).
void bias_grad(float* dbias, const float* d, int64_t N, int64_t C, int64_t ld);
// Plain triple loop in double precision; tests compare the fast kernel against it.
void linear_forward_ref(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                        int64_t in_features, int64_t out_features);

}  // namespace tfm::ops
