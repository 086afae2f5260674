#include "nn/transformer_block.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/profile.h"
#include "ops/dropout.h"

namespace tfm::nn {
namespace {

void add_into(float* y, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// The sublayer's dropout: drawn by the forward (ctx), its mask written into r.mask (scratch) when a pass needs it.
void draw_dropout(const Context& ctx, Residual& r, int64_t n) {
  r.drop = ctx.dropping() ? ops::dropout_draw(n, ctx.dropout, *ctx.rng) : ops::DropoutDraw{};
}
// r.mask holding the mask (given back by the MaskScope), or null without dropout.
struct MaskScope {
  Residual& r;
  const float* mask;
  explicit MaskScope(Residual& res) : r(res), mask(dropout_mask_scratch(res.mask, res.drop)) {}
  ~MaskScope() { give_scratch(r.mask); }
};

// ---- post-LN sublayer: out = LN(dropout(y) + x)

void post_forward(const Context& ctx, Residual& r, LayerNorm& ln, float* out, const float* x, const float* y,
                  int64_t N) {
  const int64_t n = N * ln.C;
  r.n = n;
  r.sum.resize(n);
  float* sm = r.sum.data();
  draw_dropout(ctx, r, n);
  {
    MaskScope ms(r);
    if (const float* dm = ms.mask) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) sm[i] = y[i] * dm[i] + x[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) sm[i] = y[i] + x[i];
    }
  }
  ln.forward(out, sm, N);
}

// The gradient of the sublayer's output f: dropout(f)'s mask times the LayerNorm's input gradient. dx is added to,
// or written when dx_fresh (its first writer: no zero-fill needed). Without a mask that gradient is returned where
// it lies (dx when dx_fresh, else r.dh), no copy; with one it is written to dy (taken from the scratch pool).
// The callers' backward functions read it entirely before they write what it may alias.
const float* post_backward(Residual& r, LayerNorm& ln, const float* dout, float* dx, Buf& dy, bool dx_fresh) {
  const int64_t n = r.n;
  if (dx_fresh) {  // LayerNorm's input gradient straight into dx
    ln.backward(dx, dout);
    MaskScope ms(r);
    const float* dm = ms.mask;
    if (!dm) return dx;
    float* d = take_scratch(dy, n);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) d[i] = dx[i] * dm[i];
    return d;
  }
  take_scratch(r.dh, n);
  ln.backward(r.dh.data(), dout);
  const float* ds = r.dh.data();
  MaskScope ms(r);
  const float* dm = ms.mask;
  if (!dm) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dx[i] += ds[i];
    return ds;
  }
  float* d = take_scratch(dy, n);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    dx[i] += ds[i];
    d[i] = ds[i] * dm[i];
  }
  return d;
}

// ---- pre-LN sublayer: out = x + dropout(f(LN(x)))

const float* pre_norm(Residual& r, LayerNorm& ln, const float* x, int64_t N) {
  r.x = x;
  r.n = N * ln.C;
  r.h.resize(r.n);
  ln.forward(r.h.data(), x, N);
  return r.h.data();
}

void pre_residual(const Context& ctx, Residual& r, float* out, const float* f) {
  const int64_t n = r.n;
  const float* x = r.x;
  draw_dropout(ctx, r, n);
  MaskScope ms(r);
  if (const float* dm = ms.mask) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] + f[i] * dm[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] + f[i];
  }
}

// dx += dout (dx = dout when dx_fresh); df = dout * dropout mask (written).
void pre_backward_residual(Residual& r, const float* dout, float* dx, float* df, bool dx_fresh) {
  const int64_t n = r.n;
  if (dx_fresh)
    std::memcpy(dx, dout, sizeof(float) * n);
  else
    add_into(dx, dout, n);
  MaskScope ms(r);
  const float* dm = ms.mask;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) df[i] = dm ? dout[i] * dm[i] : dout[i];
}

// The gradient of f's input, zeroed for f's backward to add into.
float* zeroed_dh(Residual& r) {
  float* d = take_scratch(r.dh, r.n);
  std::fill(d, d + r.n, 0.0f);
  return d;
}

