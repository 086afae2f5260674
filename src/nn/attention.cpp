#include "nn/attention.h"

#include <cstring>
#include <mutex>
#include <stdexcept>

#include "core/profile.h"
#include "core/threading.h"
#include "nn/disentangled_attention.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/matmul.h"
#include "ops/attention_train.h"
#include "ops/dropout.h"
#include "ops/local_attention.h"
#include "ops/rotary.h"

namespace tfm::nn {

struct RotaryCache {
  std::mutex mu;
  std::shared_ptr<const RotaryTables> tables;
};

Rotary Rotary::make(double theta, int64_t dim) {
  if (!(theta > 0.0)) throw std::invalid_argument("Rotary: theta must be positive");
  if (dim <= 0 || dim % 2 != 0) throw std::invalid_argument("Rotary: the rotated dimension must be even and positive");
  Rotary r;
  r.theta = theta;
  r.dim = dim;
  r.cache = std::make_shared<RotaryCache>();
  return r;
}

std::shared_ptr<const RotaryTables> Rotary::tables(int64_t len) const {
  if (!cache) throw std::logic_error("Rotary::tables: a Rotary made without Rotary::make");
  std::lock_guard<std::mutex> lock(cache->mu);
  if (!cache->tables || cache->tables->len < len) {
    // Row p depends on p only (ops::rotary_tables), so a longer table holds the shorter one's rows bit for bit.
    auto t = std::make_shared<RotaryTables>();
    int64_t n = 64;
    while (n < len) n *= 2;
    t->len = n;
    t->half = dim / 2;
    t->cos.resize(n * t->half);
    t->sin.resize(n * t->half);
    ops::rotary_tables(t->cos.data(), t->sin.data(), n, dim, theta);
    cache->tables = std::move(t);
  }
  return cache->tables;
}

namespace {
// q and k (rows of stride ld; k == q + hidden_size: the fused layout, rotated as one row of 2 * heads) rotated
// in place at their positions, or back (the transposed rotation) for gradients. seqs null: a padded [B, L]
// batch, positions 0 .. L - 1; else each sentence from its start column.
void rotate_qk(const MultiHeadAttention& a, float* q, float* k, int64_t ld, int64_t B, int64_t L, const Varlen* seqs,
               bool back) {
  OpTimer t("rotary");
  const int64_t nh = a.num_heads, hd = a.head_dim(), dim = a.rotary.dim;
  int64_t need = L;
  if (seqs) {
    need = 0;
    for (int64_t b = 0; b < seqs->batch; ++b)
      need = std::max(need, (seqs->start ? seqs->start[b] : 0) + seqs->offsets[b + 1] - seqs->offsets[b]);
  }
  const std::shared_ptr<const RotaryTables> tab = a.rotary.tables(need);
  const int64_t half = tab->half;
  auto run = [&](float* x, int64_t heads, int64_t rows_b, int64_t len, const float* cs, const float* sn) {
    if (back) {
      ops::rotary_backward(x, rows_b, len, heads, hd, ld, cs, sn, dim);
    } else {
      ops::rotary_apply(x, rows_b, len, heads, hd, ld, cs, sn, dim);
    }
  };
  const bool fused = k == q + a.hidden_size;
  for (float* x : {q, k}) {
    if (fused && x == k) break;
    const int64_t heads = fused ? 2 * nh : nh;
    if (!seqs) {
      run(x, heads, B, L, tab->cos.data(), tab->sin.data());
      continue;
    }
    for (int64_t b = 0; b < seqs->batch; ++b) {
      const int64_t o = seqs->offsets[b], len = seqs->offsets[b + 1] - o, st = seqs->start ? seqs->start[b] : 0;
      if (len > 0) run(x + o * ld, heads, 1, len, tab->cos.data() + st * half, tab->sin.data() + st * half);
    }
  }
}

// The disentangled bias replaces any other score bias; its padded path reads a key_mask only.
void check_disentangled_mask(const ops::AttentionMask& m) {
  if (m.query_mask || m.mask || m.valid_lens || m.causal || m.bias)
    throw std::invalid_argument("MultiHeadAttention: disentangled attention takes a key_mask only");
}

void check_window_mask(const ops::AttentionMask& m) {
  if (m.query_mask || m.mask || m.valid_lens || m.causal || m.bias)
    throw std::invalid_argument("MultiHeadAttention: sliding-window attention takes a key_mask only");
}
}  // namespace

namespace {
// A bf16 model's attention runs in bf16 too (AVX512-BF16 dot products, fp32 softmax), and so does an int8
// model's: its products then see q, k, v within bf16's rounding (token cosine to fp32 well above int8's 0.999,
// tests/test_dtypes.cpp), at twice the fp32 kernel's speed.
bool bf16_attention(ops::ComputeType ct) { return ct == ops::ComputeType::BF16 || ct == ops::ComputeType::I8; }
// Rotary attention keeps fp32 products: rotated q and k rounded to bf16 on top of int8 products moved a ModernBERT
// classifier's score 0.033 from PyTorch's (tests/test_modernbert.cpp allows 0.03), and its sliding-window layers
// run the fp32 banded kernel anyway.
bool bf16_attention(const MultiHeadAttention& a) {
  return bf16_attention(a.qkv.packed.compute_type()) && !a.rotary.enabled();
}
}  // namespace

namespace {
// Whether a training forward of self-attention can run the three projections as one product with the stacked
// weights: parameter products of one precision (fp32 or bf16; not packed ones), [H, H] weights, and biases on all
// three or none.
bool stackable_qkv(const MultiHeadAttention& a, const Context& c) {
  const ops::ComputeType p = a.query.precision;
  auto plain = [&](const Linear& l) {
    return l.precision == p && !(c.packed && l.packed.defined()) && l.weight.defined() &&
           l.in_features == a.hidden_size && l.out_features == a.hidden_size;
  };
  return plain(a.query) && plain(a.key) && plain(a.value) && a.query.bias.defined() == a.key.bias.defined() &&
         a.key.bias.defined() == a.value.bias.defined();
}

// dW [3H, H] (the gradient of the stacked weights) added to the query, key and value weights' gradients.
void add_stacked_weight_grads(const MultiHeadAttention& a, const float* dw) {
  const int64_t H = a.hidden_size;
  const Linear* parts[3] = {&a.query, &a.key, &a.value};
  for (int i = 0; i < 3; ++i) {
    float* g = parts[i]->weight.grad();
    const float* s = dw + i * H * H;
#pragma omp parallel for simd if (parallel_worth(H * H))
    for (int64_t j = 0; j < H * H; ++j) g[j] += s[j];
  }
}

// bf16 operand buffer `which` (0: x, 1: dQKV) of this thread, at least n long.
uint16_t* bf16_rows(int which, int64_t n) {
  thread_local std::vector<uint16_t> rows[2];
  if (rows[which].size() < (size_t)n) rows[which].resize(n);
  return rows[which].data();
}

// The stacked weights [3H, H] in bf16 (one buffer per thread, converted at each call: the weights change
// between steps).
const uint16_t* stacked_bf16(const MultiHeadAttention& a) {
  thread_local std::vector<uint16_t> w16;
  const int64_t H = a.hidden_size;
  if (w16.size() < (size_t)(3 * H * H)) w16.resize(3 * H * H);
  const Linear* parts[3] = {&a.query, &a.key, &a.value};
  for (int i = 0; i < 3; ++i) ops::convert_to_bf16(w16.data() + i * H * H, parts[i]->weight.data(), H, H, H);
  return w16.data();
}

// w [3H, H] = query.weight | key.weight | value.weight stacked along the output rows (null: not wanted), and b
// [3H] the biases when they have them (else null).
void stack_qkv(const MultiHeadAttention& a, float* w, float* b) {
  const int64_t H = a.hidden_size;
  const Linear* parts[3] = {&a.query, &a.key, &a.value};
  for (int i = 0; i < 3; ++i) {
    if (w) std::memcpy(w + i * H * H, parts[i]->weight.data(), sizeof(float) * H * H);
    if (b) std::memcpy(b + i * H, parts[i]->bias.data(), sizeof(float) * H);
  }
}
}  // namespace

void MultiHeadAttention::forward(const Context& c, float* out, const float* xq_, const float* xkv_, int64_t B_,
                                 int64_t Lq_, int64_t Lk_, const ops::AttentionMask& mask) {
  if (disentangled)
    throw std::logic_error("MultiHeadAttention::forward: disentangled attention has no saving forward (inference "
                           "only)");
  if (mask.bias && (mask.bias_batch_stride != 0 || mask.bias_len != 0))
    throw std::invalid_argument("MultiHeadAttention::forward: a score bias in training must be one [heads, Lq, Lk] "
                                "table shared by the batch (bias_batch_stride 0, bias_len 0)");
  score_bias = mask.bias != nullptr;
  xq = xq_;
  xkv = xkv_;
  B = B_;
  Lq = Lq_;
  Lk = Lk_;
  const int64_t H = hidden_size;
  float* cx = take_scratch(ctx, B * Lq * H);
  const bool self = xq == xkv && Lq == Lk;
  if ((rotary.enabled() || window >= 0) && !self)
    throw std::invalid_argument("MultiHeadAttention::forward: rotary positions and windows need self-attention");
  fused_qkv = self && (qkv.weight.defined() || stackable_qkv(*this, c));
  ops::AttentionDims d{B, Lq, Lk, num_heads, head_dim()};
  const float *q, *k, *v;
  if (fused_qkv) {
    for (Buf* b : {&Q, &K, &V}) Buf().swap(*b);
    const int64_t N = B * Lq;
    QKV.resize(N * 3 * H);
    if (qkv.weight.defined()) {  // a trainable fused projection
      Context lin = c;
      lin.packed = false;
      qkv.forward(lin, QKV.data(), xq, N);
    } else if (query.precision == ops::ComputeType::BF16) {
      SerialScope serial(serial_below(N * 3 * H * H));
      float beta = 0.0f;
      if (query.bias.defined()) {  // QKV seeded with the stacked biases, the product added to them
        float* bias = take_scratch(bqkv, 3 * H);
        stack_qkv(*this, nullptr, bias);
        for (int64_t n = 0; n < N; ++n) std::memcpy(QKV.data() + n * 3 * H, bias, sizeof(float) * 3 * H);
        give_scratch(bqkv);
        beta = 1.0f;
      }
      // xq's bf16 copy is not kept: backward converts it again (xq stays alive until then, as for fp32 products).
      uint16_t* x16 = bf16_rows(0, N * H);
      ops::convert_to_bf16(x16, xq, N, H, H);
      ops::gemm_bf16_converted(false, true, N, 3 * H, H, 1.0f, x16, stacked_bf16(*this), beta, QKV.data(), 3 * H);
    } else {
      float* w = take_scratch(Wqkv, 3 * H * H);
      float* bias = query.bias.defined() ? take_scratch(bqkv, 3 * H) : nullptr;
      stack_qkv(*this, w, bias);
      ops::linear_forward(QKV.data(), xq, w, bias, N, H, 3 * H);
      give_scratch(Wqkv);
      give_scratch(bqkv);
    }
    q = QKV.data();
    k = q + H;
    v = q + 2 * H;
    d.q_ld = d.k_ld = d.v_ld = 3 * H;  // heads read in place from the stacked rows
  } else {
    Buf().swap(QKV);
    Q.resize(B * Lq * H);
    K.resize(B * Lk * H);
    V.resize(B * Lk * H);
    query.forward(c, Q.data(), xq, B * Lq);
    key.forward(c, K.data(), xkv, B * Lk);
    value.forward(c, V.data(), xkv, B * Lk);
    q = Q.data();
    k = K.data();
    v = V.data();
  }
  if (rotary.enabled()) {
    const int64_t ld = fused_qkv ? 3 * H : H;
    rotate_qk(*this, const_cast<float*>(q), const_cast<float*>(k), ld, B, Lq, nullptr, /*back=*/false);
  }
  drop = ops::DropoutDraw{};
  if (c.attention_dropping()) {
    const ops::AttentionDropoutDims dims{num_heads, Lq, Lk};  // keyed masks ignore padding of Lq, Lk
    drop = ops::dropout_draw(B * num_heads * Lq * Lk, c.attention_p(), *c.rng, &dims);
  }
  windowed = window >= 0 && !drop.defined();
  if (window >= 0) check_window_mask(mask);
  if (windowed) {  // the banded kernel: no [L, L] weights
    Buf().swap(probs);
    lse.resize(B * num_heads * Lq);
    window_key_mask = mask.key_mask;
    ops::sliding_window_attention_train(cx, lse.data(), q, k, v, d, mask.key_mask, window);
  } else {
    probs.resize(B * num_heads * Lq * Lk);
    ops::AttentionMask m = mask;
    if (window >= 0) {  // dropout on the weights: the dense kernel under the band (and key) mask
      band.assign(B * Lq * Lk, 0.0f);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t j = std::max<int64_t>(0, i - window); j <= std::min(Lk - 1, i + window); ++j)
            band[(b * Lq + i) * Lk + j] = !mask.key_mask || mask.key_mask[b * Lk + j] != 0.0f ? 1.0f : 0.0f;
      m = ops::AttentionMask{};
      m.mask = band.data();
    }
    const float* dm = dropout_mask_scratch(drop_mask, drop);
    if (!ops::attention_forward_train(cx, probs.data(), q, k, v, d, m, dm))
      ops::attention_forward(cx, probs.data(), q, k, v, d, m, dm);
    give_scratch(drop_mask);
  }
  output.forward(c, out, cx, B * Lq);
  ctx_src = cx;
  // bf16: the output product's copy is all backward needs (the banded backward reads the output itself)
  if (!windowed && output.saved_input(cx, B * Lq)) give_scratch(ctx);
}

