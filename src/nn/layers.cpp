#include "nn/layers.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>

#include "core/profile.h"
#include "core/threading.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/gemm_bf16.h"
#include "ops/layer_norm.h"
#include "ops/matmul.h"

namespace tfm::nn {

namespace {
std::vector<Buf>& scratch_pool() {
  thread_local std::vector<Buf> pool;
  return pool;
}
}  // namespace

float* take_scratch(Buf& b, int64_t n) {
  if ((int64_t)b.capacity() < n) {
    std::vector<Buf>& pool = scratch_pool();
    int64_t best = -1;  // the smallest pooled buffer that holds n
    for (int64_t i = 0; i < (int64_t)pool.size(); ++i)
      if ((int64_t)pool[i].capacity() >= n && (best < 0 || pool[i].capacity() < pool[best].capacity())) best = i;
    if (best >= 0) {
      // Over twice n, it is freed instead: a small request would hold its excess (for as long as the buffer is
      // kept) while the next large request allocated another.
      if ((int64_t)pool[best].capacity() <= 2 * n) b.swap(pool[best]);  // pool[best] now holds b's old storage
      std::swap(pool[best], pool.back());
      pool.pop_back();  // freed: b's old storage (too small), or the oversized buffer
    }
  }
  b.resize(n);
  return b.data();
}

const float* dropout_mask_scratch(Buf& scratch, const ops::DropoutDraw& d) {
  if (!d.defined()) return nullptr;
  float* m = take_scratch(scratch, d.n);
  ops::dropout_fill(m, d);
  return m;
}

void give_scratch(Buf& b) {
  if (b.capacity() == 0) return;
  std::vector<Buf>& pool = scratch_pool();
  pool.push_back(std::move(b));
  b = Buf();
  if (pool.size() > 32) {  // bounded: the smallest goes (a model switching shapes leaves no pile behind)
    size_t small = 0;
    for (size_t i = 1; i < pool.size(); ++i)
      if (pool[i].capacity() < pool[small].capacity()) small = i;
    std::swap(pool[small], pool.back());
    pool.pop_back();
  }
}

// ---------------------------------------------------------------- Linear

Linear Linear::load(const Vars& vb, int64_t in, int64_t out, bool has_bias) {
  Linear l;
  l.weight = vb.get("weight", {out, in});
  if (has_bias) l.bias = vb.get("bias", {out});
  l.in_features = in;
  l.out_features = out;
  return l;
}

Linear Linear::from_weights(const float* weight, const float* bias, int64_t in, int64_t out, ops::ComputeType ct) {
  Linear l;
  l.in_features = in;
  l.out_features = out;
  l.packed = ops::PackedLinear(weight, bias, in, out, ct);
  return l;
}

Linear Linear::load_packed(const std::vector<Vars>& parts, int64_t in, int64_t out, ops::ComputeType ct,
                           bool has_bias) {
  const int64_t n = (int64_t)parts.size();
  std::vector<const int8_t*> q(n);
  std::vector<const float*> sc(n);
  int64_t quantised = 0;
  for (int64_t i = 0; i < n; ++i) {
    q[i] = parts[i].get_int8("weight", {out, in}, &sc[i]);
    quantised += q[i] != nullptr;
  }
  Linear l;
  l.in_features = in;
  l.out_features = n * out;
  if (quantised == n && ct != ops::ComputeType::I8) {
    // A `tfm convert --dtype int8` folder asked for another compute type: dequantised (w = q * scale of its row)
    // and packed for it, so the model computes in the type it reports.
    std::vector<float> weight(n * out * in), bias(has_bias ? n * out : 0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c) weight[(i * out + r) * in + c] = (float)q[i][r * in + c] * sc[i][r];
      parts[i].release_bytes(q[i], (size_t)(out * in));
      if (!has_bias) continue;
      Param b = parts[i].get("bias", {out});
      std::memcpy(bias.data() + i * out, b.data(), sizeof(float) * out);
    }
    l.packed = ops::PackedLinear(weight.data(), has_bias ? bias.data() : nullptr, in, n * out, ct);
    return l;
  }
  std::vector<float> bias(has_bias ? n * out : 0);
  const float* bias_ptr = has_bias ? bias.data() : nullptr;
  auto get_biases = [&] {  // after the weights, so that a missing weight is named first
    for (int64_t i = 0; i < n && has_bias; ++i) {
      Param b = parts[i].get("bias", {out});
      std::memcpy(bias.data() + i * out, b.data(), sizeof(float) * out);
    }
  };
  // Weights stored in the compute type (`tfm convert --dtype int8 / bf16` folders) are used where they lie in the
  // mapped file and packed only at their second use (ops::PackedLinear::lazy), as fp32 weights are below: a model
  // loaded to run once reads each page once and never reorders. The sources' releasers keep the pages valid until
  // the packing drops them. False (nothing done) when the source cannot keep them past the load.
  auto load_lazy = [&](std::vector<const void*> w, size_t part_bytes, const float* weight_scale) {
    std::vector<std::function<void()>> releasers(n);
    for (int64_t i = 0; i < n; ++i)
      if (!(releasers[i] = parts[i].bytes_releaser(w[i], part_bytes))) return false;
    get_biases();
    l.packed = ops::PackedLinear::lazy(std::move(w), weight_scale, bias_ptr, in, out, ct, nullptr,
                                       [releasers = std::move(releasers)] {
                                         for (const auto& r : releasers) r();
                                       });
    return true;
  };
  if (quantised == n) {
    std::vector<float> scale(n * out);
    for (int64_t i = 0; i < n; ++i) std::memcpy(scale.data() + i * out, sc[i], sizeof(float) * out);
    if (load_lazy(std::vector<const void*>(q.begin(), q.end()), (size_t)(out * in), scale.data())) return l;
    std::vector<int8_t> qw(n * out * in);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(qw.data() + i * out * in, q[i], (size_t)(out * in));
      parts[i].release_bytes(q[i], (size_t)(out * in));
    }
    get_biases();
    l.packed = ops::PackedLinear::from_int8(qw.data(), scale.data(), bias_ptr, in, n * out);
    return l;
  }
  // The weights are read once, by the packing: the packed copy is checked for NaN / Inf instead of the file, and
  // only when it fails is the file read again, for the message naming the tensor and the element (the checked
  // get throws it; a bf16 weight that merely rounded to infinity passes there and loads as before).
  auto check_weights = [&] {
    for (int64_t i = 0; i < n; ++i) (void)parts[i].get("weight", {out, in});
  };
  if (ct == ops::ComputeType::BF16) {  // a `tfm convert --dtype bf16` folder: packed as stored, no fp32 round trip
    std::vector<const uint16_t*> h(n);
    int64_t stored = 0;
    for (int64_t i = 0; i < n; ++i) stored += (h[i] = parts[i].get_bf16("weight", {out, in})) != nullptr;
    if (stored == n && load_lazy(std::vector<const void*>(h.begin(), h.end()), sizeof(uint16_t) * out * in, nullptr)) {
      if (!l.packed.all_finite()) check_weights();
      return l;
    }
    if (stored == n) {
      get_biases();
      std::vector<uint16_t> joined;
      if (n > 1) {
        joined.resize(n * out * in);
        for (int64_t i = 0; i < n; ++i) std::memcpy(joined.data() + i * out * in, h[i], sizeof(uint16_t) * out * in);
      }
      l.packed = ops::PackedLinear::from_bf16(n > 1 ? joined.data() : h[0], bias_ptr, in, n * out);
      if (!l.packed.all_finite()) check_weights();
      for (int64_t i = 0; i < n; ++i) parts[i].release_bytes(h[i], sizeof(uint16_t) * out * in);
      return l;
    }
  }
  if (ct == ops::ComputeType::F32) {
    // fp32 weights are used where they lie (the mapped file) and packed only when used again
    // (ops::PackedLinear::lazy): a model loaded to run once never allocates or reorders a packed copy. The packed
    // Linear keeps the weights' tensors alive until then, and releases their file pages once it has packed them.
    auto held = std::make_shared<std::vector<Param>>();
    std::vector<const void*> w(n);
    std::vector<std::function<void()>> releasers(n);
    for (int64_t i = 0; i < n; ++i) {
      held->push_back(parts[i].get_unchecked("weight", {out, in}));
      w[i] = held->back().data();
      releasers[i] = parts[i].releaser(held->back());
    }
    get_biases();
    l.packed = ops::PackedLinear::lazy(std::move(w), nullptr, bias_ptr, in, out, ct, held,
                                       [releasers = std::move(releasers)] {
                                         for (const auto& r : releasers) r();
                                       });
    if (!l.packed.all_finite()) check_weights();
    return l;
  }
  if (n == 1) {
    Param w = parts[0].get_unchecked("weight", {out, in});
    get_biases();
    l.packed = ops::PackedLinear(w.data(), bias_ptr, in, out, ct);
    if (!l.packed.all_finite()) check_weights();
    parts[0].release(w);
    return l;
  }
  std::vector<float> weight(n * out * in);
  for (int64_t i = 0; i < n; ++i) {
    Param w = parts[i].get_unchecked("weight", {out, in});
    std::memcpy(weight.data() + i * out * in, w.data(), sizeof(float) * out * in);
    parts[i].release(w);
  }
  get_biases();
  l.packed = ops::PackedLinear(weight.data(), bias_ptr, in, n * out, ct);
  if (!l.packed.all_finite()) check_weights();
  return l;
}

