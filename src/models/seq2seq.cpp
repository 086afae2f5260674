#include "models/seq2seq.h"

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>

#include "io/json_util.h"
#include "io/safetensors.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/attention_train.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/matmul.h"
#include "ops/vec_math.h"
#include "decode/profile.h"
#include "train/cross_entropy.h"

#include <unordered_map>

namespace tfm {

// ---------------------------------------------------------------- config

Seq2SeqConfig Seq2SeqConfig::from_json(const nlohmann::json& j, const std::string& file) {
  Seq2SeqConfig c;
  std::string type = json_string_or(j, "model_type", "transformer_seq2seq", file);
  if (type != "transformer_seq2seq")
    throw std::runtime_error(file + ": model_type '" + type + "' is not 'transformer_seq2seq'");
  c.num_hiddens = json_int(j, "num_hiddens", file);
  c.num_layers = json_int(j, "num_layers", file);
  c.num_heads = json_int(j, "num_heads", file);
  c.ffn_num_hiddens = json_int(j, "ffn_num_hiddens", file);
  c.dropout = json_number_or(j, "dropout", 0.0, file);
  c.num_steps = json_int(j, "num_steps", file);
  c.src_vocab_size = json_int(j, "src_vocab_size", file);
  c.tgt_vocab_size = json_int(j, "tgt_vocab_size", file);
  c.max_len = json_int_or(j, "max_len", 1000, file);
  c.decode_positions = json_string_or(j, "decode_positions", "d2l_step", file);
  c.norm_first = json_bool_or(j, "norm_first", false, file);
  c.shared_embeddings = json_bool_or(j, "shared_embeddings", false, file);
  c.attention_bias = json_bool_or(j, "attention_bias", false, file);
  c.activation = json_string_or(j, "activation", "relu", file);
  if (c.activation != "relu" && c.activation != "gelu")
    throw std::runtime_error(file + ": key 'activation' must be 'relu' or 'gelu', found '" + c.activation + "'");
  if (c.decode_positions != "absolute" && c.decode_positions != "d2l_step")
    throw std::runtime_error(file + ": key 'decode_positions' must be 'absolute' or 'd2l_step', found '" +
                             c.decode_positions + "'");
  auto positive = [&](const char* k, int64_t v) {
    if (v <= 0) throw std::runtime_error(file + ": key '" + k + "' must be positive, found " + std::to_string(v));
  };
  positive("num_hiddens", c.num_hiddens);
  positive("num_layers", c.num_layers);
  positive("num_heads", c.num_heads);
  positive("ffn_num_hiddens", c.ffn_num_hiddens);
  positive("num_steps", c.num_steps);
  positive("src_vocab_size", c.src_vocab_size);
  positive("tgt_vocab_size", c.tgt_vocab_size);
  positive("max_len", c.max_len);
  check_at_most(file, "num_hiddens", c.num_hiddens, 1 << 14);
  check_at_most(file, "num_layers", c.num_layers, 1 << 10);
  check_at_most(file, "ffn_num_hiddens", c.ffn_num_hiddens, 1 << 16);
  check_at_most(file, "num_steps", c.num_steps, 1 << 16);
  check_at_most(file, "src_vocab_size", c.src_vocab_size, 1 << 22);
  check_at_most(file, "tgt_vocab_size", c.tgt_vocab_size, 1 << 22);
  check_at_most(file, "max_len", c.max_len, 1 << 16);
  {
    const double H = (double)c.num_hiddens, F = (double)c.ffn_num_hiddens;
    check_fits_in_memory(file, H * (double)(c.src_vocab_size + 2 * c.tgt_vocab_size + c.max_len) +
                                   (double)c.num_layers * H * (12 * H + 4 * F));
  }
  // Sources are padded to num_steps (d2l) and decoding runs up to num_steps positions.
  if (c.max_len < c.num_steps)
    throw std::runtime_error(file + ": max_len (" + std::to_string(c.max_len) + ") must be at least num_steps (" +
                             std::to_string(c.num_steps) + ")");
  if (c.num_hiddens % c.num_heads != 0)
    throw std::runtime_error(file + ": num_hiddens (" + std::to_string(c.num_hiddens) +
                             ") is not divisible by num_heads (" + std::to_string(c.num_heads) + ")");
  if (c.num_hiddens % 2 != 0)
    throw std::runtime_error(file + ": num_hiddens must be even for the sinusoidal positional encoding");
  if (c.shared_embeddings && c.src_vocab_size != c.tgt_vocab_size)
    throw std::runtime_error(file + ": shared_embeddings needs one joint vocabulary, but src_vocab_size " +
                             std::to_string(c.src_vocab_size) + " != tgt_vocab_size " + std::to_string(c.tgt_vocab_size));
  if (!(c.dropout >= 0.0 && c.dropout < 1.0))
    throw std::runtime_error(file + ": key 'dropout' must be in [0, 1), found " + std::to_string(c.dropout));
  return c;
}

Seq2SeqConfig Seq2SeqConfig::load(const std::string& path) { return from_json(load_json_file(path), path); }

nlohmann::json Seq2SeqConfig::to_json() const {
  return {{"model_type", "transformer_seq2seq"}, {"num_hiddens", num_hiddens},   {"num_layers", num_layers},
          {"num_heads", num_heads},               {"ffn_num_hiddens", ffn_num_hiddens}, {"dropout", dropout},
          {"num_steps", num_steps},               {"src_vocab_size", src_vocab_size},
          {"tgt_vocab_size", tgt_vocab_size},     {"max_len", max_len},
          {"decode_positions", decode_positions}, {"norm_first", norm_first},
          {"shared_embeddings", shared_embeddings}, {"attention_bias", attention_bias}, {"activation", activation}};
}

// ---------------------------------------------------------------- modules with explicit backward
// Module backward passes ADD into the gradients of their inputs (callers zero them), so residual branches
// and the decoder's several uses of the encoder output need no extra buffers.

namespace {

using Buf = std::vector<float>;

void resize_zero(Buf& b, size_t n) { b.assign(n, 0.0f); }
void add_into(float* y, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

struct LinearP {
  int64_t w = -1, b = -1;  // ParamTable indices; b = -1 for bias=False
  int64_t in = 0, out = 0;
};

LinearP add_linear(ParamTable& P, const std::string& name, int64_t in, int64_t out, bool bias) {
  LinearP l;
  l.w = P.add(name + ".weight", {out, in});
  if (bias) l.b = P.add(name + ".bias", {out});
  l.in = in;
  l.out = out;
  return l;
}

// Inference weights packed by Seq2SeqModel::prepare_inference, keyed by the weight's ParamTable index. The
// inference entry points (encode, start_decoding, decode_step) install them for their duration, so the block
// code shared with training runs its products on them; training never sees them.
using PackedTable = std::unordered_map<int64_t, ops::PackedLinear>;
thread_local const PackedTable* t_packed = nullptr;
struct PackedScope {
  const PackedTable* prev;
  explicit PackedScope(const PackedTable& t) : prev(t_packed) { t_packed = t.empty() ? nullptr : &t; }
  ~PackedScope() { t_packed = prev; }
};

// Mixed-precision training (set_precision(BF16)): forward_backward installs ops::gemm_bf16 for its duration, and
// the Linear products (forward, input and weight gradients) run on it; attention's per-head products, softmax,
// LayerNorm, the loss, reductions and the optimizer stay fp32.
using GemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                        float, float*, int64_t);
thread_local GemmFn t_train_gemm = nullptr;
struct TrainGemmScope {
  GemmFn prev;
  explicit TrainGemmScope(GemmFn f) : prev(t_train_gemm) { t_train_gemm = f; }
  ~TrainGemmScope() { t_train_gemm = prev; }
};

void linear_fwd(ParamTable& P, const LinearP& l, float* out, const float* inp, int64_t N) {
  if (t_packed) {
    auto it = t_packed->find(l.w);
    if (it != t_packed->end()) {
      it->second.forward(out, inp, N);
      return;
    }
  }
  if (t_train_gemm && N > 0) {
    float beta = 0.0f;
    if (l.b >= 0) {
      const float* bias = P.data(l.b);
      for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * l.out, bias, sizeof(float) * l.out);
      beta = 1.0f;
    }
    t_train_gemm(false, true, N, l.out, l.in, 1.0f, inp, l.in, P.data(l.w), l.in, beta, out, l.out);
    return;
  }
  ops::linear_forward(out, inp, P.data(l.w), l.b >= 0 ? P.data(l.b) : nullptr, N, l.in, l.out);
}
// dinp += dout W (or = when !accumulate); dW += dout^T inp; db += sum dout
void linear_bwd(ParamTable& P, const LinearP& l, float* dinp, const float* dout, const float* inp, int64_t N,
                bool accumulate = true) {
  if (t_train_gemm == &ops::gemm_bf16 && N > 0) {
    // dout feeds both products: convert it to bf16 once.
    thread_local std::vector<uint16_t> dout16, w16, inp16;
    if (dout16.size() < (size_t)(N * l.out)) dout16.resize(N * l.out);
    if (inp16.size() < (size_t)(N * l.in)) inp16.resize(N * l.in);
    ops::convert_to_bf16(dout16.data(), dout, N, l.out, l.out);
    ops::convert_to_bf16(inp16.data(), inp, N, l.in, l.in);
    if (dinp) {
      if (w16.size() < (size_t)(l.out * l.in)) w16.resize(l.out * l.in);
      ops::convert_to_bf16(w16.data(), P.data(l.w), l.out, l.in, l.in);
      ops::gemm_bf16_converted(false, false, N, l.in, l.out, 1.0f, dout16.data(), w16.data(), accumulate ? 1.0f : 0.0f,
                               dinp, l.in);
    }
    ops::gemm_bf16_converted(true, false, l.out, l.in, N, 1.0f, dout16.data(), inp16.data(), 1.0f, P.grad(l.w), l.in);
  } else if (t_train_gemm && N > 0) {
    if (dinp) t_train_gemm(false, false, N, l.in, l.out, 1.0f, dout, l.out, P.data(l.w), l.in, accumulate ? 1.0f : 0.0f, dinp, l.in);
    t_train_gemm(true, false, l.out, l.in, N, 1.0f, dout, l.out, inp, l.in, 1.0f, P.grad(l.w), l.in);
  }
  if (t_train_gemm && N > 0) {
    if (l.b >= 0) {
      float* db = P.grad(l.b);
      for (int64_t n = 0; n < N; ++n) {
        const float* d = dout + n * l.out;
#pragma omp simd
        for (int64_t o = 0; o < l.out; ++o) db[o] += d[o];
      }
    }
    return;
  }
  ops::linear_backward(dinp, P.grad(l.w), l.b >= 0 ? P.grad(l.b) : nullptr, dout, inp, P.data(l.w), N, l.in, l.out,
                       accumulate);
}

struct LNP {
  int64_t w = -1, b = -1;
};
LNP add_ln(ParamTable& P, const std::string& name, int64_t C) {
  return {P.add(name + ".weight", {C}), P.add(name + ".bias", {C})};
}

// d2l MultiHeadAttention: W_o(attention(W_q q, W_k k, W_v v)).
struct MHA {
  LinearP W_q, W_k, W_v, W_o;
  int64_t heads = 1;
  // Saved for backward.
  const float *xq = nullptr, *xkv = nullptr;
  Buf Q, K, V, probs, drop, ctx, dctx, dQ, dK, dV;
  int64_t B = 0, Lq = 0, Lk = 0;