void MultiHeadAttention::backward(const float* dout, float* dxq, float* dxkv) {
  const int64_t H = hidden_size;
  take_scratch(dctx, B * Lq * H);
  output.backward(dctx.data(), dout, ctx_src, B * Lq, /*accumulate=*/false);
  ops::AttentionDims d{B, Lq, Lk, num_heads, head_dim()};
  if (score_bias) {
    dbias.resize(num_heads * Lq * Lk);
  } else {
    dbias.clear();
  }
  float* db = score_bias ? dbias.data() : nullptr;
  // The forward's mask again (given back below, once attention_backward has read it).
  const float* dm = dropout_mask_scratch(drop_mask, drop);
  // The attention's input gradients, then the rotation's (q, k rotated back).
  auto attend_back = [&](float* dq, float* dk, float* dv, const float* q, const float* k, const float* v,
                         const ops::AttentionDims& dd) {
    if (windowed) {
      ops::sliding_window_attention_backward(dq, dk, dv, dctx.data(), ctx_src, lse.data(), q, k, v, dd,
                                             window_key_mask, window);
    } else {
      ops::attention_backward(dq, dk, dv, dctx.data(), probs.data(), q, k, v, dd, dm, db);
    }
    if (rotary.enabled()) rotate_qk(*this, dq, dk, dd.q_ld ? dd.q_ld : hidden_size, B, Lq, nullptr, /*back=*/true);
  };
  if (!fused_qkv) {
    take_scratch(dQ, B * Lq * H);
    take_scratch(dK, B * Lk * H);
    take_scratch(dV, B * Lk * H);
    attend_back(dQ.data(), dK.data(), dV.data(), Q.data(), K.data(), V.data(), d);
    give_scratch(drop_mask);
    query.backward(dxq, dQ.data(), xq, B * Lq);
    key.backward(dxkv, dK.data(), xkv, B * Lk);
    value.backward(dxkv, dV.data(), xkv, B * Lk);
    for (Buf* b : {&dctx, &dQ, &dK, &dV}) give_scratch(*b);
    return;
  }
  const int64_t N = B * Lq, H3 = 3 * H;
  float* dqkv = take_scratch(dQKV, N * H3);
  const float* q = QKV.data();
  d.q_ld = d.k_ld = d.v_ld = H3;  // dq | dk | dv written as the columns of dQKV, as q | k | v lie in QKV
  attend_back(dqkv, dqkv + H, dqkv + 2 * H, q, q + H, q + 2 * H, d);
  give_scratch(drop_mask);
  give_scratch(dctx);
  if (qkv.weight.defined()) {  // the trainable fused projection
    qkv.backward(dxq, dqkv, xq, N);
    give_scratch(dQKV);
    return;
  }
  const Linear* parts[3] = {&query, &key, &value};
  if (query.precision == ops::ComputeType::BF16) {
    backward_stacked_bf16(dqkv, dxq, dxkv);
  } else {
    float* w = take_scratch(Wqkv, H3 * H);
    stack_qkv(*this, w, nullptr);
    SerialScope serial(serial_below(N * H3 * H));
    // The input gradients: dxq += dQ W_q and dxkv += dK W_k + dV W_v, one product when they are the same buffer.
    if (dxq == dxkv) {
      ops::gemm(false, false, N, H, H3, 1.0f, dqkv, H3, w, H, 1.0f, dxq, H);
    } else {
      ops::gemm(false, false, N, H, H, 1.0f, dqkv, H3, w, H, 1.0f, dxq, H);
      ops::gemm(false, false, N, H, 2 * H, 1.0f, dqkv + H, H3, w + H * H, H, 1.0f, dxkv, H);
    }
    // The weight gradients: dW [3H, H] = dQKV^T x, then added to each Linear's [H, H] block.
    if (query.weight.grad()) {
      float* dw = take_scratch(dWqkv, H3 * H);
      ops::gemm(true, false, H3, H, N, 1.0f, dqkv, H3, xq, H, 0.0f, dw, H);
      add_stacked_weight_grads(*this, dw);
      give_scratch(dWqkv);
    }
    give_scratch(Wqkv);
  }
  if (query.bias.defined() && query.bias.grad())  // column sums of dQKV, split over the three biases
    for (int i = 0; i < 3; ++i) ops::bias_grad(parts[i]->bias.grad(), dqkv + i * H, N, H, H3);
  give_scratch(dQKV);
}

