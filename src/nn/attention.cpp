#include "nn/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

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
  std::shared_ptr<const RotaryTables> scaled;  // Dynamic past the trained length: the last call length's table
};

Rotary Rotary::make(double theta, int64_t dim, const ops::RotaryScaling& scaling) {
  if (!(theta > 0.0)) throw std::invalid_argument("Rotary: theta must be positive");
  if (dim <= 0 || dim % 2 != 0) throw std::invalid_argument("Rotary: the rotated dimension must be even and positive");
  if (scaling.kind == ops::RotaryScaling::Kind::Dynamic && dim <= 2)
    throw std::invalid_argument("Rotary: dynamic scaling needs a rotated dimension above 2");
  Rotary r;
  r.theta = theta;
  r.dim = dim;
  r.scaling = scaling;
  std::vector<float> probe(dim / 2);
  ops::rotary_inv_freq(probe.data(), dim, theta, scaling, 0);  // refuses a bad scaling here, at load
  r.cache = std::make_shared<RotaryCache>();
  return r;
}

std::shared_ptr<const RotaryTables> Rotary::tables(int64_t len) const {
  if (!cache) throw std::logic_error("Rotary::tables: a Rotary made without Rotary::make");
  auto build = [&](int64_t n, int64_t seq_len) {
    auto t = std::make_shared<RotaryTables>();
    t->len = n;
    t->half = dim / 2;
    t->cos.resize(n * t->half);
    t->sin.resize(n * t->half);
    std::vector<float> inv_freq(t->half);
    ops::rotary_inv_freq(inv_freq.data(), dim, theta, scaling, seq_len);
    ops::rotary_tables_from(t->cos.data(), t->sin.data(), n, t->half, inv_freq.data());
    return t;
  };
  std::lock_guard<std::mutex> lock(cache->mu);
  if (scaling.kind == ops::RotaryScaling::Kind::Dynamic && scaling.scales(len)) {
    // The frequencies depend on the call's length: a table of exactly len rows for it.
    if (!cache->scaled || cache->scaled->len != len) cache->scaled = build(len, len);
    return cache->scaled;
  }
  if (!cache->tables || cache->tables->len < len) {
    // Row p depends on p only (ops::rotary_tables_from), so a longer table holds the shorter one's rows bit for
    // bit. Dynamic scaling: the unscaled table, at most the trained length long.
    int64_t n = 64;
    while (n < len) n *= 2;
    if (scaling.kind == ops::RotaryScaling::Kind::Dynamic) n = std::max(len, std::min(n, scaling.max_positions));
    cache->tables = build(n, 0);
  }
  return cache->tables;
}

struct AlibiCache {
  std::mutex mu;
  std::shared_ptr<const AlibiTable> table;
};

std::vector<float> Alibi::paper_slopes(int64_t n) {
  if (n <= 0) throw std::invalid_argument("Alibi: the number of heads must be positive");
  auto power_of_2 = [](int64_t m, std::vector<float>& out) {
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2((double)m) - 3.0)));
    for (int64_t i = 0; i < m; ++i) out.push_back((float)(start * std::pow(start, (double)i)));
  };
  std::vector<float> out;
  const int64_t p = int64_t(1) << (int64_t)std::floor(std::log2((double)n));
  power_of_2(p, out);
  if (p == n) return out;
  const std::vector<float> twice = paper_slopes(2 * p);
  for (int64_t i = 0; i < n - p; ++i) out.push_back(twice[2 * i]);
  return out;
}

std::vector<float> Alibi::mpt_slopes(int64_t n, double alibi_bias_max) {
  if (n <= 0) throw std::invalid_argument("Alibi: the number of heads must be positive");
  int64_t np = 1;
  while (np < n) np *= 2;
  std::vector<float> s(np);
  const float step = (float)(alibi_bias_max / (double)np);
  for (int64_t i = 0; i < np; ++i) s[i] = 1.0f / std::pow(2.0f, (float)(i + 1) * step);
  if (np == n) return s;
  std::vector<float> out;
  for (int64_t i = 1; i < np; i += 2) out.push_back(s[i]);
  for (int64_t i = 0; i < np; i += 2) out.push_back(s[i]);
  out.resize(n);
  return out;
}

Alibi Alibi::make(std::vector<float> slopes) {
  if (slopes.empty()) throw std::invalid_argument("Alibi: no slopes");
  Alibi a;
  a.slopes = std::move(slopes);
  a.cache = std::make_shared<AlibiCache>();
  return a;
}

