// Row-wise softmax over the last dimension.
#pragma once
#include <cstdint>

namespace tfm::ops {
// out[rows, cols] = softmax(inp[rows, cols], dim=-1). In-place (out == inp) allowed.
void softmax_forward(float* out, const float* inp, int64_t rows, int64_t cols);
// dinp[rows, cols] = out * (dout - sum(dout * out, dim=-1)) (written).
void softmax_backward(float* dinp, const float* dout, const float* out, int64_t rows, int64_t cols);
void softmax_forward_ref(float* out, const float* inp, int64_t rows, int64_t cols);
// Softmax of one row of n values in place; the building block of attention.
void softmax_row(float* x, int64_t n);
}  // namespace tfm::ops