void MultiHeadAttention::backward_stacked_bf16(const float* dqkv, float* dxq, float* dxkv) {
  const int64_t H = hidden_size, H3 = 3 * H, N = B * Lq;
  SerialScope serial(serial_below(N * H3 * H));
  // dQKV converted once for both products; the weights and x converted again (the forward kept no copies).
  uint16_t* d16 = bf16_rows(1, N * H3);
  ops::convert_to_bf16(d16, dqkv, N, H3, H3);
  const uint16_t* w16 = stacked_bf16(*this);
  // The input gradients: dxq += dQ W_q and dxkv += dK W_k + dV W_v, one product when they are the same buffer.
  if (dxq == dxkv) {
    ops::gemm_bf16_converted(false, false, N, H, H3, 1.0f, d16, w16, 1.0f, dxq, H);
  } else {
    ops::gemm_bf16_converted(false, false, N, H, H, 1.0f, d16, H3, w16, H, 1.0f, dxq, H);
    ops::gemm_bf16_converted(false, false, N, H, 2 * H, 1.0f, d16 + H, H3, w16 + H * H, H, 1.0f, dxkv, H);
  }
  // The weight gradients: dW [3H, H] = dQKV^T x, added to each Linear's block.
  if (!query.weight.grad()) return;
  uint16_t* x16 = bf16_rows(0, N * H);
  ops::convert_to_bf16(x16, xq, N, H, H);
  float* dw = take_scratch(dWqkv, H3 * H);
  ops::gemm_bf16_converted(true, false, H3, H, N, 1.0f, d16, x16, 0.0f, dw, H);
  add_stacked_weight_grads(*this, dw);
  give_scratch(dWqkv);
}