  void forward(ParamTable& P, float* out, const float* xq_, const float* xkv_, int64_t B_, int64_t Lq_, int64_t Lk_,
               const ops::AttentionMask& mask, Rng* rng, float p) {
    xq = xq_;
    xkv = xkv_;
    B = B_;
    Lq = Lq_;
    Lk = Lk_;
    const int64_t H = W_q.out;
    Q.resize(B * Lq * H);
    K.resize(B * Lk * H);
    V.resize(B * Lk * H);
    ctx.resize(B * Lq * H);
    probs.resize(B * heads * Lq * Lk);
    linear_fwd(P, W_q, Q.data(), xq, B * Lq);
    linear_fwd(P, W_k, K.data(), xkv, B * Lk);
    linear_fwd(P, W_v, V.data(), xkv, B * Lk);
    const float* dm = nullptr;
    if (rng && p > 0.0f) {
      drop.resize(probs.size());
      const ops::AttentionDropoutDims dims{heads, Lq, Lk};  // keyed masks ignore padding of Lq, Lk
      ops::dropout_mask(drop.data(), (int64_t)drop.size(), p, *rng, &dims);
      dm = drop.data();
    } else {
      drop.clear();
    }
    ops::AttentionDims d{B, Lq, Lk, heads, H / heads};
    if (!ops::attention_forward_train(ctx.data(), probs.data(), Q.data(), K.data(), V.data(), d, mask, dm))
      ops::attention_forward(ctx.data(), probs.data(), Q.data(), K.data(), V.data(), d, mask, dm);
    linear_fwd(P, W_o, out, ctx.data(), B * Lq);
  }

  void backward(ParamTable& P, const float* dout, float* dxq, float* dxkv) {
    const int64_t H = W_q.out;
    dctx.resize(B * Lq * H);
    linear_bwd(P, W_o, dctx.data(), dout, ctx.data(), B * Lq, /*accumulate=*/false);
    dQ.resize(B * Lq * H);
    dK.resize(B * Lk * H);
    dV.resize(B * Lk * H);
    ops::AttentionDims d{B, Lq, Lk, heads, H / heads};
    ops::attention_backward(dQ.data(), dK.data(), dV.data(), dctx.data(), probs.data(), Q.data(), K.data(), V.data(),
                            d, drop.empty() ? nullptr : drop.data());
    linear_bwd(P, W_q, dxq, dQ.data(), xq, B * Lq);
    linear_bwd(P, W_k, dxkv, dK.data(), xkv, B * Lk);
    linear_bwd(P, W_v, dxkv, dV.data(), xkv, B * Lk);
  }
};

// AddNorm: out = LayerNorm(dropout(Y) + X), eps 1e-5.
struct AddNorm {
  LNP ln;
  Buf sum, mean, rstd, drop, dsum;
  int64_t N = 0, C = 0;

  void forward(ParamTable& P, float* out, const float* X, const float* Y, int64_t N_, int64_t C_, Rng* rng, float p) {
    N = N_;
    C = C_;
    sum.resize(N * C);
    mean.resize(N);
    rstd.resize(N);
    if (rng && p > 0.0f) {
      drop.resize(N * C);
      ops::dropout_mask(drop.data(), N * C, p, *rng);
      const float* dm = drop.data();
      float* sm = sum.data();
#pragma omp simd
      for (int64_t i = 0; i < N * C; ++i) sm[i] = Y[i] * dm[i] + X[i];
    } else {
      drop.clear();
      float* sm = sum.data();
#pragma omp simd
      for (int64_t i = 0; i < N * C; ++i) sm[i] = Y[i] + X[i];
    }
    ops::layer_norm_forward(out, mean.data(), rstd.data(), sum.data(), P.data(ln.w), P.data(ln.b), N, C, 1e-5f);
  }