float* grow(Buf& b, int64_t n) {
  if ((int64_t)b.size() < n) b.resize(n);
  return b.data();
}

}  // namespace

// ---------------------------------------------------------------- encoder block

void EncoderBlock::forward(const Context& ctx, const float* x, int64_t B, int64_t L, const ops::AttentionMask& mask,
                           bool first_token_only) {
  H = attention.hidden_size;
  if (first_token_only && norm_first)
    throw std::logic_error("EncoderBlock::forward: first_token_only is implemented for post-LN blocks only");
  first_token_L = first_token_only ? L : 0;
  const int64_t Lq = first_token_only ? 1 : L;
  N = B * Lq;
  const float* xq = x;
  if (first_token_only) {  // the queries' input and the residual: x[:, 0]
    x_first.resize(B * H);  // kept until backward (the queries' saved input)
    float* xf = x_first.data();
    for (int64_t b = 0; b < B; ++b) std::memcpy(xf + b * H, x + b * L * H, sizeof(float) * H);
    xq = xf;
  } else {
    x_first.clear();
  }
  take_scratch(out, N * H);
  // The sublayers' outputs are scratch: each is read once, by the residual that follows it.
  float* ao = take_scratch(attn_out, N * H);
  Context sub1 = ctx;  // the attention sublayer's residual dropout
  if (!attention_output_dropout) sub1.dropout = 0.0f;
  Context sub2 = ctx;  // the feed-forward sublayer's
  if (!ffn_output_dropout) sub2.dropout = 0.0f;
  if (!norm_first) {
    attention.forward(ctx, ao, xq, x, B, Lq, L, mask);
    // Y = LN1(r1.sum) is scratch too: backward recomputes it from the saved sum (the FFN's input).
    float* y = take_scratch(Y, N * H);
    post_forward(sub1, r1, norm1, y, xq, ao, N);
    give_scratch(attn_out);
    float* fo = take_scratch(ffn_out, N * H);
    ffn.forward(ctx, fo, y, N);
    post_forward(sub2, r2, norm2, out.data(), y, fo, N);
    give_scratch(Y);
  } else {
    Y.resize(N * H);
    const float* h = pre_norm(r1, norm1, x, N);
    attention.forward(ctx, ao, h, h, B, L, L, mask);
    pre_residual(sub1, r1, Y.data(), ao);
    give_scratch(attn_out);
    const float* h2 = pre_norm(r2, norm2, Y.data(), N);
    float* fo = take_scratch(ffn_out, N * H);
    ffn.forward(ctx, fo, h2, N);
    pre_residual(sub2, r2, out.data(), fo);
  }
  give_scratch(ffn_out);
}

void EncoderBlock::backward(const float* dout, float* dx) {
  // dY, d_ffn, d_attn are scratch, written by their first user (no zero-fill).
  take_scratch(dY, N * H);
  if (!norm_first) {
    // Without dropout, the FFN's output gradient is dY itself, and the attention's is r1.dh.
    const float* df = post_backward(r2, norm2, dout, dY.data(), d_ffn, /*dx_fresh=*/true);
    // The FFN's input recomputed (the forward's values bit for bit: the same LayerNorm on the same sum).
    ffn.x = take_scratch(Y, N * H);
    norm1.forward(Y.data(), r1.sum.data(), N);
    ffn.backward(df, dY.data());
    give_scratch(Y);
    if (first_token_L) {
      // The residual and the queries reach x[:, 0] only (dx_first), the keys and values every position of x.
      float* dxf = take_scratch(dx_first, N * H);
      const float* da = post_backward(r1, norm1, dY.data(), dxf, d_attn, /*dx_fresh=*/true);
      attention.backward(da, dxf, dx);
      for (int64_t b = 0; b < N; ++b) add_into(dx + b * first_token_L * H, dxf + b * H, H);
      give_scratch(dx_first);
    } else {
      const float* da = post_backward(r1, norm1, dY.data(), dx, d_attn, /*dx_fresh=*/false);
      attention.backward(da, dx, dx);
    }
  } else {
    for (Buf* b : {&d_ffn, &d_attn}) take_scratch(*b, N * H);
    pre_backward_residual(r2, dout, dY.data(), d_ffn.data(), /*dx_fresh=*/true);
    float* dh2 = zeroed_dh(r2);
    ffn.backward(d_ffn.data(), dh2);
    norm2.backward(dY.data(), dh2, /*accumulate=*/true);
    pre_backward_residual(r1, dY.data(), dx, d_attn.data(), /*dx_fresh=*/false);
    float* dh1 = zeroed_dh(r1);
    attention.backward(d_attn.data(), dh1, dh1);
    norm1.backward(dx, dh1, /*accumulate=*/true);
  }
  for (Buf* b : {&dY, &d_ffn, &d_attn, &r1.dh, &r2.dh}) give_scratch(*b);
}

