#include "ops/embedding.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace tfm::ops {

void embedding_forward(float* out, const int64_t* ids, const float* weight, int64_t N, int64_t vocab_size, int64_t C) {
  for (int64_t n = 0; n < N; ++n)
    if (ids[n] < 0 || ids[n] >= vocab_size)
      throw std::out_of_range("token id " + std::to_string(ids[n]) + " at position " + std::to_string(n) +
                              " is outside the embedding table [0, " + std::to_string(vocab_size) + ")");
  for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * C, weight + ids[n] * C, sizeof(float) * C);
}

void embedding_backward(float* dweight, const float* dout, const int64_t* ids, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    float* dw = dweight + ids[n] * C;
    const float* d = dout + n * C;
    for (int64_t c = 0; c < C; ++c) dw[c] += d[c];
  }
}

}  // namespace tfm::ops