  // dY is written (=); dX is added to, or written when dX_fresh (its first writer: no zero-fill needed).
  void backward(ParamTable& P, const float* dout, float* dX, float* dY, bool dX_fresh = false) {
    const int64_t n = N * C;
    if (dX_fresh) {  // LayerNorm's input gradient straight into dX
      ops::layer_norm_backward(dX, P.grad(ln.w), P.grad(ln.b), dout, sum.data(), P.data(ln.w), mean.data(),
                               rstd.data(), N, C);
      if (drop.empty()) {
        std::memcpy(dY, dX, sizeof(float) * n);
      } else {
        const float* dm = drop.data();
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dY[i] = dX[i] * dm[i];
      }
      return;
    }
    dsum.resize(n);
    ops::layer_norm_backward(dsum.data(), P.grad(ln.w), P.grad(ln.b), dout, sum.data(), P.data(ln.w), mean.data(),
                             rstd.data(), N, C);
    const float* ds = dsum.data();
    const float* dm = drop.empty() ? nullptr : drop.data();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      dX[i] += ds[i];
      dY[i] = dm ? ds[i] * dm[i] : ds[i];
    }
  }
};

// PositionWiseFFN: dense2(relu(dense1(X))).
struct FFN {
  LinearP dense1, dense2;
  ops::Activation act = ops::Activation::Relu;
  const float* x = nullptr;
  Buf h, a, da, dh;
  int64_t N = 0;

  void forward(ParamTable& P, float* out, const float* x_, int64_t N_) {
    x = x_;
    N = N_;
    a.resize(N * dense1.out);
    if (act == ops::Activation::Relu) {
      // ReLU in place: its backward needs only the sign, and relu(h) > 0 exactly where h > 0.
      linear_fwd(P, dense1, a.data(), x, N);
      ops::activation_forward(a.data(), a.data(), N * dense1.out, act);
    } else {
      h.resize(N * dense1.out);
      linear_fwd(P, dense1, h.data(), x, N);
      ops::activation_forward(a.data(), h.data(), N * dense1.out, act);
    }
    linear_fwd(P, dense2, out, a.data(), N);
  }

  void backward(ParamTable& P, const float* dout, float* dx) {
    da.resize(N * dense1.out);
    linear_bwd(P, dense2, da.data(), dout, a.data(), N, /*accumulate=*/false);
    // In place: da becomes the gradient of dense1's output.
    ops::activation_backward(da.data(), da.data(), act == ops::Activation::Relu ? a.data() : h.data(),
                             N * dense1.out, act);
    linear_bwd(P, dense1, dx, da.data(), x, N);
  }
};

// LayerNorm (eps 1e-5) that keeps what its backward needs.
struct LayerNormCache {
  LNP ln;
  const float* x = nullptr;
  Buf mean, rstd, dx;
  int64_t N = 0, C = 0;
  void forward(ParamTable& P, float* out, const float* X, int64_t N_, int64_t C_) {
    x = X;
    N = N_;
    C = C_;
    mean.resize(N);
    rstd.resize(N);
    ops::layer_norm_forward(out, mean.data(), rstd.data(), X, P.data(ln.w), P.data(ln.b), N, C, 1e-5f);
  }
  // dX += LayerNorm'(dout)
  void backward(ParamTable& P, const float* dout, float* dX) {
    dx.resize(N * C);
    ops::layer_norm_backward(dx.data(), P.grad(ln.w), P.grad(ln.b), dout, x, P.data(ln.w), mean.data(), rstd.data(),
                             N, C);
    add_into(dX, dx.data(), N * C);
  }
};

// Pre-LN residual sublayer: out = X + dropout(f(LN(X))). norm() gives LN(X); residual() finishes the sublayer.
struct PreNorm {
  LayerNormCache norm_cache;
  Buf h, drop, dh;
  const float* x = nullptr;
  int64_t n = 0;
  const float* norm(ParamTable& P, const float* X, int64_t N, int64_t C) {
    x = X;
    n = N * C;
    h.resize(n);
    norm_cache.forward(P, h.data(), X, N, C);
    return h.data();
  }
  void residual(float* out, const float* f, Rng* rng, float p) {
    if (rng && p > 0.0f) {
      drop.resize(n);
      ops::dropout_mask(drop.data(), n, p, *rng);
      const float* dm = drop.data();
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = x[i] + f[i] * dm[i];
    } else {
      drop.clear();
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = x[i] + f[i];
    }
  }
  // dX += dout (dX = dout when dX_fresh); df = dout * dropout mask (written)
  void backward_residual(const float* dout, float* dX, float* df, bool dX_fresh = false) {
    if (dX_fresh)
      std::memcpy(dX, dout, sizeof(float) * n);
    else
      add_into(dX, dout, n);
    const float* dm = drop.empty() ? nullptr : drop.data();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) df[i] = dm ? dout[i] * dm[i] : dout[i];
  }
  // dh is the gradient of f's input; dX += LN'(dh)
  void backward_norm(ParamTable& P, const float* dh_, float* dX) { norm_cache.backward(P, dh_, dX); }
  float* zeroed_dh() {
    resize_zero(dh, n);
    return dh.data();
  }
};

struct EncoderBlock {
  MHA attention;
  FFN ffn;
  AddNorm addnorm1, addnorm2;  // post-LN (d2l)
  PreNorm pre1, pre2;          // pre-LN; share the addnorm LayerNorm parameters
  Buf attn_out, Y, ffn_out, out, dY, d_attn, d_ffn;

  void forward(ParamTable& P, bool pre, const float* x, int64_t B, int64_t L, int64_t H,
               const ops::AttentionMask& mask, Rng* rng, float p) {
    const int64_t N = B * L;
    for (Buf* b : {&attn_out, &Y, &ffn_out, &out}) b->resize(N * H);
    if (!pre) {
      attention.forward(P, attn_out.data(), x, x, B, L, L, mask, rng, p);
      addnorm1.forward(P, Y.data(), x, attn_out.data(), N, H, rng, p);
      ffn.forward(P, ffn_out.data(), Y.data(), N);
      addnorm2.forward(P, out.data(), Y.data(), ffn_out.data(), N, H, rng, p);
    } else {
      const float* h = pre1.norm(P, x, N, H);
      attention.forward(P, attn_out.data(), h, h, B, L, L, mask, rng, p);
      pre1.residual(Y.data(), attn_out.data(), rng, p);
      const float* h2 = pre2.norm(P, Y.data(), N, H);
      ffn.forward(P, ffn_out.data(), h2, N);
      pre2.residual(out.data(), ffn_out.data(), rng, p);
    }
  }

  // dx += d(out)/d(x) applied to dout
  void backward(ParamTable& P, bool pre, const float* dout, float* dx, int64_t N, int64_t H) {
    // dY, d_ffn, d_attn are written by their first user (no zero-fill).
    for (Buf* b : {&dY, &d_ffn, &d_attn}) b->resize(N * H);
    if (!pre) {
      addnorm2.backward(P, dout, dY.data(), d_ffn.data(), /*dX_fresh=*/true);
      ffn.backward(P, d_ffn.data(), dY.data());
      addnorm1.backward(P, dY.data(), dx, d_attn.data());
      attention.backward(P, d_attn.data(), dx, dx);
    } else {
      pre2.backward_residual(dout, dY.data(), d_ffn.data(), /*dX_fresh=*/true);
      float* dh2 = pre2.zeroed_dh();
      ffn.backward(P, d_ffn.data(), dh2);
      pre2.backward_norm(P, dh2, dY.data());
      pre1.backward_residual(dY.data(), dx, d_attn.data());
      float* dh1 = pre1.zeroed_dh();
      attention.backward(P, d_attn.data(), dh1, dh1);
      pre1.backward_norm(P, dh1, dx);
    }
  }
};