void Linear::pack(ops::ComputeType ct) {
  packed = ops::PackedLinear(weight.data(), bias.defined() ? bias.data() : nullptr, in_features, out_features, ct);
}

namespace {
// bf16 operands of training products that no Linear keeps, one set per thread: the weight's copy (src: the fp32
// weight it was converted from, null when it may be stale), an input not kept or converted again, and dout.
struct Bf16Buffers {
  std::vector<uint16_t> weight, inp, dout;
  const float* weight_src = nullptr;
};
thread_local Bf16Buffers bf16_buffers;

uint16_t* grown(std::vector<uint16_t>& v, int64_t n) {
  if (v.size() < (size_t)n) v.resize(n);
  return v.data();
}

// The bf16 copy of l's weight [out, in]: converted unless `reuse` and the buffer already holds it.
const uint16_t* bf16_weight(const Linear& l, bool reuse) {
  Bf16Buffers& b = bf16_buffers;
  const float* w = l.weight.data();
  if (!(reuse && b.weight_src == w)) {
    ops::convert_to_bf16(grown(b.weight, l.out_features * l.in_features), w, l.out_features, l.in_features,
                         l.in_features);
    b.weight_src = w;
  }
  return b.weight.data();
}
}  // namespace

void Linear::forward(const Context& ctx, float* out, const float* inp, int64_t N, ops::Epilogue act,
                     bool keep_bf16_input) const {
  if (ctx.packed && packed.defined()) {
    packed.forward(out, inp, N, act);
    return;
  }
  if (ctx.grad && precision == ops::ComputeType::BF16 && N > 0) {
    SerialScope serial(serial_below(N * out_features * in_features));
    float beta = 0.0f;
    if (bias.defined()) {
      const float* b = bias.data();
      for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * out_features, b, sizeof(float) * out_features);
      beta = 1.0f;
    }
    // The input converted once and, when kept, reused by backward: the same bits ops::gemm_bf16 would convert to.
    Bf16Operands& s = bf16_saved;
    uint16_t* inp16 = keep_bf16_input ? (s.inp.resize(N * in_features), s.inp.data())
                                      : grown(bf16_buffers.inp, N * in_features);
    ops::convert_to_bf16(inp16, inp, N, in_features, in_features);
    s.inp_src = keep_bf16_input ? inp : nullptr;
    s.N = keep_bf16_input ? N : -1;
    ops::gemm_bf16_converted(false, true, N, out_features, in_features, 1.0f, inp16, bf16_weight(*this, false), beta,
                             out, out_features);
  } else {
    ops::linear_forward(out, inp, weight.data(), bias.defined() ? bias.data() : nullptr, N, in_features,
                        out_features);
  }
  if (act != ops::Epilogue::None)
    ops::activation_forward(out, out, N * out_features, ops::activation_of(act));
}