void MultiHeadAttention::forward_inference(float* out, const float* x, int64_t B_, int64_t L,
                                           const ops::AttentionMask& mask, float* qkv_buf, float* ctx_buf,
                                           const ops::PreparedInput* xq) const {
  const int64_t H = hidden_size, N = B_ * L;
  {
    OpTimer t("qkv_gemm");
    qkv.forward_inference(qkv_buf, x, N, ops::Epilogue::None, xq);
  }
  if (rotary.enabled()) rotate_qk(*this, qkv_buf, qkv_buf + H, 3 * H, B_, L, nullptr, /*back=*/false);
  {
    OpTimer t("attention");
    ops::AttentionDims dims{B_, L, L, num_heads, head_dim()};
    dims.q_ld = dims.k_ld = dims.v_ld = 3 * H;  // heads read in place from the fused QKV rows
    dims.out_ld = H;
    if (window >= 0) {
      check_window_mask(mask);
      ops::sliding_window_attention(ctx_buf, qkv_buf, qkv_buf + H, qkv_buf + 2 * H, dims, mask.key_mask, window);
    } else if (disentangled) {
      check_disentangled_mask(mask);
      disentangled->attention_inference(ctx_buf, qkv_buf, qkv_buf + H, qkv_buf + 2 * H, 3 * H, H, B_, L, mask.key_mask,
                                        bf16_attention(*this));
    } else {
      dims.bf16 = bf16_attention(*this);
      ops::attention_forward(ctx_buf, nullptr, qkv_buf, qkv_buf + H, qkv_buf + 2 * H, dims, mask);
    }
  }
  OpTimer t("attn_out_gemm");
  output.forward_inference(out, ctx_buf, N);
}