struct DecoderBlock {
  MHA attention1, attention2;
  FFN ffn;
  AddNorm addnorm1, addnorm2, addnorm3;
  PreNorm pre1, pre2, pre3;
  Buf a1, Z1, a2, Z2, f, out;
  Buf dZ1, dZ2, d_a1, d_a2, d_f;

  void forward(ParamTable& P, bool pre, const float* x, const float* enc, int64_t B, int64_t Lt, int64_t Ls,
               int64_t H, const ops::AttentionMask& self_mask, const ops::AttentionMask& src_mask, Rng* rng, float p) {
    const int64_t N = B * Lt;
    for (Buf* b : {&a1, &Z1, &a2, &Z2, &f, &out}) b->resize(N * H);
    if (!pre) {
      attention1.forward(P, a1.data(), x, x, B, Lt, Lt, self_mask, rng, p);
      addnorm1.forward(P, Z1.data(), x, a1.data(), N, H, rng, p);
      attention2.forward(P, a2.data(), Z1.data(), enc, B, Lt, Ls, src_mask, rng, p);
      addnorm2.forward(P, Z2.data(), Z1.data(), a2.data(), N, H, rng, p);
      ffn.forward(P, f.data(), Z2.data(), N);
      addnorm3.forward(P, out.data(), Z2.data(), f.data(), N, H, rng, p);
    } else {
      const float* h1 = pre1.norm(P, x, N, H);
      attention1.forward(P, a1.data(), h1, h1, B, Lt, Lt, self_mask, rng, p);
      pre1.residual(Z1.data(), a1.data(), rng, p);
      const float* h2 = pre2.norm(P, Z1.data(), N, H);
      attention2.forward(P, a2.data(), h2, enc, B, Lt, Ls, src_mask, rng, p);
      pre2.residual(Z2.data(), a2.data(), rng, p);
      const float* h3 = pre3.norm(P, Z2.data(), N, H);
      ffn.forward(P, f.data(), h3, N);
      pre3.residual(out.data(), f.data(), rng, p);
    }
  }

  // dx += d(out)/d(x) dout; d_enc += d(out)/d(enc) dout
  void backward(ParamTable& P, bool pre, const float* dout, float* dx, float* d_enc, int64_t N, int64_t H) {
    // Written by their first user (no zero-fill).
    for (Buf* b : {&dZ1, &dZ2, &d_a1, &d_a2, &d_f}) b->resize(N * H);
    if (!pre) {
      addnorm3.backward(P, dout, dZ2.data(), d_f.data(), /*dX_fresh=*/true);
      ffn.backward(P, d_f.data(), dZ2.data());
      addnorm2.backward(P, dZ2.data(), dZ1.data(), d_a2.data(), /*dX_fresh=*/true);
      attention2.backward(P, d_a2.data(), dZ1.data(), d_enc);
      addnorm1.backward(P, dZ1.data(), dx, d_a1.data());
      attention1.backward(P, d_a1.data(), dx, dx);
    } else {
      pre3.backward_residual(dout, dZ2.data(), d_f.data(), /*dX_fresh=*/true);
      float* dh3 = pre3.zeroed_dh();
      ffn.backward(P, d_f.data(), dh3);
      pre3.backward_norm(P, dh3, dZ2.data());
      pre2.backward_residual(dZ2.data(), dZ1.data(), d_a2.data(), /*dX_fresh=*/true);
      float* dh2 = pre2.zeroed_dh();
      attention2.backward(P, d_a2.data(), dh2, d_enc);
      pre2.backward_norm(P, dh2, dZ1.data());
      pre1.backward_residual(dZ1.data(), dx, d_a1.data());
      float* dh1 = pre1.zeroed_dh();
      attention1.backward(P, d_a1.data(), dh1, dh1);
      pre1.backward_norm(P, dh1, dx);
    }
  }
};

// Embedding * sqrt(num_hiddens) + P[pos], then dropout.
struct EmbedPos {
  int64_t weight = -1;
  int64_t vocab = 0;
  Buf drop;
  std::vector<int64_t> ids;
  int64_t N = 0;
};

}  // namespace

struct Seq2SeqModel::Impl {
  EmbedPos enc_emb, dec_emb;
  std::vector<EncoderBlock> enc;
  std::vector<DecoderBlock> dec;
  LayerNormCache enc_ln, dec_ln;  // pre-LN only
  LinearP dense;
  Buf P;  // [max_len, H] positional encoding
  Buf enc_x0, dec_x0, enc_final, dec_final, logits, dlogits, d_enc_out, d_dec_x, dx_a, dx_b;
  std::vector<float> row_weight, token_loss;
  PackedTable packed;  // inference weights (prepare_inference); empty = use the parameters directly
  std::vector<ops::PackedLinear> dec_qkv;  // per decoder layer W_q|W_k|W_v of self-attention as one product
  ops::ComputeType precision = ops::ComputeType::F32;  // training GEMMs (set_precision)
};

Seq2SeqModel::~Seq2SeqModel() = default;

void Seq2SeqModel::set_precision(ops::ComputeType precision) {
  if (precision == ops::ComputeType::I8)
    throw std::invalid_argument("training precision must be fp32 or bf16, not int8");
  if (precision == ops::ComputeType::BF16) ops::require_bf16_gemm();
  impl_->precision = precision;
}
ops::ComputeType Seq2SeqModel::precision() const { return impl_->precision; }

void Seq2SeqModel::prepare_inference(ops::ComputeType dtype, bool quantize_output_projection) {
  Impl& m = *impl_;
  m.packed.clear();
  m.dec_qkv.clear();
  auto pack = [&](const LinearP& l, ops::ComputeType ct) {
    m.packed.emplace(l.w, ops::PackedLinear(params_.data(l.w), l.b >= 0 ? params_.data(l.b) : nullptr, l.in, l.out, ct));
  };
  auto mha = [&](const MHA& a) {
    for (const LinearP* l : {&a.W_q, &a.W_k, &a.W_v, &a.W_o}) pack(*l, dtype);
  };
  for (const auto& blk : m.enc) {
    mha(blk.attention);
    pack(blk.ffn.dense1, dtype);
    pack(blk.ffn.dense2, dtype);
  }
  for (const auto& blk : m.dec) {
    mha(blk.attention1);
    mha(blk.attention2);
    pack(blk.ffn.dense1, dtype);
    pack(blk.ffn.dense2, dtype);
  }
  // The output projection picks the words: it stays fp32 unless asked (issue 9: quantise it only where measured
  // to be safe; on the Multi30k recipe's model int8 there cost 0.05 BLEU beyond int8 elsewhere).
  pack(m.dense, quantize_output_projection ? dtype : ops::ComputeType::F32);
  // A decoder step multiplies a few rows: one product for the three self-attention projections, not three.
  m.dec_qkv.clear();
  const int64_t H = config_.num_hiddens;
  for (const auto& blk : m.dec) {
    const MHA& a = blk.attention1;
    std::vector<float> w(3 * H * H), b;
    const bool bias = a.W_q.b >= 0;
    if (bias) b.resize(3 * H);
    int64_t i = 0;
    for (const LinearP* l : {&a.W_q, &a.W_k, &a.W_v}) {
      std::memcpy(w.data() + i * H * H, params_.data(l->w), sizeof(float) * H * H);
      if (bias) std::memcpy(b.data() + i * H, params_.data(l->b), sizeof(float) * H);
      ++i;
    }
    m.dec_qkv.emplace_back(w.data(), bias ? b.data() : nullptr, H, 3 * H, dtype);
  }
}