void Alibi::fill(float* out, int64_t Lq, int64_t Lk) const {
  const int64_t H = (int64_t)slopes.size();
  for (int64_t h = 0; h < H; ++h) {
    const float m = -slopes[h];
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j) out[(h * Lq + i) * Lk + j] = m * (float)(i > j ? i - j : j - i);
  }
}

std::shared_ptr<const AlibiTable> Alibi::table(int64_t len) const {
  if (!cache) throw std::logic_error("Alibi::table: an Alibi made without Alibi::make");
  std::lock_guard<std::mutex> lock(cache->mu);
  if (!cache->table || cache->table->len < len) {
    auto t = std::make_shared<AlibiTable>();
    int64_t n = 64;
    while (n < len) n *= 2;
    t->len = n;
    t->heads = (int64_t)slopes.size();
    t->bias.resize(t->heads * n * n);
    fill(t->bias.data(), n, n);
    cache->table = std::move(t);
  }
  return cache->table;
}

namespace {
// q (rows of stride ldq, num_heads heads) and k (stride ldk, kv_heads() heads) rotated in place at their
// positions, or back (the transposed rotation) for gradients; k == q + q_width() with one stride: the fused
// layout, rotated as one row of num_heads + kv_heads() heads. seqs null: a padded [B, L] batch, positions
// 0 .. L - 1; else each sentence from its start column.
void rotate_qk(const MultiHeadAttention& a, float* q, int64_t ldq, float* k, int64_t ldk, int64_t B, int64_t L,
               const Varlen* seqs, bool back) {
  OpTimer t("rotary");
  const int64_t hd = a.head_dim(), dim = a.rotary.dim;
  int64_t need = L;
  if (seqs) {
    need = 0;
    for (int64_t b = 0; b < seqs->batch; ++b)
      need = std::max(need, (seqs->start ? seqs->start[b] : 0) + seqs->offsets[b + 1] - seqs->offsets[b]);
  }
  const std::shared_ptr<const RotaryTables> tab = a.rotary.tables(need);
  const int64_t half = tab->half;
  auto run = [&](float* x, int64_t ld, int64_t heads, int64_t rows_b, int64_t len, const float* cs,
                 const float* sn) {
    if (back) {
      ops::rotary_backward(x, rows_b, len, heads, hd, ld, cs, sn, dim);
    } else {
      ops::rotary_apply(x, rows_b, len, heads, hd, ld, cs, sn, dim);
    }
  };
  const bool fused = k == q + a.q_width() && ldq == ldk;
  struct Part {
    float* x;
    int64_t ld, heads;
  };
  std::vector<Part> parts;
  if (fused) {
    parts.push_back({q, ldq, a.num_heads + a.kv_heads()});
  } else {
    parts.push_back({q, ldq, a.num_heads});
    parts.push_back({k, ldk, a.kv_heads()});
  }
  for (const Part& p : parts) {
    if (!seqs) {
      run(p.x, p.ld, p.heads, B, L, tab->cos.data(), tab->sin.data());
      continue;
    }
    for (int64_t b = 0; b < seqs->batch; ++b) {
      const int64_t o = seqs->offsets[b], len = seqs->offsets[b + 1] - o, st = seqs->start ? seqs->start[b] : 0;
      if (len > 0) run(p.x + o * p.ld, p.ld, p.heads, 1, len, tab->cos.data() + st * half, tab->sin.data() + st * half);
    }
  }
}

// The disentangled bias replaces any other score bias; its padded path reads a key_mask only.
void check_disentangled_mask(const ops::AttentionMask& m) {
  if (m.query_mask || m.mask || m.valid_lens || m.causal || m.bias)
    throw std::invalid_argument("MultiHeadAttention: disentangled attention takes a key_mask only");
}

// Inference: the per-head norms of q and k in place (rows of stride ld; N tokens).
void norm_heads_inference(const MultiHeadAttention& a, float* q, float* k, int64_t ld, int64_t N) {
  OpTimer t("qk_norm");
#pragma omp parallel for if (N * ld > 65536)
  for (int64_t n = 0; n < N; ++n) {
    a.q_norm.forward_inference(q + n * ld, q + n * ld, a.num_heads);
    a.k_norm.forward_inference(k + n * ld, k + n * ld, a.kv_heads());
  }
}

// The ALiBi table and the causal flag added to the caller's mask (inference): bias_len the table's length.
ops::AttentionMask with_options(const MultiHeadAttention& a, const ops::AttentionMask& mask, int64_t len,
                                std::shared_ptr<const AlibiTable>& hold) {
  ops::AttentionMask m = mask;
  if (a.causal) m.causal = true;
  if (a.alibi.enabled()) {
    if ((int64_t)a.alibi.slopes.size() != a.num_heads)
      throw std::invalid_argument("MultiHeadAttention: " + std::to_string(a.alibi.slopes.size()) +
                                  " ALiBi slopes for " + std::to_string(a.num_heads) + " heads");
    if (mask.bias) throw std::invalid_argument("MultiHeadAttention: ALiBi and a score bias of the caller's");
    hold = a.alibi.table(len);
    m.bias = hold->bias.data();
    m.bias_batch_stride = 0;
    m.bias_len = hold->len;
  }
  return m;
}

void check_window_mask(const MultiHeadAttention& a, const ops::AttentionMask& m) {
  if (m.query_mask || m.mask || m.valid_lens || m.causal || m.bias)
    throw std::invalid_argument("MultiHeadAttention: sliding-window attention takes a key_mask only");
  if (a.causal || a.alibi.enabled() || a.kv_heads() != a.num_heads)
    throw std::invalid_argument("MultiHeadAttention: sliding-window attention takes no causal mask, ALiBi or "
                                "grouped keys");
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
  return a.q_width() == a.hidden_size && a.kv_width() == a.hidden_size && plain(a.query) && plain(a.key) &&
         plain(a.value) && a.query.bias.defined() == a.key.bias.defined() &&
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

namespace {
// rows [N, heads * hd] of stride ld <-> contiguous [N * heads, hd].
void gather_heads(float* dst, const float* src, int64_t ld, int64_t N, int64_t width) {
  for (int64_t n = 0; n < N; ++n) std::memcpy(dst + n * width, src + n * ld, sizeof(float) * width);
}
void scatter_heads(float* dst, const float* src, int64_t ld, int64_t N, int64_t width) {
  for (int64_t n = 0; n < N; ++n) std::memcpy(dst + n * ld, src + n * width, sizeof(float) * width);
}
// Grouped-query attention in training: x [N, kv heads] (stride ld) repeated into out [N, q_width()].
void repeat_kv(const MultiHeadAttention& a, float* out, const float* x, int64_t ld, int64_t N) {
  const int64_t hd = a.head_dim(), nh = a.num_heads, g = nh / a.kv_heads(), qw = a.q_width();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < nh; ++h) std::memcpy(out + n * qw + h * hd, x + n * ld + (h / g) * hd, sizeof(float) * hd);
}
// Its backward: dx [N, kv heads] (stride ld) written with the sums over each group of dout [N, q_width()].
void repeat_kv_backward(const MultiHeadAttention& a, float* dx, const float* dout, int64_t ld, int64_t N) {
  const int64_t hd = a.head_dim(), nkv = a.kv_heads(), g = a.num_heads / nkv, qw = a.q_width();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t kh = 0; kh < nkv; ++kh) {
      float* d = dx + n * ld + kh * hd;
      std::memset(d, 0, sizeof(float) * hd);
      for (int64_t r = 0; r < g; ++r) {
        const float* s = dout + n * qw + (kh * g + r) * hd;
        for (int64_t c = 0; c < hd; ++c) d[c] += s[c];
      }
    }
}
}  // namespace