void MultiHeadAttention::forward_inference_first_token(float* out, const float* x, int64_t B_, int64_t L,
                                                       const ops::AttentionMask& mask, float* qkv_buf,
                                                       float* ctx_buf, const ops::PreparedInput* xq) const {
  if (rotary.enabled() || window >= 0 || disentangled)
    throw std::logic_error("MultiHeadAttention::forward_inference_first_token: no rotary positions, window or "
                           "disentangled bias");
  const int64_t H = hidden_size;
  {
    OpTimer t("qkv_gemm");
    qkv.forward_inference(qkv_buf, x, B_ * L, ops::Epilogue::None, xq);
  }
  {
    OpTimer t("attention");
    ops::AttentionDims dims{B_, 1, L, num_heads, head_dim()};
    dims.q_ld = L * 3 * H;  // one query a row: row b's is position 0, at b * L * 3H
    dims.k_ld = dims.v_ld = 3 * H;
    dims.out_ld = H;
    dims.bf16 = bf16_attention(qkv.packed.compute_type());
    ops::attention_forward(ctx_buf, nullptr, qkv_buf, qkv_buf + H, qkv_buf + 2 * H, dims, mask);
  }
  OpTimer t("attn_out_gemm");
  output.forward_inference(out, ctx_buf, B_);
}