void EncoderBlock::release_output() {
  if (!norm_first) give_scratch(out);
}

const float* EncoderBlock::restore_output() {
  if (!norm_first && (int64_t)out.size() != N * H) {
    take_scratch(out, N * H);
    norm2.forward(out.data(), r2.sum.data(), N);  // the forward's values bit for bit
  }
  return out.data();
}

void EncoderBlock::set_input(const float* x) {
  if (norm_first) {  // the attention read LN1(x), which r1.h keeps
    r1.x = norm1.x = x;
    return;
  }
  attention.xkv = x;
  if (!first_token_L) attention.xq = x;  // else the queries' input stays x_first
}

namespace {

// The inference body of an encoder block on n token rows; attend(out, x) is the self-attention sublayer (padded
// batch or unpadded).
// Every LayerNorm whose output feeds a product also writes it in that product's input type (BlockScratch's
// PreparedInputs), and the first FFN product writes the second's input: the products convert nothing themselves.
template <class Attend>
void block_inference(const EncoderBlock& blk, float* X, int64_t n, BlockScratch& s, const LayerNorm* next_norm,
                     Attend&& attend) {
  const int64_t Hd = blk.attention.hidden_size;
  const ops::ComputeType ffn_in = blk.ffn.linear1.input_type();
  grow(s.qkv, n * blk.attention.qkv_width());
  grow(s.ctx, n * blk.attention.q_width());
  grow(s.inter, n * blk.ffn.inference_hidden());
  if (!blk.norm_first) {
    // a = LN1(W_o attention(x) + x); x = LN2(FFN(a) + a)
    grow(s.a, n * Hd);
    float* a = s.a.data();
    attend(a, X, &s.xq);
    s.xq.clear();  // used once: X changes below
    {
      OpTimer t("add_layernorm");
      blk.norm1.forward_inference_to(a, nullptr, a, X, n, ffn_in, s.aq);
    }
    blk.ffn.forward_inference(X, a, s.inter.data(), n, &s.aq, &s.hq);
    OpTimer t("add_layernorm");
    blk.norm2.forward_inference_to(X, nullptr, X, a, n, s.next_input, s.xq);
    return;
  }
  // x = x + attention(LN1(x)); x = x + FFN(LN2(x)). Each residual add is fused into the LayerNorm that follows
  // it: x += f and h = LN(x) in one pass (the sum written back into x).
  float* h = s.h.data();
  attend(h, h, &s.xq);
  s.xq.clear();
  blk.norm2.forward_inference_to(h, X, X, h, n, ffn_in, s.aq);  // x += attention; h = LN2(x)
  blk.ffn.forward_inference(h, h, s.inter.data(), n, &s.aq, &s.hq);
  if (next_norm) {
    next_norm->forward_inference_to(h, X, X, h, n, s.next_input, s.xq);  // x += FFN; h = LN1'(x)
  } else {
    for (int64_t i = 0; i < n * Hd; ++i) X[i] += h[i];
  }
}

}  // namespace