void Linear::backward_input(float* dinp, const float* dout, int64_t N) const {
  if (precision == ops::ComputeType::BF16) throw std::logic_error("Linear::backward_input: fp32 products only");
  ops::linear_backward(dinp, nullptr, nullptr, dout, nullptr, weight.data(), N, in_features, out_features);
}

void Linear::backward(float* dinp, const float* dout, const float* inp, int64_t N, bool accumulate) const {
  if (precision != ops::ComputeType::BF16 || N == 0) {
    ops::linear_backward(dinp, weight.grad(), bias.defined() ? bias.grad() : nullptr, dout, inp, weight.data(), N,
                         in_features, out_features, accumulate);
    return;
  }
  // dout feeds both products: converted to bf16 once; inp as the forward kept it (converted again when this
  // backward's operand is not the kept one), the weight's copy as the forward left it when no other product
  // came between.
  const int64_t in = in_features, out = out_features;
  SerialScope serial(serial_below(N * out * in));
  Bf16Operands& s = bf16_saved;
  const uint16_t* inp16 = s.inp.data();
  if (!saved_input(inp, N)) {
    uint16_t* fresh = grown(bf16_buffers.inp, N * in);
    ops::convert_to_bf16(fresh, inp, N, in, in);
    inp16 = fresh;
  }
  uint16_t* dout16 = grown(bf16_buffers.dout, N * out);
  ops::convert_to_bf16(dout16, dout, N, out, out);
  if (dinp)
    ops::gemm_bf16_converted(false, false, N, in, out, 1.0f, dout16, bf16_weight(*this, true),
                             accumulate ? 1.0f : 0.0f, dinp, in);
  ops::gemm_bf16_converted(true, false, out, in, N, 1.0f, dout16, inp16, 1.0f, weight.grad(), in);
  // Used: a later backward without a forward converts afresh (the weights may have been updated since).
  s.inp_src = nullptr;
  bf16_buffers.weight_src = nullptr;
  if (bias.defined()) {
    ops::bias_grad(bias.grad(), dout, N, out, out);
  }
}