void MultiHeadAttention::forward(const Context& c, float* out, const float* xq_, const float* xkv_, int64_t B_,
                                 int64_t Lq_, int64_t Lk_, const ops::AttentionMask& mask_in) {
  if (disentangled)
    throw std::logic_error("MultiHeadAttention::forward: disentangled attention has no saving forward (inference "
                           "only)");
  if (mask_in.bias && (mask_in.bias_batch_stride != 0 || mask_in.bias_len != 0))
    throw std::invalid_argument("MultiHeadAttention::forward: a score bias in training must be one [heads, Lq, Lk] "
                                "table shared by the batch (bias_batch_stride 0, bias_len 0)");
  if (alibi.enabled() && mask_in.bias)
    throw std::invalid_argument("MultiHeadAttention::forward: ALiBi and a score bias of the caller's");
  score_bias = mask_in.bias != nullptr;
  xq = xq_;
  xkv = xkv_;
  B = B_;
  Lq = Lq_;
  Lk = Lk_;
  const int64_t H = hidden_size, QW = q_width(), KW = kv_width();
  ops::AttentionMask mask = mask_in;
  if (causal) mask.causal = true;
  if (alibi.enabled()) {
    if ((int64_t)alibi.slopes.size() != num_heads)
      throw std::invalid_argument("MultiHeadAttention::forward: " + std::to_string(alibi.slopes.size()) +
                                  " ALiBi slopes for " + std::to_string(num_heads) + " heads");
    alibi_bias.resize(num_heads * Lq * Lk);
    alibi.fill(alibi_bias.data(), Lq, Lk);
    mask.bias = alibi_bias.data();
  } else {
    Buf().swap(alibi_bias);
  }
  float* cx = take_scratch(ctx, B * Lq * QW);
  const bool self = xq == xkv && Lq == Lk;
  if ((rotary.enabled() || window >= 0) && !self)
    throw std::invalid_argument("MultiHeadAttention::forward: rotary positions and windows need self-attention");
  fused_qkv = self && (qkv.weight.defined() || stackable_qkv(*this, c));
  ops::AttentionDims d{B, Lq, Lk, num_heads, head_dim()};
  float *q, *k, *v;
  if (fused_qkv) {
    for (Buf* b : {&Q, &K, &V}) Buf().swap(*b);
    const int64_t N = B * Lq, W = qkv_width();
    QKV.resize(N * W);
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
    k = q + QW;
    v = k + KW;
    q_ld = k_ld = W;  // heads read in place from the stacked rows
  } else {
    Buf().swap(QKV);
    Q.resize(B * Lq * QW);
    K.resize(B * Lk * KW);
    V.resize(B * Lk * KW);
    query.forward(c, Q.data(), xq, B * Lq);
    key.forward(c, K.data(), xkv, B * Lk);
    value.forward(c, V.data(), xkv, B * Lk);
    q = Q.data();
    k = K.data();
    v = V.data();
    q_ld = QW;
    k_ld = KW;
  }
  q_at = q;
  k_at = k;
  v_at = v;
  if (qk_norm()) {  // each head normalised: the pre-norm values kept contiguous for the norms' backward
    const int64_t nq = B * Lq, nk = B * Lk;
    q_pre.resize(nq * QW);
    k_pre.resize(nk * KW);
    gather_heads(q_pre.data(), q, q_ld, nq, QW);
    gather_heads(k_pre.data(), k, k_ld, nk, KW);
    float* tmp = take_scratch(norm_tmp, std::max(nq * QW, nk * KW));
    q_norm.forward(tmp, q_pre.data(), nq * num_heads);
    scatter_heads(q, tmp, q_ld, nq, QW);
    k_norm.forward(tmp, k_pre.data(), nk * kv_heads());
    scatter_heads(k, tmp, k_ld, nk, KW);
    give_scratch(norm_tmp);
  }
  if (rotary.enabled()) rotate_qk(*this, q, q_ld, k, k_ld, B, Lq, nullptr, /*back=*/false);
  d.q_ld = q_ld;
  d.k_ld = d.v_ld = k_ld;
  const float *ka = k, *va = v;
  if (kv_heads() != num_heads) {  // grouped keys and values repeated for the (ungrouped) training kernels
    KE.resize(B * Lk * QW);
    VE.resize(B * Lk * QW);
    repeat_kv(*this, KE.data(), k, k_ld, B * Lk);
    repeat_kv(*this, VE.data(), v, k_ld, B * Lk);
    ka = KE.data();
    va = VE.data();
    d.k_ld = d.v_ld = QW;
  } else {
    Buf().swap(KE);
    Buf().swap(VE);
  }
  d.out_ld = QW;
  drop = ops::DropoutDraw{};
  if (c.attention_dropping()) {
    const ops::AttentionDropoutDims dims{num_heads, Lq, Lk};  // keyed masks ignore padding of Lq, Lk
    drop = ops::dropout_draw(B * num_heads * Lq * Lk, c.attention_p(), *c.rng, &dims);
  }
  windowed = window >= 0 && !drop.defined();
  if (window >= 0) check_window_mask(*this, mask);
  if (windowed) {  // the banded kernel: no [L, L] weights
    Buf().swap(probs);
    lse.resize(B * num_heads * Lq);
    window_key_mask = mask.key_mask;
    ops::sliding_window_attention_train(cx, lse.data(), q, ka, va, d, mask.key_mask, window);
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
    if (!ops::attention_forward_train(cx, probs.data(), q, ka, va, d, m, dm))
      ops::attention_forward(cx, probs.data(), q, ka, va, d, m, dm);
    give_scratch(drop_mask);
  }
  output.forward(c, out, cx, B * Lq);
  ctx_src = cx;
  // bf16: the output product's copy is all backward needs (the banded backward reads the output itself)
  if (!windowed && output.saved_input(cx, B * Lq)) give_scratch(ctx);
}