void EncoderBlock::forward_inference(float* X, int64_t B, int64_t L, const ops::AttentionMask& mask, BlockScratch& s,
                                     const LayerNorm* next_norm) const {
  block_inference(*this, X, B * L, s, next_norm, [&](float* out, const float* x, const ops::PreparedInput* xq) {
    attention.forward_inference(out, x, B, L, mask, s.qkv.data(), s.ctx.data(), xq);
  });
}

namespace {
// The rest of a last layer on position 0: first [B, H] holds x[:, 0] and s.a the attention sublayer's output for
// it; first = LN2(FFN(a) + a) with a = LN1(attention + x[:, 0]), as block_inference on these B rows.
void finish_first_token(const EncoderBlock& blk, float* first, int64_t B, BlockScratch& s) {
  float* a = s.a.data();
  grow(s.inter, B * blk.ffn.inference_hidden());
  {
    OpTimer t("add_layernorm");
    blk.norm1.forward_inference_to(a, nullptr, a, first, B, blk.ffn.linear1.input_type(), s.aq);
  }
  blk.ffn.forward_inference(first, a, s.inter.data(), B, &s.aq, &s.hq);
  OpTimer t("add_layernorm");
  blk.norm2.forward_inference_to(first, nullptr, first, a, B, ops::ComputeType::F32, s.xq);
}
}  // namespace

void EncoderBlock::forward_inference_first_token(float* first, const float* X, int64_t B, int64_t L,
                                                 const ops::AttentionMask& mask, BlockScratch& s) const {
  if (norm_first) throw std::logic_error("EncoderBlock::forward_inference_first_token: post-LN blocks only");
  const int64_t Hd = attention.hidden_size;
  grow(s.qkv, B * L * attention.qkv_width());
  grow(s.ctx, B * attention.q_width());
  grow(s.a, B * Hd);
  attention.forward_inference_first_token(s.a.data(), X, B, L, mask, s.qkv.data(), s.ctx.data(), &s.xq);
  s.xq.clear();
  for (int64_t b = 0; b < B; ++b) std::memcpy(first + b * Hd, X + b * L * Hd, sizeof(float) * Hd);  // x[:, 0]
  finish_first_token(*this, first, B, s);
}

void EncoderBlock::forward_inference_first_token(float* first, const float* X, const Varlen& seqs,
                                                 const ops::AttentionMask& mask, BlockScratch& s) const {
  if (norm_first) throw std::logic_error("EncoderBlock::forward_inference_first_token: post-LN blocks only");
  const int64_t Hd = attention.hidden_size, B = seqs.batch, T = seqs.tokens();
  grow(s.qkv, T * attention.qkv_width());
  grow(s.ctx, B * attention.q_width());
  grow(s.a, B * Hd);
  attention.forward_inference_first_token(s.a.data(), X, seqs, mask, s.qkv.data(), s.ctx.data(), &s.xq);
  s.xq.clear();
  for (int64_t b = 0; b < B; ++b) {  // each sentence's first row (an empty sentence: zeros, overwritten later)
    if (seqs.offsets[b + 1] > seqs.offsets[b])
      std::memcpy(first + b * Hd, X + seqs.offsets[b] * Hd, sizeof(float) * Hd);
    else
      std::memset(first + b * Hd, 0, sizeof(float) * Hd);
  }
  finish_first_token(*this, first, B, s);
}

void EncoderBlock::forward_inference(float* X, const Varlen& seqs, BlockScratch& s, const LayerNorm* next_norm,
                                     const ops::AttentionMask& mask) const {
  block_inference(*this, X, seqs.tokens(), s, next_norm, [&](float* out, const float* x, const ops::PreparedInput* xq) {
    attention.forward_inference(out, x, seqs, s.qkv.data(), s.ctx.data(), mask, xq);
  });
}

namespace {
// The input type layer l + 1's QKV product takes (F32 after the last layer).
ops::ComputeType next_qkv_input(const std::vector<EncoderBlock>& layers, size_t l) {
  return l + 1 < layers.size() ? layers[l + 1].attention.qkv.input_type() : ops::ComputeType::F32;
}
}  // namespace