void MultiHeadAttention::forward_inference_first_token(float* out, const float* x, const Varlen& seqs,
                                                       const ops::AttentionMask& mask, float* qkv_buf,
                                                       float* ctx_buf, const ops::PreparedInput* xq) const {
  if (rotary.enabled() || window >= 0 || disentangled)
    throw std::logic_error("MultiHeadAttention::forward_inference_first_token: no rotary positions, window or "
                           "disentangled bias");
  const int64_t H = hidden_size, B_ = seqs.batch;
  {
    OpTimer t("qkv_gemm");
    qkv.forward_inference(qkv_buf, x, seqs.tokens(), ops::Epilogue::None, xq);
  }
  {
    OpTimer t("attention");
    for (int64_t b = 0; b < B_; ++b) {  // one query (the sentence's first token) over the sentence's keys
      const int64_t o = seqs.offsets[b], len = seqs.offsets[b + 1] - o;
      if (len == 0) {
        std::memset(ctx_buf + b * H, 0, sizeof(float) * H);
        continue;
      }
      ops::AttentionDims dims{1, 1, len, num_heads, head_dim()};
      dims.q_ld = dims.k_ld = dims.v_ld = 3 * H;
      dims.out_ld = H;
      dims.bf16 = bf16_attention(qkv.packed.compute_type());
      const float* q = qkv_buf + o * 3 * H;
      ops::attention_forward(ctx_buf + b * H, nullptr, q, q + H, q + 2 * H, dims, mask);
    }
  }
  OpTimer t("attn_out_gemm");
  output.forward_inference(out, ctx_buf, B_);
}