void MultiHeadAttention::backward(const float* dout, float* dxq, float* dxkv) {
  const int64_t H = hidden_size, QW = q_width(), KW = kv_width();
  take_scratch(dctx, B * Lq * QW);
  output.backward(dctx.data(), dout, ctx_src, B * Lq, /*accumulate=*/false);
  ops::AttentionDims d{B, Lq, Lk, num_heads, head_dim()};
  d.out_ld = QW;
  if (score_bias) {
    dbias.resize(num_heads * Lq * Lk);
  } else {
    dbias.clear();
  }
  float* db = score_bias ? dbias.data() : nullptr;
  // The forward's mask again (given back below, once attention_backward has read it).
  const float* dm = dropout_mask_scratch(drop_mask, drop);
  // The attention's input gradients (dq, dk, dv in the projections' layout), then the repeated keys' sums, the
  // rotation's (q, k rotated back) and the norms'.
  auto attend_back = [&](float* dq, float* dk, float* dv) {
    d.q_ld = q_ld;
    d.k_ld = d.v_ld = k_ld;
    const float *ka = k_at, *va = v_at;
    float *dka = dk, *dva = dv;
    const bool grouped = kv_heads() != num_heads;
    if (grouped) {
      ka = KE.data();
      va = VE.data();
      dka = take_scratch(dKE, B * Lk * QW);
      dva = take_scratch(dVE, B * Lk * QW);
      d.k_ld = d.v_ld = QW;
    }
    if (windowed) {
      ops::sliding_window_attention_backward(dq, dka, dva, dctx.data(), ctx_src, lse.data(), q_at, ka, va, d,
                                             window_key_mask, window);
    } else {
      ops::attention_backward(dq, dka, dva, dctx.data(), probs.data(), q_at, ka, va, d, dm, db);
    }
    if (grouped) {
      repeat_kv_backward(*this, dk, dka, k_ld, B * Lk);
      repeat_kv_backward(*this, dv, dva, k_ld, B * Lk);
      give_scratch(dKE);
      give_scratch(dVE);
    }
    if (rotary.enabled()) rotate_qk(*this, dq, q_ld, dk, k_ld, B, Lq, nullptr, /*back=*/true);
    if (qk_norm()) {
      const int64_t nq = B * Lq, nk = B * Lk, n = std::max(nq * QW, nk * KW);
      float* g = take_scratch(norm_tmp, n);
      float* gi = take_scratch(norm_dtmp, n);
      gather_heads(g, dq, q_ld, nq, QW);
      q_norm.backward(gi, g);
      scatter_heads(dq, gi, q_ld, nq, QW);
      gather_heads(g, dk, k_ld, nk, KW);
      k_norm.backward(gi, g);
      scatter_heads(dk, gi, k_ld, nk, KW);
      give_scratch(norm_tmp);
      give_scratch(norm_dtmp);
    }
  };
  if (!fused_qkv) {
    take_scratch(dQ, B * Lq * QW);
    take_scratch(dK, B * Lk * KW);
    take_scratch(dV, B * Lk * KW);
    attend_back(dQ.data(), dK.data(), dV.data());
    give_scratch(drop_mask);
    query.backward(dxq, dQ.data(), xq, B * Lq);
    key.backward(dxkv, dK.data(), xkv, B * Lk);
    value.backward(dxkv, dV.data(), xkv, B * Lk);
    for (Buf* b : {&dctx, &dQ, &dK, &dV}) give_scratch(*b);
    return;
  }
  const int64_t N = B * Lq, W = qkv_width();
  float* dqkv = take_scratch(dQKV, N * W);
  attend_back(dqkv, dqkv + QW, dqkv + QW + KW);  // dq | dk | dv written as the columns of dQKV, as in QKV
  give_scratch(drop_mask);
  give_scratch(dctx);
  if (qkv.weight.defined()) {  // the trainable fused projection
    qkv.backward(dxq, dqkv, xq, N);
    give_scratch(dQKV);
    return;
  }
  const int64_t H3 = 3 * H;
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
                                           const ops::AttentionMask& mask_in, float* qkv_buf, float* ctx_buf,
                                           const ops::PreparedInput* xq) const {
  const int64_t QW = q_width(), KW = kv_width(), W = qkv_width(), N = B_ * L;
  {
    OpTimer t("qkv_gemm");
    qkv.forward_inference(qkv_buf, x, N, ops::Epilogue::None, xq);
  }
  if (qk_norm()) norm_heads_inference(*this, qkv_buf, qkv_buf + QW, W, N);
  if (rotary.enabled()) rotate_qk(*this, qkv_buf, W, qkv_buf + QW, W, B_, L, nullptr, /*back=*/false);
  {
    OpTimer t("attention");
    ops::AttentionDims dims{B_, L, L, num_heads, head_dim()};
    dims.num_kv_heads = kv_heads();
    dims.q_ld = dims.k_ld = dims.v_ld = W;  // heads read in place from the fused QKV rows
    dims.out_ld = QW;
    if (window >= 0) {
      check_window_mask(*this, mask_in);
      ops::sliding_window_attention(ctx_buf, qkv_buf, qkv_buf + QW, qkv_buf + QW + KW, dims, mask_in.key_mask,
                                    window);
    } else if (disentangled) {
      check_disentangled_mask(mask_in);
      disentangled->attention_inference(ctx_buf, qkv_buf, qkv_buf + QW, qkv_buf + QW + KW, W, QW, B_, L,
                                        mask_in.key_mask, bf16_attention(*this));
    } else {
      std::shared_ptr<const AlibiTable> hold;
      const ops::AttentionMask mask = with_options(*this, mask_in, L, hold);
      dims.bf16 = bf16_attention(*this);
      ops::attention_forward(ctx_buf, nullptr, qkv_buf, qkv_buf + QW, qkv_buf + QW + KW, dims, mask);
    }
  }
  OpTimer t("attn_out_gemm");
  output.forward_inference(out, ctx_buf, N);
}