bool real_tokens_contiguous(const float* key_mask, int64_t B, int64_t L) {
  for (int64_t b = 0; b < B; ++b) {
    int64_t runs = 0;
    for (int64_t i = 0; i < L; ++i)
      runs += key_mask[b * L + i] != 0.0f && (i == 0 || key_mask[b * L + i - 1] == 0.0f);
    if (runs > 1) return false;
  }
  return true;
}

void encoder_stack_inference(const std::vector<EncoderBlock>& layers, float* X, int64_t B, int64_t L,
                             const float* key_mask, bool unpadded, float* hidden_states, const float* score_bias,
                             float* first_token) {
  const int64_t NL = (int64_t)layers.size();
  if (first_token) {
    const int64_t H = NL ? layers[0].attention.hidden_size : 0;
    if (NL == 0 || hidden_states || layers[0].norm_first) {  // the whole stack, then X[:, 0]
      encoder_stack_inference(layers, X, B, L, key_mask, unpadded, hidden_states, score_bias);
      for (int64_t b = 0; b < B && NL; ++b) std::memcpy(first_token + b * H, X + b * L * H, sizeof(float) * H);
      return;
    }
  }
  if (NL == 0) return;
  const int64_t H = layers[0].attention.hidden_size, N = B * L;
  bool padded = false;
  if (key_mask)
    for (int64_t i = 0; i < N && !padded; ++i) padded = key_mask[i] == 0.0f;
  const bool pre_ln = layers[0].norm_first;
  // Activation buffers, reused by every layer and kept by the thread for its next forward: fresh buffers cost
  // page faults and zero-fills on every call (5.8% of an int8 BERT-base forward at [8, 128], BENCHMARKS.md).
  // The thread holds its largest batch's buffers until it exits. Nothing carries over: the
  // prepared inputs are emptied here.
  thread_local BlockScratch s;
  for (ops::PreparedInput* p : {&s.xq, &s.aq, &s.hq}) p->clear();
  s.next_input = ops::ComputeType::F32;
  // A relative bias read at positions inside the sentence needs the real tokens of each row in one run.
  const bool zero_padded_rows = padded && unpadded && score_bias && !real_tokens_contiguous(key_mask, B, L);
  // Unpadded, a row whose position 0 is padding reads 0 there (the contract above).
  auto zero_padded_first = [&] {
    for (int64_t b = 0; b < B && first_token && unpadded && key_mask; ++b)
      if (key_mask[b * L] == 0.0f) std::memset(first_token + b * H, 0, sizeof(float) * H);
  };
  if (!(padded && unpadded) || zero_padded_rows) {
    ops::AttentionMask mask;
    if (padded) mask.key_mask = key_mask;
    mask.bias = score_bias;  // [heads, L, L], bias_batch_stride 0: shared by the batch rows
    if (pre_ln) {  // pre-LN layers chain their LayerNorms: s.h holds the next layer's norm1(x) on entry
      grow(s.h, N * H);
      layers[0].norm1.forward_inference_to(s.h.data(), nullptr, X, nullptr, N, layers[0].attention.qkv.input_type(),
                                           s.xq);
    }
    for (int64_t l = 0; l < NL; ++l) {
      if (first_token && l == NL - 1) {  // post-LN, no hidden_states (above): position 0 of the last layer
        ops::AttentionMask first = mask;
        first.bias_len = score_bias ? L : 0;  // query row 0 of the [heads, L, L] table
        layers[l].forward_inference_first_token(first_token, X, B, L, first, s);
        zero_padded_first();
        return;
      }
      s.next_input = next_qkv_input(layers, l);
      layers[l].forward_inference(X, B, L, mask, s, pre_ln && l + 1 < NL ? &layers[l + 1].norm1 : nullptr);
      if (hidden_states) std::memcpy(hidden_states + (l + 1) * N * H, X, sizeof(float) * N * H);
    }
    if (zero_padded_rows)  // the unpadded contract: padded rows 0
      for (int64_t n = 0; n < N; ++n)
        if (key_mask[n] == 0.0f) {
          std::memset(X + n * H, 0, sizeof(float) * H);
          for (int64_t l = 0; hidden_states && l < NL; ++l)
            std::memset(hidden_states + ((l + 1) * N + n) * H, 0, sizeof(float) * H);
        }
    return;
  }
  // Unpadded: the real tokens gathered in order, sentence after sentence; rows[t] is token t's padded row.
  std::vector<int64_t> offsets(B + 1, 0), rows;
  rows.reserve(N);
  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i)
      if (key_mask[b * L + i] != 0.0f) rows.push_back(b * L + i);
    offsets[b + 1] = (int64_t)rows.size();
    max_len = std::max(max_len, offsets[b + 1] - offsets[b]);
  }
  const int64_t T = (int64_t)rows.size();
  if (T == 0) {  // nothing but padding
    std::memset(X, 0, sizeof(float) * N * H);
    if (hidden_states) std::memset(hidden_states + N * H, 0, sizeof(float) * NL * N * H);
    if (first_token) std::memset(first_token, 0, sizeof(float) * B * H);
    return;
  }
  std::vector<int64_t> start(B, 0);  // each sentence's first padded column: its rotary positions start there
  for (int64_t b = 0; b < B; ++b)
    if (offsets[b + 1] > offsets[b]) start[b] = rows[offsets[b]] - b * L;
  const Varlen seqs{B, offsets.data(), max_len, start.data()};
  grow(s.tokens, T * H);
  float* P = s.tokens.data();
  auto scatter = [&](float* dst) {  // padded rows zero
    std::memset(dst, 0, sizeof(float) * N * H);
#pragma omp parallel for if (T * H > 65536)
    for (int64_t t = 0; t < T; ++t) std::memcpy(dst + rows[t] * H, P + t * H, sizeof(float) * H);
  };