Seq2SeqModel::Seq2SeqModel(const Seq2SeqConfig& c) : config_(c), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const int64_t H = c.num_hiddens, F = c.ffn_num_hiddens;
  const ops::Activation act = ops::parse_activation(c.activation);
  auto mha = [&](const std::string& p) {
    MHA a;
    a.W_q = add_linear(params_, p + ".W_q", H, H, c.attention_bias);
    a.W_k = add_linear(params_, p + ".W_k", H, H, c.attention_bias);
    a.W_v = add_linear(params_, p + ".W_v", H, H, c.attention_bias);
    a.W_o = add_linear(params_, p + ".W_o", H, H, c.attention_bias);
    a.heads = c.num_heads;
    return a;
  };
  auto ffn = [&](const std::string& p) {
    FFN f;
    f.dense1 = add_linear(params_, p + ".dense1", H, F, true);
    f.dense2 = add_linear(params_, p + ".dense2", F, H, true);
    f.act = act;
    return f;
  };
  auto ln = [&](const std::string& p, AddNorm& post, PreNorm& pre) {
    post.ln = add_ln(params_, p, H);
    pre.norm_cache.ln = post.ln;
  };
  // Registration order = PyTorch's named_parameters() order (module construction order).
  m.enc_emb.weight = params_.add("encoder.embedding.weight", {c.src_vocab_size, H});
  m.enc_emb.vocab = c.src_vocab_size;
  m.enc.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string p = "encoder.blks.block" + std::to_string(i);
    EncoderBlock& b = m.enc[i];
    b.attention = mha(p + ".attention");
    ln(p + ".addnorm1.ln", b.addnorm1, b.pre1);
    b.ffn = ffn(p + ".ffn");
    ln(p + ".addnorm2.ln", b.addnorm2, b.pre2);
  }
  if (c.norm_first) m.enc_ln.ln = add_ln(params_, "encoder.ln", H);
  if (c.shared_embeddings) {
    m.dec_emb.weight = m.enc_emb.weight;
  } else {
    m.dec_emb.weight = params_.add("decoder.embedding.weight", {c.tgt_vocab_size, H});
  }
  m.dec_emb.vocab = c.tgt_vocab_size;
  m.dec.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string p = "decoder.blks.block" + std::to_string(i);
    DecoderBlock& b = m.dec[i];
    b.attention1 = mha(p + ".attention1");
    ln(p + ".addnorm1.ln", b.addnorm1, b.pre1);
    b.attention2 = mha(p + ".attention2");
    ln(p + ".addnorm2.ln", b.addnorm2, b.pre2);
    b.ffn = ffn(p + ".ffn");
    ln(p + ".addnorm3.ln", b.addnorm3, b.pre3);
  }
  if (c.norm_first) m.dec_ln.ln = add_ln(params_, "decoder.ln", H);
  if (c.shared_embeddings) {
    m.dense.w = m.enc_emb.weight;  // tied output projection: logits = x E^T + b
    m.dense.b = params_.add("decoder.dense.bias", {c.tgt_vocab_size});
    m.dense.in = H;
    m.dense.out = c.tgt_vocab_size;
  } else {
    m.dense = add_linear(params_, "decoder.dense", H, c.tgt_vocab_size, true);
  }
  params_.finalize();
  for (const auto& e : params_.entries())  // LayerNorm defaults so an un-initialised model is still sane
    if (e.name.find("ln.weight") != std::string::npos)
      std::fill(params_.all_data().begin() + e.offset, params_.all_data().begin() + e.offset + e.numel, 1.0f);

  // P[pos, 2i] = sin(pos / 10000^(2i/H)), P[pos, 2i+1] = cos(...), in float32 as the reference computes it.
  m.P.assign(c.max_len * H, 0.0f);
  for (int64_t pos = 0; pos < c.max_len; ++pos)
    for (int64_t i = 0; i < H / 2; ++i) {
      float x = (float)pos / std::pow(10000.0f, (float)(2 * i) / (float)H);
      m.P[pos * H + 2 * i] = std::sin(x);
      m.P[pos * H + 2 * i + 1] = std::cos(x);
    }
}

void Seq2SeqModel::init(Rng& rng) {
  for (const auto& e : params_.entries()) {
    float* p = params_.data(params_.index_of(e.name));
    const std::string& n = e.name;
    bool is_ln = n.find(".ln.") != std::string::npos || n.rfind("encoder.ln", 0) == 0 || n.rfind("decoder.ln", 0) == 0;
    if (is_ln) {
      std::fill(p, p + e.numel, n.size() >= 6 && n.compare(n.size() - 6, 6, "weight") == 0 ? 1.0f : 0.0f);
    } else if (n.find("embedding") != std::string::npos) {
      // N(0, 1) as nn.Embedding; a matrix tied to the output projection gets N(0, 1/H) (fairseq's choice), so
      // the logits start small while the sqrt(H)-scaled input embeddings keep unit variance.
      float sd = config_.shared_embeddings ? 1.0f / std::sqrt((float)config_.num_hiddens) : 1.0f;
      for (int64_t i = 0; i < e.numel; ++i) p[i] = sd * rng.normal();
    } else if (e.shape.size() == 2) {  // Linear weight [out, in]: Xavier uniform
      float bound = std::sqrt(6.0f / (float)(e.shape[0] + e.shape[1]));
      for (int64_t i = 0; i < e.numel; ++i) p[i] = rng.uniform(-bound, bound);
    } else {  // Linear bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as nn.Linear
      float bound = 1.0f / std::sqrt((float)(n.find("dense1") != std::string::npos ? config_.num_hiddens
                                             : n.find("dense2") != std::string::npos ? config_.ffn_num_hiddens
                                                                                     : config_.num_hiddens));
      for (int64_t i = 0; i < e.numel; ++i) p[i] = rng.uniform(-bound, bound);
    }
  }
}

void Seq2SeqModel::load(const std::string& path) {
  SafeTensors st = SafeTensors::open(path);
  std::set<std::string> expected;
  for (const auto& e : params_.entries()) {
    expected.insert(e.name);
    if (!st.has(e.name)) throw std::runtime_error(path + ": missing tensor '" + e.name + "'");
    if (st.shape_of(e.name) != e.shape)
      throw std::runtime_error(path + ": tensor '" + e.name + "' has shape " + shape_str(st.shape_of(e.name)) +
                               ", config expects " + shape_str(e.shape));
    Tensor t = st.get(e.name);
    if (t.dtype() != DType::F32) throw std::runtime_error(path + ": tensor '" + e.name + "' is not floating point");
    const float* src = t.f32();
    for (int64_t i = 0; i < e.numel; ++i)
      if (!std::isfinite(src[i]))
        throw std::runtime_error(path + ": tensor '" + e.name + "' contains NaN or Inf at element " + std::to_string(i));
    std::memcpy(params_.all_data().data() + e.offset, src, sizeof(float) * e.numel);
  }
  for (const auto& n : st.names())
    if (!expected.count(n))
      throw std::runtime_error(path + ": unexpected tensor '" + n + "' (not part of a transformer_seq2seq with this config)");
}

void Seq2SeqModel::save(const std::string& path) { save_safetensors(path, params_.named_tensors()); }

// ---------------------------------------------------------------- forward / backward