// ---------------------------------------------------------------- LayerNorm

LayerNorm LayerNorm::load(const Vars& vb, int64_t C, float eps, bool has_bias) {
  LayerNorm ln;
  ln.weight = vb.get("weight", {C});
  ln.bias = has_bias ? vb.get("bias", {C}) : Param(Tensor::zeros({C}));
  ln.C = C;
  ln.eps = eps;
  return ln;
}

LayerNorm LayerNorm::identity(int64_t C) {
  LayerNorm ln;
  ln.C = C;
  return ln;
}

namespace {
// The identity's out = y (+ residual), sum_out the same sum.
void identity_sum(float* out, float* sum_out, const float* y, const float* residual, int64_t n) {
  if (residual) {
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) out[i] = y[i] + residual[i];
  } else if (out != y) {
    std::memcpy(out, y, sizeof(float) * n);
  }
  if (sum_out && sum_out != out) std::memcpy(sum_out, out, sizeof(float) * n);
}
}  // namespace

LayerNorm LayerNorm::load_rms(const Vars& vb, int64_t C, float eps, float offset) {
  LayerNorm ln;
  ln.weight = vb.get("weight", {C});
  ln.C = C;
  ln.eps = eps;
  ln.rms = true;
  ln.rms_offset = offset;
  return ln;
}

namespace {
// RMSNorm of rows [N, C] (in place allowed); rstd [N] written when non-null. Accumulated in double per row.
void rms_forward(float* out, float* rstd, const float* x, const float* w, float offset, int64_t N, int64_t C,
                 float eps) {
#pragma omp parallel for if (N * C > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += (double)xr[c] * xr[c];
    const float r = (float)(1.0 / std::sqrt(ss / (double)C + (double)eps));
    if (rstd) rstd[n] = r;
    float* o = out + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = xr[c] * r * (offset + w[c]);
  }
}
}  // namespace

void LayerNorm::forward_inference(float* out, const float* inp, int64_t N) const {
  if (is_identity()) return identity_sum(out, nullptr, inp, nullptr, N * C);
  if (rms) return rms_forward(out, nullptr, inp, weight.data(), rms_offset, N, C, eps);
  ops::layer_norm_forward(out, nullptr, nullptr, inp, weight.data(), bias.data(), N, C, eps);
}

void LayerNorm::forward_inference_to(float* out, float* sum_out, const float* y, const float* residual, int64_t N,
                                     ops::ComputeType ct, ops::PreparedInput& prepared) const {
  if (is_identity()) {
    identity_sum(out, sum_out, y, residual, N * C);
    if (ct == ops::ComputeType::F32) {
      prepared.clear();
    } else {
      ops::prepare_input(prepared, ct, out, N, C);
    }
    return;
  }
  if (rms) {
    if (residual) {
      add_forward_inference(out, sum_out, y, residual, N);
    } else {
      rms_forward(out, nullptr, y, weight.data(), rms_offset, N, C, eps);
    }
    if (ct == ops::ComputeType::F32) {
      prepared.clear();
    } else {
      ops::prepare_input(prepared, ct, out, N, C);
    }
    return;
  }
  ops::layer_norm_forward_to(out, sum_out, y, residual, weight.data(), bias.data(), N, C, eps, ct, prepared);
}