void MultiHeadAttention::forward_inference_first_token(float* out, const float* x, int64_t B_, int64_t L,
                                                       const ops::AttentionMask& mask_in, float* qkv_buf,
                                                       float* ctx_buf, const ops::PreparedInput* xq) const {
  if (rotary.enabled() || window >= 0 || disentangled)
    throw std::logic_error("MultiHeadAttention::forward_inference_first_token: no rotary positions, window or "
                           "disentangled bias");
  const int64_t QW = q_width(), KW = kv_width(), W = qkv_width();
  {
    OpTimer t("qkv_gemm");
    qkv.forward_inference(qkv_buf, x, B_ * L, ops::Epilogue::None, xq);
  }
  if (qk_norm()) norm_heads_inference(*this, qkv_buf, qkv_buf + QW, W, B_ * L);
  {
    OpTimer t("attention");
    std::shared_ptr<const AlibiTable> hold;
    const ops::AttentionMask mask = with_options(*this, mask_in, L, hold);
    ops::AttentionDims dims{B_, 1, L, num_heads, head_dim()};
    dims.num_kv_heads = kv_heads();
    dims.q_ld = L * W;  // one query a row: row b's is position 0, at b * L * W
    dims.k_ld = dims.v_ld = W;
    dims.out_ld = QW;
    dims.bf16 = bf16_attention(qkv.packed.compute_type());
    ops::attention_forward(ctx_buf, nullptr, qkv_buf, qkv_buf + QW, qkv_buf + QW + KW, dims, mask);
  }
  OpTimer t("attn_out_gemm");
  output.forward_inference(out, ctx_buf, B_);
}