namespace {

void check_ids(const int64_t* ids, int64_t n, int64_t vocab, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw std::out_of_range(std::string(what) + " id " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
}

void embed_forward(ParamTable& P, EmbedPos& e, const Buf& pe, float* out, const int64_t* ids, int64_t B, int64_t L,
                   int64_t H, Rng* rng, float p, int64_t pos_offset = 0) {
  e.N = B * L;
  e.ids.assign(ids, ids + B * L);
  ops::embedding_forward(out, ids, P.data(e.weight), B * L, e.vocab, H);
  const float scale = std::sqrt((float)H);
  for (int64_t n = 0; n < B * L; ++n) {
    const float* pr = pe.data() + ((n % L) + pos_offset) * H;
    for (int64_t h = 0; h < H; ++h) out[n * H + h] = out[n * H + h] * scale + pr[h];
  }
  if (rng && p > 0.0f) {
    e.drop.resize(B * L * H);
    ops::dropout_mask(e.drop.data(), B * L * H, p, *rng);
    ops::dropout_apply(out, out, e.drop.data(), B * L * H);
  } else {
    e.drop.clear();
  }
}

void embed_backward(ParamTable& P, EmbedPos& e, float* dout, int64_t H) {
  const float scale = std::sqrt((float)H);
  if (!e.drop.empty()) ops::dropout_apply(dout, dout, e.drop.data(), e.N * H);
  for (int64_t i = 0; i < e.N * H; ++i) dout[i] *= scale;
  ops::embedding_backward(P.grad(e.weight), dout, e.ids.data(), e.N, H);
}

}  // namespace

const float* Seq2SeqModel::encoder_forward(const int64_t* src, const int64_t* src_valid_len, int64_t B, int64_t Ls,
                                           Rng* rng) {
  Impl& m = *impl_;
  const Seq2SeqConfig& c = config_;
  const int64_t H = c.num_hiddens;
  const float p = (float)c.dropout;
  if (Ls > c.max_len) throw std::invalid_argument("source of " + std::to_string(Ls) + " tokens is longer than max_len (" + std::to_string(c.max_len) + ")");
  check_ids(src, B * Ls, c.src_vocab_size, "source");
  m.enc_x0.resize(B * Ls * H);
  embed_forward(params_, m.enc_emb, m.P, m.enc_x0.data(), src, B, Ls, H, rng, p);
  ops::AttentionMask src_mask;
  src_mask.valid_lens = src_valid_len;
  const float* x = m.enc_x0.data();
  for (auto& blk : m.enc) {
    blk.forward(params_, c.norm_first, x, B, Ls, H, src_mask, rng, p);
    x = blk.out.data();
  }
  if (c.norm_first) {
    m.enc_final.resize(B * Ls * H);
    m.enc_ln.forward(params_, m.enc_final.data(), x, B * Ls, H);
    x = m.enc_final.data();
  }
  return x;
}

// Runs encoder and decoder in teacher-forcing mode; leaves every cache filled and impl_->logits [B*Lt, V].
void Seq2SeqModel::forward_train(const Seq2SeqBatch& b, Rng* rng) {
  Impl& m = *impl_;
  const Seq2SeqConfig& c = config_;
  const int64_t B = b.batch, Ls = b.src_len, Lt = b.tgt_len, H = c.num_hiddens;
  const float p = (float)c.dropout;
  if (Lt > c.max_len) throw std::invalid_argument("target longer than max_len (" + std::to_string(c.max_len) + ")");
  check_ids(b.dec_input, B * Lt, c.tgt_vocab_size, "target");
  const float* enc_out = encoder_forward(b.src, b.src_valid_len, B, Ls, rng);
  // Decoder (training mode: causal self-attention, d2l's dec_valid_lens = 1..Lt)
  m.dec_x0.resize(B * Lt * H);
  embed_forward(params_, m.dec_emb, m.P, m.dec_x0.data(), b.dec_input, B, Lt, H, rng, p);
  ops::AttentionMask causal, src_mask;
  causal.causal = true;
  src_mask.valid_lens = b.src_valid_len;
  const float* x = m.dec_x0.data();
  for (auto& blk : m.dec) {
    blk.forward(params_, c.norm_first, x, enc_out, B, Lt, Ls, H, causal, src_mask, rng, p);
    x = blk.out.data();
  }
  if (c.norm_first) {
    m.dec_final.resize(B * Lt * H);
    m.dec_ln.forward(params_, m.dec_final.data(), x, B * Lt, H);
    x = m.dec_final.data();
  }
  m.logits.resize(B * Lt * c.tgt_vocab_size);
  linear_fwd(params_, m.dense, m.logits.data(), x, B * Lt);
}

LossResult Seq2SeqModel::forward_backward(const Seq2SeqBatch& b, Rng* rng, float label_smoothing, bool token_mean,
                                          int64_t token_denominator) {
  Impl& m = *impl_;
  const Seq2SeqConfig& c = config_;
  const int64_t B = b.batch, Ls = b.src_len, Lt = b.tgt_len, H = c.num_hiddens, V = c.tgt_vocab_size;
  check_ids(b.labels, B * Lt, V, "label");
  static const bool matmul_f32 = [] {
    const char* e = std::getenv("TFM_TRAIN_GEMM");
    return e && std::string(e) == "matmul";
  }();
  TrainGemmScope gemm_scope(m.precision == ops::ComputeType::BF16 ? &ops::gemm_bf16
                            : matmul_f32                          ? &ops::gemm_f32_matmul
                                                                  : nullptr);
  forward_train(b, rng);
  // Loss: d2l MaskedSoftmaxCELoss = per-sequence mean over Lt of mask * CE, summed over the batch; or the mean
  // over valid tokens (token_mean).
  LossResult r;
  for (int64_t i = 0; i < B; ++i) r.num_tokens += std::min<int64_t>(std::max<int64_t>(b.tgt_valid_len[i], 0), Lt);
  const int64_t per_seq = b.loss_len > 0 ? b.loss_len : Lt;
  const int64_t denom = token_denominator > 0 ? token_denominator : std::max<int64_t>(r.num_tokens, 1);
  const float w = token_mean ? 1.0f / (float)denom : 1.0f / (float)per_seq;
  m.row_weight.assign(B * Lt, 0.0f);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t t = 0; t < Lt && t < b.tgt_valid_len[i]; ++t) m.row_weight[i * Lt + t] = w;
  m.dlogits.resize(B * Lt * V);
  std::vector<float>& token_loss = m.token_loss;
  token_loss.resize(B * Lt);
  cross_entropy_forward_backward(token_loss.data(), m.dlogits.data(), m.logits.data(), b.labels,
                                 m.row_weight.data(), B * Lt, V, label_smoothing);
  for (int64_t i = 0; i < B * Lt; ++i) {
    if (m.row_weight[i] == 0.0f) continue;
    r.loss_sum += (double)token_loss[i] * m.row_weight[i];
    r.token_loss_sum += token_loss[i];
  }
  // Backward through the decoder. dx_a / dx_b alternate as "gradient of this block's output / input".
  const float* dec_top = c.norm_first ? m.dec_final.data() : m.dec.back().out.data();
  resize_zero(m.d_dec_x, B * Lt * H);
  linear_bwd(params_, m.dense, m.d_dec_x.data(), m.dlogits.data(), dec_top, B * Lt);
  if (c.norm_first) {
    resize_zero(m.dx_a, B * Lt * H);
    m.dec_ln.backward(params_, m.d_dec_x.data(), m.dx_a.data());
  } else {
    m.dx_a = m.d_dec_x;
  }
  resize_zero(m.d_enc_out, B * Ls * H);
  for (int64_t i = (int64_t)m.dec.size() - 1; i >= 0; --i) {
    resize_zero(m.dx_b, B * Lt * H);
    m.dec[i].backward(params_, c.norm_first, m.dx_a.data(), m.dx_b.data(), m.d_enc_out.data(), B * Lt, H);
    m.dx_a.swap(m.dx_b);
  }
  embed_backward(params_, m.dec_emb, m.dx_a.data(), H);
  // Backward through the encoder.
  if (c.norm_first) {
    resize_zero(m.dx_a, B * Ls * H);
    m.enc_ln.backward(params_, m.d_enc_out.data(), m.dx_a.data());
  } else {
    m.dx_a = m.d_enc_out;
  }
  for (int64_t i = (int64_t)m.enc.size() - 1; i >= 0; --i) {
    resize_zero(m.dx_b, B * Ls * H);
    m.enc[i].backward(params_, c.norm_first, m.dx_a.data(), m.dx_b.data(), B * Ls, H);
    m.dx_a.swap(m.dx_b);
  }
  embed_backward(params_, m.enc_emb, m.dx_a.data(), H);
  return r;
}

