// Embedding lookup (torch.nn.Embedding) and its backward.
#pragma once
#include <cstdint>

namespace tfm::ops {
// out[N, C] = weight[ids[n], :]. ids must be in [0, vocab_size); throws std::out_of_range naming the id otherwise.
void embedding_forward(float* out, const int64_t* ids, const float* weight, int64_t N, int64_t vocab_size, int64_t C);
// dweight[vocab_size, C] += scatter of dout[N, C] by ids.
void embedding_backward(float* dweight, const float* dout, const int64_t* ids, int64_t N, int64_t C);
}  // namespace tfm::ops