void LayerNorm::add_forward_inference(float* out, float* sum_out, const float* y, const float* residual,
                                      int64_t N) const {
  if (is_identity()) return identity_sum(out, sum_out, y, residual, N * C);
  if (rms) {
    Buf sum(N * C);
    identity_sum(sum.data(), nullptr, y, residual, N * C);
    if (sum_out) std::memcpy(sum_out, sum.data(), sizeof(float) * N * C);
    return rms_forward(out, nullptr, sum.data(), weight.data(), rms_offset, N, C, eps);
  }
  ops::add_layer_norm_forward(out, sum_out, y, residual, weight.data(), bias.data(), N, C, eps);
}

void LayerNorm::forward(float* out, const float* inp, int64_t N_) {
  x = inp;
  N = N_;
  if (is_identity()) return identity_sum(out, nullptr, inp, nullptr, N * C);
  rstd.resize(N);
  if (rms) return rms_forward(out, rstd.data(), inp, weight.data(), rms_offset, N, C, eps);
  mean.resize(N);
  ops::layer_norm_forward(out, mean.data(), rstd.data(), inp, weight.data(), bias.data(), N, C, eps);
}

void LayerNorm::backward(float* dinp, const float* dout, bool accumulate) {
  if (is_identity()) {
    if (!accumulate) return identity_sum(dinp, nullptr, dout, nullptr, N * C);
#pragma omp simd
    for (int64_t i = 0; i < N * C; ++i) dinp[i] += dout[i];
    return;
  }
  if (rms) {
    // y = x r w', r = (mean(x^2) + eps)^-1/2, w' = offset + w:
    // dx_j = r w'_j dy_j - x_j r^3 / C sum_i dy_i w'_i x_i;  dw_i += dy_i x_i r.
    float* gw = weight.grad();
    const float* w = weight.data();
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = x + n * C;
      const float* dy = dout + n * C;
      const float r = rstd[n];
      double dot = 0;
      for (int64_t c = 0; c < C; ++c) dot += (double)dy[c] * (rms_offset + w[c]) * xr[c];
      const float k = (float)(dot * r * r * r / (double)C);
      float* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) {
        const float v = r * (rms_offset + w[c]) * dy[c] - xr[c] * k;
        dx[c] = accumulate ? dx[c] + v : v;
        if (gw) gw[c] += dy[c] * xr[c] * r;
      }
    }
    return;
  }
  if (!accumulate) {
    ops::layer_norm_backward(dinp, weight.grad(), bias.grad(), dout, x, weight.data(), mean.data(), rstd.data(), N,
                             C);
    return;
  }
  take_scratch(scratch, N * C);
  ops::layer_norm_backward(scratch.data(), weight.grad(), bias.grad(), dout, x, weight.data(), mean.data(),
                           rstd.data(), N, C);
  const float* s = scratch.data();
#pragma omp simd
  for (int64_t i = 0; i < N * C; ++i) dinp[i] += s[i];
  give_scratch(scratch);
}

// ---------------------------------------------------------------- FeedForward