void MultiHeadAttention::forward_inference_first_token(float* out, const float* x, const Varlen& seqs,
                                                       const ops::AttentionMask& mask_in, float* qkv_buf,
                                                       float* ctx_buf, const ops::PreparedInput* xq) const {
  if (rotary.enabled() || window >= 0 || disentangled)
    throw std::logic_error("MultiHeadAttention::forward_inference_first_token: no rotary positions, window or "
                           "disentangled bias");
  const int64_t QW = q_width(), KW = kv_width(), W = qkv_width(), B_ = seqs.batch;
  {
    OpTimer t("qkv_gemm");
    qkv.forward_inference(qkv_buf, x, seqs.tokens(), ops::Epilogue::None, xq);
  }
  if (qk_norm()) norm_heads_inference(*this, qkv_buf, qkv_buf + QW, W, seqs.tokens());
  {
    OpTimer t("attention");
    std::shared_ptr<const AlibiTable> hold;
    const ops::AttentionMask mask = with_options(*this, mask_in, seqs.max_len, hold);
    for (int64_t b = 0; b < B_; ++b) {  // one query (the sentence's first token) over the sentence's keys
      const int64_t o = seqs.offsets[b], len = seqs.offsets[b + 1] - o;
      if (len == 0) {
        std::memset(ctx_buf + b * QW, 0, sizeof(float) * QW);
        continue;
      }
      ops::AttentionDims dims{1, 1, len, num_heads, head_dim()};
      dims.num_kv_heads = kv_heads();
      dims.q_ld = dims.k_ld = dims.v_ld = W;
      dims.out_ld = QW;
      dims.bf16 = bf16_attention(qkv.packed.compute_type());
      const float* q = qkv_buf + o * W;
      ops::attention_forward(ctx_buf + b * QW, nullptr, q, q + QW, q + QW + KW, dims, mask);
    }
  }
  OpTimer t("attn_out_gemm");
  output.forward_inference(out, ctx_buf, B_);
}