#pragma omp parallel for if (T * H > 65536)
  for (int64_t t = 0; t < T; ++t) std::memcpy(P + t * H, X + rows[t] * H, sizeof(float) * H);
  if (pre_ln) {
    grow(s.h, T * H);
    layers[0].norm1.forward_inference_to(s.h.data(), nullptr, P, nullptr, T, layers[0].attention.qkv.input_type(),
                                         s.xq);
  }
  ops::AttentionMask bias;
  bias.bias = score_bias;
  bias.bias_len = score_bias ? L : 0;  // each sentence at its own positions 0 .. len - 1 of the [heads, L, L] table
  for (int64_t l = 0; l < NL; ++l) {
    if (first_token && l == NL - 1) {  // post-LN, no hidden_states (above): each sentence's first token
      layers[l].forward_inference_first_token(first_token, P, seqs, bias, s);
      zero_padded_first();  // a sentence's first row is its position 0 only when that position is real
      return;
    }
    s.next_input = next_qkv_input(layers, l);
    layers[l].forward_inference(P, seqs, s, pre_ln && l + 1 < NL ? &layers[l + 1].norm1 : nullptr, bias);
    if (hidden_states) scatter(hidden_states + (l + 1) * N * H);
  }
  scatter(X);
}

const float* encoder_stack_forward(std::vector<EncoderBlock>& layers, const Context& ctx, const float* x, int64_t B,
                                   int64_t L, const ops::AttentionMask& mask, bool first_token_only) {
  for (size_t l = 0; l < layers.size(); ++l) {
    const bool first_only = first_token_only && l + 1 == layers.size();
    ops::AttentionMask m = mask;
    if (first_only && mask.bias) {  // [heads, 1, L]: row 0 of each head's table
      const int64_t heads = layers[l].attention.num_heads;
      Buf& row = layers[l].bias_first;
      row.resize(heads * L);
      for (int64_t h = 0; h < heads; ++h) std::memcpy(row.data() + h * L, mask.bias + h * L * L, sizeof(float) * L);
      m.bias = row.data();
    }
    layers[l].forward(ctx, x, B, L, m, first_only);
    if (l > 0) layers[l - 1].release_output();  // read; backward recomputes it (EncoderBlock::restore_output)
    x = layers[l].out.data();
  }
  return x;
}