Tensor Seq2SeqModel::forward_logits(const Seq2SeqBatch& b) {
  forward_train(b, nullptr);
  Tensor t = Tensor::empty({b.batch, b.tgt_len, config_.tgt_vocab_size});
  std::memcpy(t.f32(), impl_->logits.data(), t.nbytes());
  return t;
}

// ---------------------------------------------------------------- inference with a KV cache

Tensor Seq2SeqModel::encode(const int64_t* src, const int64_t* src_valid_len, int64_t B, int64_t Ls,
                            std::vector<Tensor>* attention_weights) {
  PackedScope packed(impl_->packed);
  decode_profile::Timer tm(decode_profile::kEncoder);
  const float* x = encoder_forward(src, src_valid_len, B, Ls, nullptr);
  if (attention_weights) {
    attention_weights->clear();
    for (auto& blk : impl_->enc) {
      Tensor w = Tensor::empty({B, config_.num_heads, Ls, Ls});
      std::memcpy(w.f32(), blk.attention.probs.data(), w.nbytes());
      attention_weights->push_back(w);
    }
  }
  Tensor out = Tensor::empty({B, Ls, config_.num_hiddens});
  std::memcpy(out.f32(), x, out.nbytes());
  return out;
}

namespace {

// Attention of one query row per batch row (a decoder step) over keys/values gathered by row index:
// key j of batch row r is buffer row key_row(r, j) of kbuf / vbuf ([rows, heads * head_dim]), the first
// limit(r) keys are visible. The arithmetic is attention_forward's for q_len 1 (its small-product path in
// ops/gemm.cpp: a simd dot product per key, masked softmax with fast_exp, then out += p_j v_j key by key), so
// a cached step equals the teacher-forced forward as before. probs, when non-null: [R, heads, Lk], written.
template <class KeyRow, class Limit>
void step_attention(float* out, float* probs, const float* q, const float* kbuf, const float* vbuf, int64_t R,
                    int64_t heads, int64_t Dh, int64_t Lk, KeyRow key_row, Limit limit) {
  const int64_t H = heads * Dh;
  const float scale = 1.0f / std::sqrt((float)Dh);
  // Threads only where there is work enough to pay for waking them (a one-sentence step is a few microseconds).
#pragma omp parallel if (R * heads * Lk * Dh >= (1 << 16))
  {
    thread_local std::vector<float> scratch;
    if ((int64_t)scratch.size() < Lk) scratch.resize(Lk);
#pragma omp for schedule(static)
    for (int64_t rh = 0; rh < R * heads; ++rh) {
      const int64_t r = rh / heads, h = rh % heads;
      const float* qr = q + r * H + h * Dh;
      float* o = out + r * H + h * Dh;
      float* s = probs ? probs + rh * Lk : scratch.data();
      const int64_t lim = std::min<int64_t>(std::max<int64_t>(limit(r), 0), Lk);
      for (int64_t c = 0; c < Dh; ++c) o[c] = 0.0f;
      float mx = -INFINITY;
      for (int64_t j = 0; j < lim; ++j) {
        const float* kr = kbuf + key_row(r, j) * H + h * Dh;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < Dh; ++c) acc += qr[c] * kr[c];
        s[j] = scale * acc;
        mx = s[j] > mx ? s[j] : mx;
      }
      if (mx == -INFINITY) {  // no visible key: zeros, as attention_forward
        for (int64_t j = 0; j < Lk; ++j) s[j] = 0.0f;
        continue;
      }
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < lim; ++j) {
        s[j] = vm::fast_exp(s[j] - mx);
        sum += s[j];
      }
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int64_t j = 0; j < lim; ++j) s[j] *= inv;
      for (int64_t j = lim; j < Lk; ++j) s[j] = 0.0f;
      for (int64_t j = 0; j < lim; ++j) {
        const float a = s[j];
        if (a == 0.0f) continue;
        const float* vr = vbuf + key_row(r, j) * H + h * Dh;
#pragma omp simd
        for (int64_t c = 0; c < Dh; ++c) o[c] += a * vr[c];
      }
    }
  }
}

// decode_step's work buffers, kept in DecoderCache::scratch so a step allocates nothing once warm.
enum StepBuf { kX, kH, kQ, kQKV, kFfnHidden, kCtx, kA, kY, kProbsSelf, kProbsCross, kNumStepBufs };

}  // namespace

void Seq2SeqModel::start_decoding(DecoderCache& cache, const Tensor& enc_out, const int64_t* src_valid_len,
                                  int64_t max_steps) {
  Impl& m = *impl_;
  PackedScope packed(m.packed);
  const int64_t B = enc_out.size(0), Ls = enc_out.size(1), H = config_.num_hiddens;
  cache.batch = B;
  cache.src_len = Ls;
  cache.steps = 0;
  cache.capacity = max_steps;
  cache.src_valid_len.assign(src_valid_len, src_valid_len + B);
  cache.cross_row.resize(B);
  for (int64_t b = 0; b < B; ++b) cache.cross_row[b] = b;
  cache.kv_index.assign(B * max_steps, 0);
  cache.kv_rows_used = 0;
  const size_t L = m.dec.size();
  cache.self_k.resize(L);
  cache.self_v.resize(L);
  for (size_t l = 0; l < L; ++l) {  // greedy needs exactly B * max_steps rows; beam search grows it
    cache.self_k[l].clear();
    cache.self_v[l].clear();
    cache.self_k[l].reserve(B * max_steps * H);
    cache.self_v[l].reserve(B * max_steps * H);
  }
  decode_profile::Timer tm(decode_profile::kCrossKV);
  cache.cross_k.assign(L, Buf(B * Ls * H));
  cache.cross_v.assign(L, Buf(B * Ls * H));
  for (size_t l = 0; l < L; ++l) {
    linear_fwd(params_, m.dec[l].attention2.W_k, cache.cross_k[l].data(), enc_out.f32(), B * Ls);
    linear_fwd(params_, m.dec[l].attention2.W_v, cache.cross_v[l].data(), enc_out.f32(), B * Ls);
  }
  cache.scratch.resize(kNumStepBufs);
}