void FeedForward::forward(const Context& ctx, float* out, const float* x_, int64_t N_) {
  x = x_;
  N = N_;
  const int64_t I = linear1.out_features;
  if (gated) {
    const int64_t Ig = I / 2;
    h.resize(N * I);
    linear1.forward(ctx, h.data(), x, N, ops::Epilogue::None, /*keep_bf16_input=*/false);  // x lives until backward
    g.resize(N * Ig);
    ops::glu_forward(g.data(), h.data(), N, Ig, act);
    gdrop = ctx.rng && gate_dropout > 0.0f ? ops::dropout_draw(N * Ig, gate_dropout, *ctx.rng) : ops::DropoutDraw{};
    if (const float* m = dropout_mask_scratch(gmask, gdrop)) ops::dropout_apply(g.data(), g.data(), m, N * Ig);
    give_scratch(gmask);
    linear2.forward(ctx, out, g.data(), N);
    return;
  }
  if (act == ops::Activation::Relu) {
    // ReLU in place: its backward needs only the sign, and relu(h) > 0 exactly where h > 0.
    a.resize(N * I);
    linear1.forward(ctx, a.data(), x, N, ops::Epilogue::None, /*keep_bf16_input=*/false);  // x lives until backward
    ops::activation_forward(a.data(), a.data(), N * I, act);
    linear2.forward(ctx, out, a.data(), N);
    return;
  }
  // Only h is kept: act(h) is scratch, recomputed by backward where linear2's weight gradient needs it (and bf16
  // products keep no copy of it, nor of x: backward converts them again).
  h.resize(N * I);
  float* av = take_scratch(a, N * I);
  h_bias = nullptr;
  if (ctx.grad && linear1.precision == ops::ComputeType::F32 && linear1.bias.defined() &&
      !(ctx.packed && linear1.packed.defined())) {
    // linear1's product without its bias; the bias rides on the activation's pass
    ops::linear_forward(h.data(), x, linear1.weight.data(), nullptr, N, linear1.in_features, I);
    h_bias = linear1.bias.data();
    ops::activation_forward_bias(av, h.data(), h_bias, N, I, act);
  } else {
    linear1.forward(ctx, h.data(), x, N, ops::Epilogue::None, /*keep_bf16_input=*/false);  // x lives until backward
    ops::activation_forward(av, h.data(), N * I, act);
  }
  linear2.forward(ctx, out, av, N, ops::Epilogue::None, /*keep_bf16_input=*/false);
  give_scratch(a);
}

void FeedForward::backward(const float* dout, float* dx) {
  const int64_t I = linear1.out_features;
  if (gated) {
    const int64_t Ig = I / 2;
    Buf dg;
    float* d = take_scratch(dg, N * Ig);
    linear2.backward(d, dout, g.data(), N, /*accumulate=*/false);
    if (const float* m = dropout_mask_scratch(gmask, gdrop)) ops::dropout_apply(d, d, m, N * Ig);
    give_scratch(gmask);
    float* dh = take_scratch(da, N * I);
    ops::glu_backward(dh, d, h.data(), N, Ig, act);
    give_scratch(dg);
    linear1.backward(dx, dh, x, N);
    give_scratch(da);
    return;
  }
  float* d = take_scratch(da, N * I);
  if (act == ops::Activation::Relu) {
    linear2.backward(d, dout, a.data(), N, /*accumulate=*/false);
    ops::activation_backward(d, d, a.data(), N * I, act);  // in place: da becomes linear1's output gradient
    linear1.backward(dx, d, x, N);
    give_scratch(da);
    return;
  }
  // act(h) (the forward's values, bit for bit) for linear2's parameter gradients, and act'(h) in the same pass,
  // over h (read last here).
  if (linear2.precision == ops::ComputeType::F32) {
    // One [N, I] buffer for both: act(h), then overwritten with linear2's input gradient.
    ops::activation_value_and_derivative_bias(d, h.data(), h.data(), h_bias, N, I, act);
    linear2.backward(nullptr, dout, d, N);
    linear2.backward_input(d, dout, N);
  } else {  // bf16 products: linear2's backward takes both gradients in one call (dout converted once)
    float* av = take_scratch(a, N * I);
    ops::activation_value_and_derivative_bias(av, h.data(), h.data(), h_bias, N, I, act);
    linear2.backward(d, dout, av, N, /*accumulate=*/false);
    give_scratch(a);
  }
  const float* g = h.data();
#pragma omp parallel for simd schedule(static) if (N * I > 65536)
  for (int64_t i = 0; i < N * I; ++i) d[i] *= g[i];
  linear1.backward(dx, d, x, N);
  give_scratch(da);
}