void encoder_stack_backward(std::vector<EncoderBlock>& layers, const float* dout, float* dx, int64_t n,
                            float* dscore_bias) {
  if (layers.empty()) {
    std::memcpy(dx, dout, sizeof(float) * n);
    return;
  }
  const EncoderBlock& last = layers.back();
  Buf cur(dout, dout + last.N * last.H), next;
  for (int64_t l = (int64_t)layers.size() - 1; l >= 0; --l) {
    float* d = l == 0 ? dx : (next.assign(n, 0.0f), next.data());
    if (l == 0) std::memset(dx, 0, sizeof(float) * n);
    if (l > 0) layers[l].set_input(layers[l - 1].restore_output());
    layers[l].backward(cur.data(), d);
    if (l > 0) {
      layers[l - 1].release_output();
      std::swap(cur, next);
    }
    if (dscore_bias) {  // the bias is shared by the layers: their gradients add up
      const std::vector<float>& db = layers[l].attention.dbias;
      if (const int64_t L = layers[l].first_token_L) {  // [heads, 1, L]: row 0 of each head's table
        for (int64_t h = 0; h < layers[l].attention.num_heads; ++h)
          for (int64_t j = 0; j < L; ++j) dscore_bias[h * L * L + j] += db[h * L + j];
      } else {
        for (size_t i = 0; i < db.size(); ++i) dscore_bias[i] += db[i];
      }
    }
  }
}

// ---------------------------------------------------------------- decoder block

void DecoderBlock::forward(const Context& ctx, const float* x, const float* enc, int64_t B, int64_t Lt, int64_t Ls,
                           const ops::AttentionMask& self_mask, const ops::AttentionMask& enc_mask) {
  H = attention1.hidden_size;
  N = B * Lt;
  for (Buf* b : {&a1, &Z1, &a2, &Z2, &f, &out}) b->resize(N * H);
  if (!norm_first) {
    attention1.forward(ctx, a1.data(), x, x, B, Lt, Lt, self_mask);
    post_forward(ctx, r1, norm1, Z1.data(), x, a1.data(), N);
    attention2.forward(ctx, a2.data(), Z1.data(), enc, B, Lt, Ls, enc_mask);
    post_forward(ctx, r2, norm2, Z2.data(), Z1.data(), a2.data(), N);
    ffn.forward(ctx, f.data(), Z2.data(), N);
    post_forward(ctx, r3, norm3, out.data(), Z2.data(), f.data(), N);
  } else {
    const float* h1 = pre_norm(r1, norm1, x, N);
    attention1.forward(ctx, a1.data(), h1, h1, B, Lt, Lt, self_mask);
    pre_residual(ctx, r1, Z1.data(), a1.data());
    const float* h2 = pre_norm(r2, norm2, Z1.data(), N);
    attention2.forward(ctx, a2.data(), h2, enc, B, Lt, Ls, enc_mask);
    pre_residual(ctx, r2, Z2.data(), a2.data());
    const float* h3 = pre_norm(r3, norm3, Z2.data(), N);
    ffn.forward(ctx, f.data(), h3, N);
    pre_residual(ctx, r3, out.data(), f.data());
  }
}

