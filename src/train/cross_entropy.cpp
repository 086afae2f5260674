#include "train/cross_entropy.h"

#include <cmath>

#include "ops/vec_math.h"

namespace tfm {

void cross_entropy_forward_backward(float* loss, float* dlogits, const float* logits, const int64_t* labels,
                                    const float* weight, int64_t N, int64_t V, float eps) {
#pragma omp parallel for if (N * V > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    float* g = dlogits + n * V;
    float mx = -INFINITY;
    double mean = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      mx = x[v] > mx ? x[v] : mx;
      mean += x[v];
    }
    mean /= (double)V;
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      g[v] = vm::fast_exp(x[v] - mx);
      sum += g[v];
    }
    double lse = mx + std::log(sum);
    double nll = lse - x[labels[n]];
    loss[n] = (float)((1.0 - eps) * nll + eps * (lse - mean));
    const float w = weight[n];
    const float inv = (float)(1.0 / sum);
    const float smooth = eps / (float)V;
    for (int64_t v = 0; v < V; ++v) g[v] = w * (g[v] * inv - smooth);
    g[labels[n]] -= w * (1.0f - eps);
  }
}

}  // namespace tfm