void FeedForward::forward_inference(float* out, const float* x_, float* hidden, int64_t N_,
                                    const ops::PreparedInput* xq, ops::PreparedInput* hq) const {
  if (gated) {
    const int64_t I2 = linear1.out_features;
    float* gv = hidden + N_ * I2;
    {
      OpTimer t("ffn_in_gemm");
      linear1.forward_inference(hidden, x_, N_, ops::Epilogue::None, xq);
    }
    {
      OpTimer t("glu");
      ops::glu_forward(gv, hidden, N_, I2 / 2, act);
    }
    OpTimer t("ffn_out_gemm");
    linear2.forward_inference(out, gv, N_);
    return;
  }
  const ops::ComputeType next = linear2.input_type();
  const bool to_next = hq && next != ops::ComputeType::F32 && linear1.packed.defined();
  {
    OpTimer t("ffn_in_gemm_act");
    if (to_next) {  // bias, activation and the second product's input conversion fused into the first product
      const bool use_xq = xq && xq->holds(linear1.input_type(), N_, linear1.in_features);
      linear1.packed.forward_to(*hq, next, hidden, x_, use_xq ? xq : nullptr, N_, ops::epilogue_of(act));
    } else {
      linear1.forward_inference(hidden, x_, N_, ops::epilogue_of(act), xq);  // bias + activation fused
    }
  }
  OpTimer t("ffn_out_gemm");
  linear2.forward_inference(out, hidden, N_, ops::Epilogue::None, to_next ? hq : nullptr);
}

void Linear::forward_inference(float* out, const float* inp, int64_t N, ops::Epilogue act,
                               const ops::PreparedInput* prepared) const {
  if (prepared && packed.defined() && prepared->holds(packed.input_type(), N, in_features)) {
    packed.forward(out, *prepared, act);
    return;
  }
  forward_inference(out, inp, N, act);
}

// ---------------------------------------------------------------- Embeddings

void Embeddings::forward(const Context& ctx, const int64_t* ids_, const int64_t* positions_, const int64_t* types_,
                         int64_t N_, int64_t L) {
  const int64_t H = dim;
  N = N_;
  ids.assign(ids_, ids_ + N);
  sum.resize(N * H);
  ops::embedding_forward(sum.data(), ids.data(), word.data(), N, vocab_size, H);
  if (position.defined()) {
    positions.resize(N);
    for (int64_t n = 0; n < N; ++n) positions[n] = positions_ ? positions_[n] : n % L;
    tmp.resize(N * H);
    ops::embedding_forward(tmp.data(), positions.data(), position.data(), N, max_positions, H);
    for (int64_t i = 0; i < N * H; ++i) sum[i] += tmp[i];
  }
  if (type.defined()) {
    types.assign(N, 0);
    if (types_) types.assign(types_, types_ + N);
    tmp.resize(N * H);
    ops::embedding_forward(tmp.data(), types.data(), type.data(), N, type_vocab_size, H);
    for (int64_t i = 0; i < N * H; ++i) sum[i] += tmp[i];
  }
  normed.resize(N * H);
  norm.forward(normed.data(), sum.data(), N);
  const float p = dropout >= 0.0f ? dropout : ctx.dropout;
  drop.clear();
  const float* x = normed.data();
  if (ctx.rng && p > 0.0f) {
    drop.resize(N * H);
    ops::dropout_mask(drop.data(), N * H, p, *ctx.rng);
    tmp.resize(N * H);
    ops::dropout_apply(tmp.data(), normed.data(), drop.data(), N * H);
    x = tmp.data();
  }
  if (project.weight.defined()) {
    out.resize(N * project.out_features);
    Context lin = ctx;
    lin.packed = false;
    if (x == tmp.data()) std::swap(tmp, normed);  // the projection's input stays for backward
    project.forward(lin, out.data(), normed.data(), N);
  } else {
    out.assign(x, x + N * H);
  }
}

void Embeddings::backward(float* dout) {
  const int64_t H = dim;
  float* d = dout;
  if (project.weight.defined()) {
    tmp.resize(N * H);
    project.backward(tmp.data(), dout, normed.data(), N, /*accumulate=*/false);
    d = tmp.data();
  }
  if (!drop.empty()) ops::dropout_apply(d, d, drop.data(), N * H);
  Buf dsum(N * H);
  norm.backward(dsum.data(), d);
  ops::embedding_backward(word.grad(), dsum.data(), ids.data(), N, H);
  if (position.defined() && train_position)
    ops::embedding_backward(position.grad(), dsum.data(), positions.data(), N, H);
  if (type.defined()) ops::embedding_backward(type.grad(), dsum.data(), types.data(), N, H);
}