void MultiHeadAttention::forward_inference(float* out, const float* x, const Varlen& seqs, float* qkv_buf,
                                           float* ctx_buf, const ops::AttentionMask& mask_in,
                                           const ops::PreparedInput* xq) const {
  const int64_t QW = q_width(), KW = kv_width(), W = qkv_width(), T = seqs.tokens();
  {
    OpTimer t("qkv_gemm");
    qkv.forward_inference(qkv_buf, x, T, ops::Epilogue::None, xq);
  }
  if (qk_norm()) norm_heads_inference(*this, qkv_buf, qkv_buf + QW, W, T);
  if (rotary.enabled()) rotate_qk(*this, qkv_buf, W, qkv_buf + QW, W, 0, 0, &seqs, /*back=*/false);
  {
    OpTimer t("attention");
    ops::AttentionDims dims{seqs.batch, seqs.max_len, seqs.max_len, num_heads, head_dim()};
    dims.num_kv_heads = kv_heads();
    dims.q_ld = dims.k_ld = dims.v_ld = W;
    dims.out_ld = QW;
    dims.seq_offsets = seqs.offsets;
    if (window >= 0) {
      check_window_mask(*this, mask_in);
      ops::sliding_window_attention(ctx_buf, qkv_buf, qkv_buf + QW, qkv_buf + QW + KW, dims, nullptr, window);
    } else if (disentangled) {
      check_disentangled_mask(mask_in);
      disentangled->attention_inference(ctx_buf, qkv_buf, qkv_buf + QW, qkv_buf + QW + KW, W, QW, seqs.batch,
                                        seqs.offsets, bf16_attention(*this));
    } else {
      // ALiBi per sentence: positions inside the sentence (bias_len), causality too (ops' unpadded causal mask).
      std::shared_ptr<const AlibiTable> hold;
      const ops::AttentionMask mask = with_options(*this, mask_in, seqs.max_len, hold);
      dims.bf16 = bf16_attention(*this);
      ops::attention_forward(ctx_buf, nullptr, qkv_buf, qkv_buf + QW, qkv_buf + QW + KW, dims, mask);
    }
  }
  OpTimer t("attn_out_gemm");
  output.forward_inference(out, ctx_buf, T);
}

namespace dp = decode_profile;

void MultiHeadAttention::step_self(const Context& c, float* out, const float* x, int64_t R, float* new_k,
                                   float* new_v, const ops::StepKeys& kv, float* step_probs, float* q_buf,
                                   float* qkv_buf, float* ctx_buf) const {
  // The decoder step runs plain multi-head attention (the seq2seq families); the options are encoder-side.
  if (q_width() != hidden_size || kv_heads() != num_heads || qk_norm() || alibi.enabled() || rotary.enabled())
    throw std::logic_error("MultiHeadAttention::step_self: no grouped keys, head_size, q/k norm, ALiBi or rotary");
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