void MultiHeadAttention::forward_inference(float* out, const float* x, const Varlen& seqs, float* qkv_buf,
                                           float* ctx_buf, const ops::AttentionMask& mask,
                                           const ops::PreparedInput* xq) const {
  const int64_t H = hidden_size, T = seqs.tokens();
  {
    OpTimer t("qkv_gemm");
    qkv.forward_inference(qkv_buf, x, T, ops::Epilogue::None, xq);
  }
  if (rotary.enabled()) rotate_qk(*this, qkv_buf, qkv_buf + H, 3 * H, 0, 0, &seqs, /*back=*/false);
  {
    OpTimer t("attention");
    ops::AttentionDims dims{seqs.batch, seqs.max_len, seqs.max_len, num_heads, head_dim()};
    dims.q_ld = dims.k_ld = dims.v_ld = 3 * H;
    dims.out_ld = H;
    dims.seq_offsets = seqs.offsets;
    if (window >= 0) {
      check_window_mask(mask);
      ops::sliding_window_attention(ctx_buf, qkv_buf, qkv_buf + H, qkv_buf + 2 * H, dims, nullptr, window);
    } else if (disentangled) {
      check_disentangled_mask(mask);
      disentangled->attention_inference(ctx_buf, qkv_buf, qkv_buf + H, qkv_buf + 2 * H, 3 * H, H, seqs.batch,
                                        seqs.offsets, bf16_attention(*this));
    } else {
      dims.bf16 = bf16_attention(*this);
      ops::attention_forward(ctx_buf, nullptr, qkv_buf, qkv_buf + H, qkv_buf + 2 * H, dims, mask);
    }
  }
  OpTimer t("attn_out_gemm");
  output.forward_inference(out, ctx_buf, T);
}

namespace dp = decode_profile;

void MultiHeadAttention::step_self(const Context& c, float* out, const float* x, int64_t R, float* new_k,
                                   float* new_v, const ops::StepKeys& kv, float* step_probs, float* q_buf,
                                   float* qkv_buf, float* ctx_buf) const {
  const int64_t H = hidden_size;
  dp::Timer tm(dp::kSelfProj);
  if (c.packed && qkv.packed.defined()) {  // one product, then the K and V rows into the cache
    qkv.forward_inference(qkv_buf, x, R);
    for (int64_t r = 0; r < R; ++r) {
      std::memcpy(q_buf + r * H, qkv_buf + r * 3 * H, sizeof(float) * H);
      std::memcpy(new_k + r * H, qkv_buf + r * 3 * H + H, sizeof(float) * H);
      std::memcpy(new_v + r * H, qkv_buf + r * 3 * H + 2 * H, sizeof(float) * H);
    }
  } else {
    query.forward(c, q_buf, x, R);
    key.forward(c, new_k, x, R);
    value.forward(c, new_v, x, R);
  }
  tm.next(dp::kSelfAttn);
  ops::attention_step(ctx_buf, step_probs, q_buf, R, num_heads, head_dim(), kv);
  tm.next(dp::kSelfProj);
  output.forward(c, out, ctx_buf, R);
  tm.next(dp::kOther);
}

void MultiHeadAttention::step_cross(const Context& c, float* out, const float* x, int64_t R, const ops::StepKeys& kv,
                                    float* step_probs, float* q_buf, float* ctx_buf) const {
  dp::Timer tm(dp::kCrossProj);
  query.forward(c, q_buf, x, R);
  tm.next(dp::kCrossAttn);
  ops::attention_step(ctx_buf, step_probs, q_buf, R, num_heads, head_dim(), kv);
  tm.next(dp::kCrossProj);
  output.forward(c, out, ctx_buf, R);
  tm.next(dp::kOther);
}

void MultiHeadAttention::project_kv(const Context& c, float* k, float* v, const float* x, int64_t N) const {
  key.forward(c, k, x, N);
  value.forward(c, v, x, N);
}

}  // namespace tfm::nn