void Embeddings::forward_inference(float* out, const int64_t* ids, const int64_t* positions_, const int64_t* types_,
                                   int64_t N, int64_t L) const {
  const int64_t E = dim;
  const bool projected = project.in_features > 0;  // packed for inference: no fp32 weight
  std::vector<float> wide(projected ? N * E : 0);
  float* X = projected ? wide.data() : out;
  const float *we = word.data(), *pe = position.defined() ? position.data() : nullptr;
  const float* te = type.defined() ? type.data() : nullptr;
  auto pos = [&](int64_t n) { return positions_ ? positions_[n] : n % L; };
  auto typ = [&](int64_t n) { return types_ ? types_[n] : 0; };
#pragma omp parallel for if (N * E > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const float* w = we + ids[n] * E;
    float* x = X + n * E;
    if (pe && te) {
      const float *p = pe + pos(n) * E, *t = te + typ(n) * E;
      if (type_first) {
        for (int64_t h = 0; h < E; ++h) x[h] = w[h] + t[h] + p[h];
      } else {
        for (int64_t h = 0; h < E; ++h) x[h] = w[h] + p[h] + t[h];
      }
    } else if (pe || te) {
      const float* o = pe ? pe + pos(n) * E : te + typ(n) * E;
      for (int64_t h = 0; h < E; ++h) x[h] = w[h] + o[h];
    } else {
      std::memcpy(x, w, sizeof(float) * E);
    }
  }
  // The rows' check: a non-finite sum, then the first token whose rows hold a NaN / Inf.
  int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (N * E > (1 << 18))
  for (int64_t n = 0; n < N; ++n) {
    int b = 0;
    const float* r = X + n * E;
#pragma omp simd reduction(| : b)
    for (int64_t h = 0; h < E; ++h) b |= !(std::fabs(r[h]) <= FLT_MAX);
    bad |= b;
  }
  if (bad)
    for (int64_t n = 0; n < N; ++n)
      for (auto [name, table, row] : {std::tuple{word_name, we, ids[n]}, std::tuple{position_name, pe, pe ? pos(n) : 0},
                                      std::tuple{type_name, te, te ? typ(n) : 0}}) {
        if (!table) continue;
        for (int64_t h = 0; h < E; ++h)
          if (!std::isfinite(table[row * E + h]))
            throw std::runtime_error("embedding table '" + std::string(name) + "': row " + std::to_string(row) +
                                     " contains NaN or Inf at column " + std::to_string(h) + " (token " +
                                     std::to_string(n) + " of the batch)");
      }
  norm.forward_inference(X, X, N);
  if (projected) project.forward_inference(out, X, N);
}

// ---------------------------------------------------------------- Embedding

Embedding Embedding::load(const Vars& vb, int64_t vocab, int64_t dim_, float scale_) {
  Embedding e;
  e.weight = vb.get("weight", {vocab, dim_});
  e.vocab_size = vocab;
  e.dim = dim_;
  e.scale = scale_;
  return e;
}

void Embedding::forward(const Context& ctx, float* out, const int64_t* ids_, int64_t B, int64_t L,
                        const float* positions) {
  const int64_t H = dim;
  N = B * L;
  ids.assign(ids_, ids_ + N);
  ops::embedding_forward(out, ids_, weight.data(), N, vocab_size, H);
  for (int64_t n = 0; n < N; ++n) {
    const float* pr = positions + (n % L) * H;
    for (int64_t h = 0; h < H; ++h) out[n * H + h] = out[n * H + h] * scale + pr[h];
  }
  if (ctx.dropping()) {
    drop.resize(N * H);
    ops::dropout_mask(drop.data(), N * H, ctx.dropout, *ctx.rng);
    ops::dropout_apply(out, out, drop.data(), N * H);
  } else {
    drop.clear();
  }
}

void Embedding::backward(float* dout) {
  if (!drop.empty()) ops::dropout_apply(dout, dout, drop.data(), N * dim);
  for (int64_t i = 0; i < N * dim; ++i) dout[i] *= scale;
  ops::embedding_backward(weight.grad(), dout, ids.data(), N, dim);
}

void Embedding::forward_inference(float* out, const int64_t* ids_, int64_t n, const float* position) const {
  const int64_t H = dim;
  ops::embedding_forward(out, ids_, weight.data(), n, vocab_size, H);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < H; ++i) out[b * H + i] = out[b * H + i] * scale + position[i];
}

}  // namespace tfm::nn
