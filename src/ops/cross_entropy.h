// Softmax cross-entropy over the vocabulary with optional label smoothing, fused forward + backward.
#pragma once
#include <cstdint>

namespace tfm::ops {

// logits: [N, V]; labels: [N] in [0, V); weight: [N] scale of each row's gradient (0 = row ignored).
// loss[N] (written) = (1 - eps) * (logsumexp(x) - x[label]) + eps * (logsumexp(x) - mean(x))
//   (torch.nn.functional.cross_entropy with label_smoothing = eps, reduction 'none').
// dlogits[N, V] (written) = weight[n] * (softmax(x) - (1 - eps) * onehot(label) - eps / V).
// A row with weight 0 gets dlogits 0 and loss 0 (not computed). dlogits may be logits itself (in place: a
// training step's [tokens, vocabulary] gradient then needs no second buffer of that size).
void cross_entropy_forward_backward(float* loss, float* dlogits, const float* logits, const int64_t* labels,
                                    const float* weight, int64_t N, int64_t V, float label_smoothing);

}  // namespace tfm::ops