void DecoderBlock::backward(const float* dout, float* dx, float* denc) {
  // Written by their first user (no zero-fill).
  for (Buf* b : {&dZ1, &dZ2, &d_a1, &d_a2, &d_f}) b->resize(N * H);
  if (!norm_first) {
    ffn.backward(post_backward(r3, norm3, dout, dZ2.data(), d_f, /*dx_fresh=*/true), dZ2.data());
    attention2.backward(post_backward(r2, norm2, dZ2.data(), dZ1.data(), d_a2, /*dx_fresh=*/true), dZ1.data(), denc);
    attention1.backward(post_backward(r1, norm1, dZ1.data(), dx, d_a1, /*dx_fresh=*/false), dx, dx);
  } else {
    pre_backward_residual(r3, dout, dZ2.data(), d_f.data(), /*dx_fresh=*/true);
    float* dh3 = zeroed_dh(r3);
    ffn.backward(d_f.data(), dh3);
    norm3.backward(dZ2.data(), dh3, /*accumulate=*/true);
    pre_backward_residual(r2, dZ2.data(), dZ1.data(), d_a2.data(), /*dx_fresh=*/true);
    float* dh2 = zeroed_dh(r2);
    attention2.backward(d_a2.data(), dh2, denc);
    norm2.backward(dZ1.data(), dh2, /*accumulate=*/true);
    pre_backward_residual(r1, dZ1.data(), dx, d_a1.data(), /*dx_fresh=*/false);
    float* dh1 = zeroed_dh(r1);
    attention1.backward(d_a1.data(), dh1, dh1);
    norm1.backward(dx, dh1, /*accumulate=*/true);
  }
}

void DecoderBlock::start(const Context& ctx, LayerKV& kv, const float* enc, int64_t n) const {
  const int64_t Hd = attention2.hidden_size;
  kv.cross_k.assign(n * Hd, 0.0f);
  kv.cross_v.assign(n * Hd, 0.0f);
  attention2.project_kv(ctx, kv.cross_k.data(), kv.cross_v.data(), enc, n);
}

void DecoderBlock::step(const Context& ctx, float* x, LayerKV& kv, StepArgs& st) const {
  namespace dp = decode_profile;
  const int64_t R = st.rows, Hd = attention1.hidden_size, n = R * Hd;
  Buf* sc = st.scratch;
  float* h = grow(sc[kStepH], n);
  float* q = grow(sc[kStepQ], n);
  float* c = grow(sc[kStepCtx], n);
  float* a = grow(sc[kStepA], n);
  // One sublayer: pre-LN x += f(LN(x)); post-LN x = LN(x + f(x)). f reads its input from `in`, writes `a`.
  auto sublayer = [&](const LayerNorm& ln, auto&& fn) {
    if (norm_first) {
      {
        dp::Timer t(dp::kOther);
        ln.forward_inference(h, x, R);
      }
      fn(h);
      dp::Timer t(dp::kOther);
      for (int64_t i = 0; i < n; ++i) x[i] += a[i];
    } else {
      fn(x);
      dp::Timer t(dp::kOther);
      ln.add_forward_inference(x, nullptr, x, a, R);  // x = LN(x + a), one pass
    }
  };
  // Self-attention over every step so far.
  sublayer(norm1, [&](const float* in) {
    kv.self_k.resize((st.base + R) * Hd);
    kv.self_v.resize((st.base + R) * Hd);
    ops::StepKeys keys = st.self;
    keys.k = kv.self_k.data();
    keys.v = kv.self_v.data();
    attention1.step_self(ctx, a, in, R, kv.self_k.data() + st.base * Hd, kv.self_v.data() + st.base * Hd, keys,
                         st.probs_self, q, grow(sc[kStepQKV], 3 * n), c);
  });
  // Cross-attention over the cached encoder keys/values of each row's sentence.
  sublayer(norm2, [&](const float* in) {
    ops::StepKeys keys = st.cross;
    keys.k = kv.cross_k.data();
    keys.v = kv.cross_v.data();
    attention2.step_cross(ctx, a, in, R, keys, st.probs_cross, q, c);
  });
  sublayer(norm3, [&](const float* in) {
    dp::Timer t(dp::kFfn);
    // ReLU as the first product's post-op when packed (exact: max(x, 0) either way), no extra pass.
    float* hidden = grow(sc[kStepFfn], R * ffn.linear1.out_features);
    const bool relu = ffn.act == ops::Activation::Relu;
    ffn.linear1.forward(ctx, hidden, in, R, relu ? ops::Epilogue::Relu : ops::Epilogue::None);
    if (!relu) ops::activation_forward(hidden, hidden, R * ffn.linear1.out_features, ffn.act);
    ffn.linear2.forward(ctx, a, hidden, R);
  });
}

}  // namespace tfm::nn