void Seq2SeqModel::decode_step(DecoderCache& cache, const int64_t* tokens, float* logits, PositionMode mode,
                               std::vector<std::vector<float>>* cross_attention) {
  Impl& m = *impl_;
  PackedScope packed(m.packed);
  const Seq2SeqConfig& c = config_;
  const int64_t B = cache.batch, Ls = cache.src_len, H = c.num_hiddens, nh = c.num_heads, Dh = H / nh;
  const int64_t t = cache.steps, cap = cache.capacity;
  const bool pre = c.norm_first;
  if (t >= cap) throw std::logic_error("decode_step: cache is full");
  int64_t pos = mode == PositionMode::kAbsolute ? t : 0;
  if (pos >= c.max_len) throw std::invalid_argument("decoding past max_len");
  check_ids(tokens, B, c.tgt_vocab_size, "target");
  cache.scratch.resize(kNumStepBufs);
  auto buf = [&](StepBuf i, int64_t n) {
    Buf& v = cache.scratch[i];
    if ((int64_t)v.size() < n) v.resize(n);
    return v.data();
  };
  float *x = buf(kX, B * H), *h = buf(kH, B * H), *q = buf(kQ, B * H),
        *ctx = buf(kCtx, B * H), *a = buf(kA, B * H), *y = buf(kY, B * H);
  float* probs_self = cross_attention ? buf(kProbsSelf, B * nh * (t + 1)) : nullptr;
  float* probs_cross = cross_attention ? buf(kProbsCross, B * nh * Ls) : nullptr;
  namespace dp = decode_profile;
  dp::Timer tm(dp::kOther);
  if (dp::enabled()) {
    dp::totals().add_step(B);
  }
  ops::embedding_forward(x, tokens, params_.data(m.dec_emb.weight), B, c.tgt_vocab_size, H);
  const float scale = std::sqrt((float)H);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < H; ++i) x[b * H + i] = x[b * H + i] * scale + m.P[pos * H + i];
  auto layer_norm = [&](const LNP& ln, float* out, const float* in) {
    ops::layer_norm_forward(out, nullptr, nullptr, in, params_.data(ln.w), params_.data(ln.b), B, H, 1e-5f);
  };
  // One sublayer: pre-LN x += f(LN(x)); post-LN x = LN(x + f(x)). f reads its input from `in`, writes `a`.
  auto sublayer = [&](const LNP& ln, auto&& f) {
    if (pre) {
      layer_norm(ln, h, x);
      f(h);
      for (int64_t i = 0; i < B * H; ++i) x[i] += a[i];
    } else {
      f(x);
      ops::add_layer_norm_forward(x, nullptr, x, a, params_.data(ln.w), params_.data(ln.b), B, H,
                                  1e-5f);  // x = LN(x + a), one pass
    }
  };
  // This step's keys/values go to buffer rows base .. base + B - 1 of every layer.
  const int64_t base = cache.kv_rows_used;
  for (int64_t b = 0; b < B; ++b) cache.kv_index[b * cap + t] = base + b;
  const int64_t* kv_index = cache.kv_index.data();
  const int64_t* cross_row = cache.cross_row.data();
  const int64_t* src_vl = cache.src_valid_len.data();
  if (cross_attention) cross_attention->clear();
  for (size_t l = 0; l < m.dec.size(); ++l) {
    DecoderBlock& blk = m.dec[l];
    // Self-attention over every step so far: row b's key of step s is buffer row kv_index[b, s].
    sublayer(blk.addnorm1.ln, [&](const float* in) {
      Buf& kc = cache.self_k[l];
      Buf& vc = cache.self_v[l];
      kc.resize((base + B) * H);
      vc.resize((base + B) * H);
      tm.next(dp::kSelfProj);
      if (l < m.dec_qkv.size() && t_packed) {  // one product, then K and V rows into the cache
        float* qkv = buf(kQKV, B * 3 * H);
        m.dec_qkv[l].forward(qkv, in, B);
        for (int64_t b = 0; b < B; ++b) {
          std::memcpy(q + b * H, qkv + b * 3 * H, sizeof(float) * H);
          std::memcpy(kc.data() + (base + b) * H, qkv + b * 3 * H + H, sizeof(float) * H);
          std::memcpy(vc.data() + (base + b) * H, qkv + b * 3 * H + 2 * H, sizeof(float) * H);
        }
      } else {
        linear_fwd(params_, blk.attention1.W_q, q, in, B);
        linear_fwd(params_, blk.attention1.W_k, kc.data() + base * H, in, B);
        linear_fwd(params_, blk.attention1.W_v, vc.data() + base * H, in, B);
      }
      tm.next(dp::kSelfAttn);
      step_attention(
          ctx, probs_self, q, kc.data(), vc.data(), B, nh, Dh, t + 1,
          [&](int64_t r, int64_t j) { return kv_index[r * cap + j]; }, [&](int64_t) { return t + 1; });
      tm.next(dp::kSelfProj);
      linear_fwd(params_, blk.attention1.W_o, a, ctx, B);
      tm.next(dp::kOther);
    });
    // Cross-attention over the cached encoder keys/values of each row's sentence.
    sublayer(blk.addnorm2.ln, [&](const float* in) {
      tm.next(dp::kCrossProj);
      linear_fwd(params_, blk.attention2.W_q, q, in, B);
      tm.next(dp::kCrossAttn);
      step_attention(
          ctx, probs_cross, q, cache.cross_k[l].data(), cache.cross_v[l].data(), B, nh, Dh, Ls,
          [&](int64_t r, int64_t j) { return cross_row[r] * Ls + j; }, [&](int64_t r) { return src_vl[r]; });
      if (cross_attention) cross_attention->emplace_back(probs_cross, probs_cross + B * nh * Ls);
      tm.next(dp::kCrossProj);
      linear_fwd(params_, blk.attention2.W_o, a, ctx, B);
      tm.next(dp::kOther);
    });
    sublayer(blk.addnorm3.ln, [&](const float* in) {
      tm.next(dp::kFfn);
      // Packed ReLU FFN: the ReLU as the first product's post-op (exact: max(x, 0) either way), no extra pass.
      const auto d1 = t_packed ? t_packed->find(blk.ffn.dense1.w) : PackedTable::const_iterator{};
      if (t_packed && blk.ffn.act == ops::Activation::Relu && d1 != t_packed->end()) {
        float* hidden = buf(kFfnHidden, B * blk.ffn.dense1.out);
        d1->second.forward(hidden, in, B, ops::Epilogue::Relu);
        linear_fwd(params_, blk.ffn.dense2, a, hidden, B);
      } else {
        blk.ffn.forward(params_, a, in, B);
      }
      tm.next(dp::kOther);
    });
  }
  if (pre) {
    layer_norm(m.dec_ln.ln, y, x);
    std::swap(x, y);
  }
  tm.next(dp::kOutProj);
  linear_fwd(params_, m.dense, logits, x, B);
  cache.kv_rows_used = base + B;
  cache.steps++;
}

void Seq2SeqModel::reorder_cache(DecoderCache& cache, const std::vector<int64_t>& rows, int64_t /*hidden*/) {
  // Only indices move: row r now reads the keys/values of old row rows[r] (steps 0 .. steps-1) and its sentence.
  const int64_t R = (int64_t)rows.size(), cap = cache.capacity, T = cache.steps;
  std::vector<int64_t> idx(R * cap), cross(R), vl(R);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t o = rows[r];
    if (o < 0 || o >= cache.batch) throw std::out_of_range("reorder_cache: row " + std::to_string(o) + " of " +
                                                           std::to_string(cache.batch));
    std::copy(cache.kv_index.begin() + o * cap, cache.kv_index.begin() + o * cap + T, idx.begin() + r * cap);
    cross[r] = cache.cross_row[o];
    vl[r] = cache.src_valid_len[o];
  }
  cache.kv_index.swap(idx);
  cache.cross_row.swap(cross);
  cache.src_valid_len.swap(vl);
  cache.batch = R;
}

}  // namespace tfm
