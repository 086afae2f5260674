#include "nn/disentangled_attention.h"

#include <algorithm>
#include <cmath>

#include "core/profile.h"
#include "ops/attention.h"
#include "ops/gemm.h"

namespace tfm::nn {

int64_t deberta_log_bucket(int64_t r, int64_t bucket_size, int64_t max_position) {
  if (bucket_size <= 0) return r;
  const int64_t mid = bucket_size / 2;
  const int64_t a = r < 0 ? -r : r;
  if (a <= mid) return r;
  // torch: abs_pos / mid (float32 true division), torch.log, torch.tensor((max_position - 1) / mid) (a Python float
  // made float32), ceil(... * (mid - 1)) + mid, times sign.
  const float num = std::log((float)a / (float)mid);
  const float den = std::log((float)((double)(max_position - 1) / (double)mid));
  const float v = std::ceil(num / den * (float)(mid - 1)) + (float)mid;
  return r < 0 ? -(int64_t)v : (int64_t)v;
}

float DisentangledAttention::scale() const {
  // torch.sqrt(torch.tensor(head_dim, dtype=float) * scale_factor) in float32, then a division.
  return 1.0f / std::sqrt((float)head_dim * (float)scale_factor());
}

int64_t DisentangledAttention::index(int64_t r) const {
  return std::clamp<int64_t>(deberta_log_bucket(r, bucket_size, max_position) + span, 0, 2 * span - 1);
}

void DisentangledAttention::bias(float* out, const float* q, const float* k, int64_t ld, int64_t L) const {
  if (L <= 0) return;
  if (!any()) {
    std::fill(out, out + num_heads * L * L, 0.0f);
    return;
  }
  const int64_t H = num_heads * head_dim, d = head_dim;
  // idx(r) for r = i - j in [-(L - 1), L - 1], non-decreasing in r: the pos rows lo .. hi are all a sentence reads.
  std::vector<int64_t> idx(2 * L - 1);
  for (int64_t r = -(L - 1); r <= L - 1; ++r) idx[r + L - 1] = index(r);
  const int64_t lo = idx.front(), W = idx.back() - lo + 1;
  const float s = scale();
#pragma omp parallel for if (num_heads * L * W * d > (1 << 16))
  for (int64_t h = 0; h < num_heads; ++h) {
    // c2p_att [L, W] = q_h pos_key_h[lo .. hi]^T, p2c_att [L, W] = k_h pos_query_h[lo .. hi]^T
    std::vector<float> c2p_att(c2p ? L * W : 0), p2c_att(p2c ? L * W : 0);
    if (c2p) ops::gemm(false, true, L, W, d, 1.0f, q + h * d, ld, pos_key.data() + lo * H + h * d, H, 0.0f,
                       c2p_att.data(), W);
    if (p2c) ops::gemm(false, true, L, W, d, 1.0f, k + h * d, ld, pos_query.data() + lo * H + h * d, H, 0.0f,
                       p2c_att.data(), W);
    float* o = out + h * L * L;
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) {
        const int64_t w = idx[i - j + L - 1] - lo;
        // HF adds c2p / scale, then p2c / scale (each divided by sqrt(head_dim * scale_factor)).
        float v = 0.0f;
        if (c2p) v += c2p_att[i * W + w] * s;
        if (p2c) v += p2c_att[j * W + w] * s;
        o[i * L + j] = v;
      }
  }
}

void DisentangledAttention::bias_ref(float* out, const float* q, const float* k, int64_t ld, int64_t L) const {
  const int64_t H = num_heads * head_dim, d = head_dim;
  const double s = 1.0 / std::sqrt((double)head_dim * (double)scale_factor());
  if (!any()) {
    std::fill(out, out + num_heads * L * L, 0.0f);
    return;
  }
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j) {
        const int64_t p = index(i - j);
        double v = 0.0;
        for (int64_t e = 0; e < d && c2p; ++e) v += (double)q[i * ld + h * d + e] * pos_key[p * H + h * d + e];
        for (int64_t e = 0; e < d && p2c; ++e) v += (double)k[j * ld + h * d + e] * pos_query[p * H + h * d + e];
        out[(h * L + i) * L + j] = (float)(v * s);
      }
}

namespace {
// One sentence (batch 1) of len tokens: bias, then attention with it.
void sentence_attention(const DisentangledAttention& a, float* ctx, const float* q, const float* k, const float* v,
                        int64_t ld, int64_t out_ld, int64_t len, const float* key_mask, bool bf16,
                        std::vector<float>& bias) {
  if (a.any()) {
    OpTimer t("disentangled_bias");
    bias.resize(a.num_heads * len * len);
    a.bias(bias.data(), q, k, ld, len);
  }
  ops::AttentionDims dims{1, len, len, a.num_heads, a.head_dim};
  dims.q_ld = dims.k_ld = dims.v_ld = ld;
  dims.out_ld = out_ld;
  dims.scale = a.scale();
  dims.bf16 = bf16;
  ops::AttentionMask mask;
  mask.key_mask = key_mask;
  mask.bias = a.any() ? bias.data() : nullptr;
  ops::attention_forward(ctx, nullptr, q, k, v, dims, mask);
}
}  // namespace

void DisentangledAttention::attention_inference(float* ctx, const float* q, const float* k, const float* v,
                                                int64_t ld, int64_t out_ld, int64_t B, int64_t L,
                                                const float* key_mask, bool bf16) const {
  thread_local std::vector<float> bias_buf;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t o = b * L;
    sentence_attention(*this, ctx + o * out_ld, q + o * ld, k + o * ld, v + o * ld, ld, out_ld, L,
                       key_mask ? key_mask + o : nullptr, bf16, bias_buf);
  }
}

void DisentangledAttention::attention_inference(float* ctx, const float* q, const float* k, const float* v,
                                                int64_t ld, int64_t out_ld, int64_t batch, const int64_t* offsets,
                                                bool bf16) const {
  thread_local std::vector<float> bias_buf;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t o = offsets[b], len = offsets[b + 1] - o;
    if (len == 0) continue;
    sentence_attention(*this, ctx + o * out_ld, q + o * ld, k + o * ld, v + o * ld, ld, out_ld, len, nullptr, bf16,
                       bias_buf);
  }
}

}  // namespace tfm::nn
