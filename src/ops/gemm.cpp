#include "ops/gemm.h"
#include "ops/dnnl_context.h"
#include "ops/gemm_bf16.h"
#include "ops/activation_impl.h"
#include "ops/isa.h"
#include "ops/quantize_row.h"

#include <oneapi/dnnl/dnnl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace tfm::ops {

namespace {
// Below this many multiply-adds a library call (argument checks, kernel dispatch: about a microsecond) costs
// more than the arithmetic; the per-head products of the small d2l models live here.
constexpr int64_t kSmallGemm = 32768;

void gemm_small(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    if (beta == 0.0f)
      for (int64_t j = 0; j < N; ++j) c[j] = 0.0f;
    else if (beta != 1.0f)
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    if (trans_b && !trans_a) {  // rows of A and B are contiguous: dot products
      const float* a = A + i * lda;
      for (int64_t j = 0; j < N; ++j) {
        const float* b = B + j * ldb;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < K; ++k) acc += a[k] * b[k];
        c[j] += alpha * acc;
      }
      continue;
    }
    for (int64_t k = 0; k < K; ++k) {
      float a = alpha * (trans_a ? A[k * lda + i] : A[i * lda + k]);
      if (a == 0.0f) continue;
      if (trans_b) {
        for (int64_t j = 0; j < N; ++j) c[j] += a * B[j * ldb + k];
      } else {
        const float* b = B + k * ldb;
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  }
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || M * N * K < kSmallGemm) {
    gemm_small(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // A transposed whose pitch is a multiple of 4 KiB (the weight gradients dW = dY^T X of a 1024- or 3072-wide
  // layer): oneDNN's AVX2 sgemm read it at half speed (Zen 3, [1024 x 256 x 1024]: 75 against 153 GFLOP/s with a
  // 64-byte longer pitch), so it is copied to one first, which costs a few percent of the product. Only without
  // AVX-512, the CPUs it was measured on, and up to 16 MiB of A (BERT-base's [4096 x 3072] gained 7%, less
  // than a 50 MB copy held per thread is worth). The copy changes no value.
  thread_local std::vector<float> a_padded;
  if (trans_a && lda >= M && (lda * 4) % 4096 == 0 && M * N * K >= (int64_t)1 << 24 && K * lda <= ((int64_t)4 << 20) &&
      !cpu_has_avx512()) {
    const int64_t pitch = lda + 16;
    if ((int64_t)a_padded.size() < K * pitch) a_padded.resize((size_t)(K * pitch));
    float* dst = a_padded.data();
#pragma omp parallel for schedule(static) if (K * M > 65536)
    for (int64_t k = 0; k < K; ++k) std::memcpy(dst + k * pitch, A + k * lda, sizeof(float) * M);
    A = dst;
    lda = pitch;
  }
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    throw std::runtime_error("oneDNN sgemm failed (status " + std::to_string((int)st) + ") for M=" + std::to_string(M) +
                             " N=" + std::to_string(N) + " K=" + std::to_string(K));
}

void gemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += (double)(trans_a ? A[k * lda + i] : A[i * lda + k]) * (trans_b ? B[j * ldb + k] : B[k * ldb + j]);
      double c = beta == 0.0f ? 0.0 : (double)beta * C[i * ldc + j];
      C[i * ldc + j] = (float)(alpha * acc + c);
    }
}

// ---------------------------------------------------------------- compute types

ComputeType parse_compute_type(const std::string& name) {
  if (name == "fp32" || name == "float32") return ComputeType::F32;
  if (name == "bf16" || name == "bfloat16") return ComputeType::BF16;
  if (name == "int8") return ComputeType::I8;
  throw std::invalid_argument("unknown dtype '" + name + "' (expected fp32, bf16 or int8)");
}

const char* compute_type_name(ComputeType ct) {
  switch (ct) {
    case ComputeType::F32: return "fp32";
    case ComputeType::BF16: return "bf16";
    case ComputeType::I8: return "int8";
  }
  return "?";
}

std::string cpu_isa_name() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

bool has_native_product(ComputeType ct) {
  if (ct == ComputeType::BF16) return has_bf16_gemm();
  return true;
}

int int8_weight_max() {
  static const int qmax = [] {
    switch (dnnl_get_effective_cpu_isa()) {
      case dnnl_cpu_isa_avx2_vnni:
      case dnnl_cpu_isa_avx512_core_vnni:
      case dnnl_cpu_isa_avx512_core_bf16:
      case dnnl_cpu_isa_avx512_core_amx: return 127;
      default: return 63;  // vpmaddubsw's saturating int16 pair sums (gemm.h)
    }
  }();
  return qmax;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

Epilogue epilogue_of(Activation act) {
  switch (act) {
    case Activation::Relu: return Epilogue::Relu;
    case Activation::Gelu: return Epilogue::Gelu;
    case Activation::GeluTanh: return Epilogue::GeluTanh;
    case Activation::Silu: return Epilogue::Silu;
  }
  return Epilogue::None;
}

Activation activation_of(Epilogue ep) {
  return ep == Epilogue::Relu ? Activation::Relu
         : ep == Epilogue::GeluTanh ? Activation::GeluTanh
         : ep == Epilogue::Silu ? Activation::Silu : Activation::Gelu;
}

// ---------------------------------------------------------------- PackedLinear

dnnl::engine& dnnl_cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}
dnnl::stream& dnnl_cpu_stream() {
  thread_local dnnl::stream s(dnnl_cpu_engine());
  return s;
}

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& cpu_engine() { return dnnl_cpu_engine(); }
dnnl::stream& cpu_stream() { return dnnl_cpu_stream(); }

dt weight_type(ComputeType ct) { return ct == ComputeType::F32 ? dt::f32 : ct == ComputeType::BF16 ? dt::bf16 : dt::s8; }
dt src_type(ComputeType ct) { return weight_type(ct); }  // s8 activations: symmetric per-token quantisation

// ---- symmetric int8 quantisation (ops/quantize_row.h): q = round_half_even(x / scale) clamped to [-127, 127],
// scale = max|x| / 127 (1 for an all-zero input); each kernel in two copies, chosen by kernel_isa() (ops/isa.h).
float absmax_avx2(const float* x, int64_t n) { return detail::row_absmax(x, n); }
TFM_TARGET_AVX512 float absmax_avx512(const float* x, int64_t n) { return detail::row_absmax(x, n); }
void quantize_avx2(int8_t* q, const float* x, int64_t n, float inv, float qmax) {
  detail::quantize_s8(q, x, n, inv, qmax);
}
TFM_TARGET_AVX512 void quantize_avx512(int8_t* q, const float* x, int64_t n, float inv, float qmax) {
  detail::quantize_s8(q, x, n, inv, qmax);
}
// Rows [r0, r1) of p from x (p.cols floats a row).
void prepare_rows_avx2(PreparedInput& p, const float* x, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) detail::prepare_row(p, r, x + r * p.cols);
}
TFM_TARGET_AVX512 void prepare_rows_avx512(PreparedInput& p, const float* x, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) detail::prepare_row(p, r, x + r * p.cols);
}

bool avx512() { return kernel_isa() == KernelIsa::Avx512; }
inline float absmax(const float* x, int64_t n) { return avx512() ? absmax_avx512(x, n) : absmax_avx2(x, n); }
inline void quantize(int8_t* q, const float* x, int64_t n, float inv, float qmax = 127.0f) {
  avx512() ? quantize_avx512(q, x, n, inv, qmax) : quantize_avx2(q, x, n, inv, qmax);
}

// Quantises one row with its own scale (detail::quantize_row_s8; q in [-qmax, qmax]): returns the scale, NaN
// (q all 0) for a row holding a NaN or an infinity.
inline float quantize_row(int8_t* q, const float* x, int64_t n, float qmax = 127.0f) {
  const float mx = absmax(x, n);
  if (!std::isfinite(mx)) {
    std::memset(q, 0, (size_t)n);
    return NAN;
  }
  const float scale = detail::s8_scale_of(mx, qmax);
  quantize(q, x, n, 1.0f / scale, qmax);
  return scale;
}

}  // namespace

void quantize_weights_s8(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols, int qmax) {
  if (qmax < 1 || qmax > 127) throw std::invalid_argument("quantize_weights_s8: qmax " + std::to_string(qmax));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) scale[r] = quantize_row(q + r * cols, w + r * cols, cols, (float)qmax);
}

namespace {
// Quantises x[n] with one scale for the whole tensor (one read for max |x|, one to round); returns the scale, or
// NaN without writing q when x holds a NaN or an infinity (the caller then quantises row by row, so that only the
// rows holding them come out NaN, as in fp32).
float quantize_tensor(int8_t* q, const float* x, int64_t n) {
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  float mx = 0.0f;
  int bad = 0;
#pragma omp parallel for reduction(max : mx) reduction(| : bad) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const float m = absmax(x + c * kChunk, std::min(kChunk, n - c * kChunk));
    if (std::isfinite(m)) mx = std::max(mx, m);
    else bad = 1;
  }
  if (bad) return NAN;
  const float scale = detail::s8_scale_of(mx), inv = 1.0f / scale;
#pragma omp parallel for if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) quantize(q + c * kChunk, x + c * kChunk, std::min(kChunk, n - c * kChunk), inv);
  return scale;
}

// Rows [n0, n1) of the per-token int8 epilogue on y [*, O] (the int32 sums arriving as fp32), in place:
// y = act(y * (rs[n] * ws[o]) + bias[o]) while the row is in cache, then row n of next from it when non-null.
TFM_ALWAYS_INLINE void dequant_rows(float* y, int64_t n0, int64_t n1, int64_t O, const float* rs, const float* ws,
                                    const float* bias, Epilogue ep, PreparedInput* next) {
  const Activation act = activation_of(ep);
  for (int64_t n = n0; n < n1; ++n) {
    float* r = y + n * O;
    const float s = rs[n];
    if (bias && ep == Epilogue::Gelu && next && next->ct == ComputeType::I8) {
      // BERT's FFN-in: dequantisation, bias, GELU and the row's max |y| (row_absmax's loop) in one pass, then
      // the s8 row: the values of the separate passes below, 3% faster.
      float mx = 0.0f, bad = 0.0f;
#pragma omp simd reduction(max : mx) reduction(+ : bad)
      for (int64_t o = 0; o < O; ++o) {
        const float g = detail::gelu_erf(r[o] * (s * ws[o]) + bias[o]);
        r[o] = g;
        const float a = g < 0.0f ? -g : g;
        mx = a > mx ? a : mx;
        bad += g * 0.0f;
      }
      next->scale[n] = detail::quantize_row_s8_given_max(next->s8.data() + n * next->cols, r, O,
                                                         bad == 0.0f ? mx : NAN);
      continue;
    }
    if (bias) {
#pragma omp simd
      for (int64_t o = 0; o < O; ++o) r[o] = r[o] * (s * ws[o]) + bias[o];
    } else {
#pragma omp simd
      for (int64_t o = 0; o < O; ++o) r[o] = r[o] * (s * ws[o]);
    }
    if (ep != Epilogue::None) detail::act_impl(r, r, 0, O, act);
    if (next) detail::prepare_row(*next, n, r);
  }
}
using DequantRows = void (*)(float*, int64_t, int64_t, int64_t, const float*, const float*, const float*, Epilogue,
                             PreparedInput*);
void dequant_rows_avx2(float* y, int64_t n0, int64_t n1, int64_t O, const float* rs, const float* ws,
                       const float* bias, Epilogue ep, PreparedInput* next) {
  dequant_rows(y, n0, n1, O, rs, ws, bias, ep, next);
}
TFM_TARGET_AVX512 void dequant_rows_avx512(float* y, int64_t n0, int64_t n1, int64_t O, const float* rs,
                                           const float* ws, const float* bias, Epilogue ep, PreparedInput* next) {
  dequant_rows(y, n0, n1, O, rs, ws, bias, ep, next);
}

std::atomic<bool> g_fused_quant{[] {
  const char* e = std::getenv("TFM_FUSED_QUANT");
  return !(e && std::string(e) == "0");
}()};

// Activation scales (see set_int8_activation_scales): per token unless TFM_INT8_ACT=tensor at start-up.
// Per token is the default because it keeps each row's result independent of the other rows of the call (a
// served request does not change with its batch-mates) and measured within 4% of per tensor's speed.
std::atomic<bool> g_int8_per_token{[] {
  const char* e = std::getenv("TFM_INT8_ACT");
  return !(e && std::string(e) == "tensor");
}()};

dnnl::post_ops make_post_ops(Epilogue ep) {
  dnnl::post_ops po;
  switch (ep) {
    case Epilogue::None: break;
    case Epilogue::Relu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
    case Epilogue::Gelu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f); break;
    case Epilogue::GeluTanh: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f); break;
    case Epilogue::Silu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f); break;
  }
  return po;
}

template <class T>
T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
}  // namespace

struct PackedLinear::Impl {
  int64_t in = 0, out = 0;
  ComputeType ct = ComputeType::F32;
  memory::desc weights_md;
  memory weights;              // packed, owned by oneDNN
  std::vector<float> bias;     // [out] or empty
  std::vector<float> w_scale;  // [out], int8 only
  bool fuse_bias = false;      // bias as a matmul argument (fp32/bf16); int8 adds it in the dequant pass
  // bf16 arithmetic without bf16 instructions (bf16_gemm_emulated): ct BF16, the weights packed as fp32 holding
  // their bf16 values, each bf16 input widened to fp32 (exact) before an fp32 product (exact products, fp32 sums:
  // a native run up to summation order), a bf16 output rounded to nearest even as oneDNN rounds it.
  bool emulated = false;
  // key: (((rows * 8 + epilogue) * 2 + fused) * 2 + bf16 output) * 2 + in place -> the primitive and its
  // scratchpad layout
  mutable MatmulCache<int64_t> cache;

  // PackedLinear::lazy until packed: the parts [part_out, in] of type weight_type(ct) where the owner keeps them.
  // pack_mu: shared by the forwards that multiply by the parts, exclusive for packing (which then drops them).
  mutable std::shared_mutex pack_mu;
  mutable std::atomic<bool> packed{true};
  mutable std::atomic<int64_t> plain_calls{0};
  std::vector<const void*> plain;
  int64_t part_out = 0;
  std::shared_ptr<const void> owner;
  std::function<void()> after_pack;

  dt wdt() const { return emulated ? dt::f32 : weight_type(ct); }  // the packed weights' type
  memory::desc src_md(int64_t M) const { return memory::desc({M, in}, emulated ? dt::f32 : src_type(ct), tag::ab); }
  memory::desc dst_md(int64_t M, bool bf16_dst = false) const {
    return memory::desc({M, out}, bf16_dst ? dt::bf16 : dt::f32, tag::ab);
  }
  // A part's weights in place: W[part_out, in] row-major is the [in, part_out] matrix in "ba" order; its output
  // columns are a slice of the [M, out] output (fp32).
  memory::desc plain_md() const { return memory::desc({in, part_out}, weight_type(ct), tag::ba); }
  // Contiguous [M, part_out]: with the output's row stride (a slice of its columns) oneDNN 2.6 runs gemm:jit, which
  // packs the part on every call from 16 rows (a one-sentence `tfm encode` of 16 tokens spent 62 ms there, against
  // 11 ms at 9 tokens); contiguous, brgemm reads the part as it lies. run() copies the rows into their columns.
  memory::desc plain_dst_md(int64_t M, bool bf16_dst) const {
    return memory::desc({M, part_out}, bf16_dst ? dt::bf16 : dt::f32, tag::ab);
  }

  // The primitive for M rows. Weights are described by the packed layout chosen at load; oneDNN's choice of
  // layout does not depend on M for these kernels, and if it did, the explicit layout would still be honoured.
  // int8 with one activation scale per tensor: dequantisation (a binary multiply post-op by x_scale * w_scale[o],
  // given at run time), bias (a binary add) and activation all run inside the matmul. Not run-time output scales
  // (DNNL_RUNTIME_F32_VAL): oneDNN 2.6's brgemm/AMX matmul refuses them and falls back to its reference kernel,
  // ~100x slower; nor a per-row binary multiply ({M, 1}: same fallback), hence one scale per tensor.
  // fused: ct is I8 and activations have one scale per tensor. bf16_dst: ct is BF16 and the output is written in
  // bf16 (rounded to nearest even by oneDNN after the post-ops), the next product's input.
  // The scratchpad is the caller's (scratchpad_mode::user): with oneDNN's default library-owned one, threads
  // running one primitive at once (Python threads sharing an Encoder, tfm serve) corrupted some outputs.
  // in_place: the product by one part of lazy weights where they lie; an empty matmul when oneDNN
  // would run its reference kernel for that layout (the caller packs instead).
  dnnl::matmul primitive(int64_t M, Epilogue ep, bool fused, bool bf16_dst, bool in_place,
                         memory::desc& scratchpad) const {
    const int64_t key = (((M * 8 + (int64_t)ep) * 2 + fused) * 2 + bf16_dst) * 2 + in_place;
    CachedMatmul m = cache.get(key, [&] { return make_primitive(M, ep, fused, bf16_dst, in_place); });
    scratchpad = m.scratchpad;
    return m.matmul;
  }
  CachedMatmul make_primitive(int64_t M, Epilogue ep, bool fused, bool bf16_dst, bool in_place) const {
    const int64_t O = in_place ? part_out : out;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (fused) {
      dnnl::post_ops po;
      po.append_binary(dnnl::algorithm::binary_mul, memory::desc({1, O}, dt::f32, tag::ab));
      if (!bias.empty()) po.append_binary(dnnl::algorithm::binary_add, memory::desc({1, O}, dt::f32, tag::ab));
      dnnl::post_ops act = make_post_ops(ep);
      if (act.len() > 0) {
        dnnl::algorithm alg;
        float scale, alpha, beta;
        act.get_params_eltwise(0, scale, alg, alpha, beta);
        po.append_eltwise(scale, alg, alpha, beta);
      }
      attr.set_post_ops(po);
    } else if (ct != ComputeType::I8) {
      attr.set_post_ops(make_post_ops(ep));  // per-token int8 applies its activation after dequantisation
    }
    const memory::desc w_md = in_place ? plain_md() : weights_md;
    const memory::desc d_md = in_place ? plain_dst_md(M, bf16_dst) : dst_md(M, bf16_dst);
    auto d = fuse_bias ? dnnl::matmul::desc(src_md(M), w_md, memory::desc({1, O}, dt::f32, tag::ab), d_md)
                       : dnnl::matmul::desc(src_md(M), w_md, d_md);
    dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
    if (in_place && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return CachedMatmul{};
    return CachedMatmul{dnnl::matmul(pd), pd.scratchpad_desc()};
  }

  void convert(const float* inp, int64_t N, const void*& src, const float*& rs, const float*& cs) const;
  void run(float* out_f32, uint16_t* out_bf16, const void* src, const float* row_scale, const float* col_scale,
           int64_t N, Epilogue ep, PreparedInput* next) const;

  // Packs a lazy one's parts (joined into one [out, in] matrix first when there are several), then drops them.
  void pack_parts() {
    std::unique_lock<std::shared_mutex> lock(pack_mu);
    if (packed.load(std::memory_order_relaxed)) return;
    const size_t esize = ct == ComputeType::F32 ? 4 : ct == ComputeType::BF16 ? 2 : 1;
    const size_t part_bytes = esize * (size_t)(part_out * in);
    std::vector<unsigned char> joined;
    if (plain.size() > 1) {
      joined.resize(part_bytes * plain.size());
      for (size_t i = 0; i < plain.size(); ++i) std::memcpy(joined.data() + i * part_bytes, plain[i], part_bytes);
    }
    pack(plain.size() > 1 ? joined.data() : plain[0], weight_type(ct));
    packed.store(true, std::memory_order_release);
    plain.clear();
    if (after_pack) after_pack();
    after_pack = nullptr;
    owner.reset();
  }

  // Picks the layout and reorders `src` (plain [out, in] of type `src_dt`) into it.
  void pack(const void* src, dt src_dt) {
    memory::desc any_md({in, out}, wdt(), tag::any);
    dnnl::matmul::primitive_desc pd;
    try {
      auto d = dnnl::matmul::desc(src_md(128), any_md, dst_md(128));
      pd = dnnl::matmul::primitive_desc(d, cpu_engine());
    } catch (const dnnl::error& e) {
      throw std::runtime_error(std::string("oneDNN ") + onednn_version() + " has no " + compute_type_name(ct) +
                               " matmul on this CPU (" + cpu_isa_name() + "): " + e.what() + "; use --dtype fp32");
    }
    weights_md = pd.weights_desc();
    // A plain row-major [in, out] layout (oneDNN's gemm-based matmul: AVX2 CPUs) gets rows 64 bytes longer than
    // out. With a row pitch that is a multiple of 1 KiB (768, 2304, 3072 fp32 columns: every BERT shape) the
    // sgemm's panel reads fall into the same cache sets: [128, 768] x [768, 3072] ran at 80 GFLOP/s against 182
    // padded on 2 Zen 3 cores, and a BERT-base forward at [1, 128] took 190 ms against 140 (BENCHMARKS.md).
    // Below ~20 rows the product is bound by reading the weights from memory, and the same either way.
    const dnnl_memory_desc_t& c = weights_md.data;
    if (c.format_kind == dnnl_blocked && c.format_desc.blocking.inner_nblks == 0 &&
        c.format_desc.blocking.strides[0] == out && c.format_desc.blocking.strides[1] == 1) {
      const int64_t esize = (int64_t)memory::data_type_size(wdt());
      weights_md = memory::desc({in, out}, wdt(), memory::dims{out + 64 / esize, 1});
    }
    weights = memory(weights_md, cpu_engine());
    // The gaps are zero: all_finite() reads the whole buffer.
    std::memset(weights.get_data_handle(), 0, weights_md.get_size());
    // W[out, in] row-major is the [in, out] matrix in column-major ("ba") order.
    memory user(memory::desc({in, out}, src_dt, tag::ba), cpu_engine(), const_cast<void*>(src));
    dnnl::reorder(user, weights).execute(cpu_stream(), user, weights);
    cpu_stream().wait();
  }
};

namespace {
// The fp32 fallback of a type without a native product (gemm.h): says so once per process and type, on a
// terminal (a caller that captures stderr, such as a script or a test, asks has_native_product instead).
void note_fallback(ComputeType ct) {
  static std::once_flag once[3];
  std::call_once(once[(int)ct], [ct] {
    if (!isatty(STDERR_FILENO)) return;
    std::fprintf(stderr, "tfm: note: oneDNN %s has no native %s matmul on this CPU (%s): %s weights are multiplied "
                 "in fp32\n", onednn_version().c_str(), compute_type_name(ct), cpu_isa_name().c_str(),
                 compute_type_name(ct));
  });
}
// rows x cols weights of type ct (F32 float, BF16 raw bf16, I8 s8 times scale[row]) widened to fp32 into dst.
void widen_weights(float* dst, const void* src, const float* scale, int64_t rows, int64_t cols, ComputeType ct) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst + r * cols;
    if (ct == ComputeType::BF16) {
      const uint16_t* h = static_cast<const uint16_t*>(src) + r * cols;
      for (int64_t c = 0; c < cols; ++c) d[c] = std::bit_cast<float>((uint32_t)h[c] << 16);
    } else if (ct == ComputeType::I8) {
      const int8_t* q = static_cast<const int8_t*>(src) + r * cols;
      for (int64_t c = 0; c < cols; ++c) d[c] = (float)q[c] * scale[r];
    } else {
      std::memcpy(d, static_cast<const float*>(src) + r * cols, sizeof(float) * cols);
    }
  }
}
}  // namespace

PackedLinear PackedLinear::emulated_bf16(const float* weight, const float* bias, int64_t in_features,
                                         int64_t out_features) {
  auto im = std::make_shared<Impl>();
  im->in = in_features;
  im->out = out_features;
  im->ct = ComputeType::BF16;
  im->emulated = true;
  if (bias) im->bias.assign(bias, bias + out_features);
  im->fuse_bias = bias != nullptr;
  im->pack(weight, dt::f32);
  PackedLinear p;
  p.impl_ = std::move(im);
  return p;
}

PackedLinear::PackedLinear(const float* weight, const float* bias, int64_t in_features, int64_t out_features,
                           ComputeType ct) {
  if (!has_native_product(ct)) {  // bf16 without bf16 instructions: the weights it would multiply by, in fp32
    std::vector<float> w((size_t)in_features * out_features);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < in_features * out_features; ++i) w[i] = round_to_bf16(weight[i]);
    if (bf16_gemm_emulated()) {
      *this = emulated_bf16(w.data(), bias, in_features, out_features);
      return;
    }
    note_fallback(ct);
    *this = PackedLinear(w.data(), bias, in_features, out_features, ComputeType::F32);
    return;
  }
  auto im = std::make_shared<Impl>();
  im->in = in_features;
  im->out = out_features;
  im->ct = ct;
  if (bias) im->bias.assign(bias, bias + out_features);
  im->fuse_bias = bias && ct != ComputeType::I8;
  if (ct == ComputeType::I8) {
    std::vector<int8_t> q((size_t)in_features * out_features);
    im->w_scale.resize(out_features);
    quantize_weights_s8(q.data(), im->w_scale.data(), weight, out_features, in_features, int8_weight_max());
    im->pack(q.data(), dt::s8);
  } else {
    im->pack(weight, dt::f32);
  }
  impl_ = std::move(im);
}

PackedLinear PackedLinear::from_int8(const int8_t* weight, const float* weight_scale, const float* bias,
                                     int64_t in_features, int64_t out_features) {
  if (int8_weight_max() < 127) {  // 8-bit weights requantised for a CPU without VNNI (gemm.h)
    std::vector<float> w((size_t)in_features * out_features);
    widen_weights(w.data(), weight, weight_scale, out_features, in_features, ComputeType::I8);
    return PackedLinear(w.data(), bias, in_features, out_features, ComputeType::I8);
  }
  auto im = std::make_shared<Impl>();
  im->in = in_features;
  im->out = out_features;
  im->ct = ComputeType::I8;
  if (bias) im->bias.assign(bias, bias + out_features);
  im->w_scale.assign(weight_scale, weight_scale + out_features);
  im->pack(weight, dt::s8);
  PackedLinear p;
  p.impl_ = std::move(im);
  return p;
}

PackedLinear PackedLinear::from_bf16(const uint16_t* weight, const float* bias, int64_t in_features,
                                     int64_t out_features) {
  if (!has_native_product(ComputeType::BF16)) {
    std::vector<float> w((size_t)in_features * out_features);
    widen_weights(w.data(), weight, nullptr, out_features, in_features, ComputeType::BF16);
    if (bf16_gemm_emulated()) return emulated_bf16(w.data(), bias, in_features, out_features);
    note_fallback(ComputeType::BF16);
    return PackedLinear(w.data(), bias, in_features, out_features, ComputeType::F32);
  }
  auto im = std::make_shared<Impl>();
  im->in = in_features;
  im->out = out_features;
  im->ct = ComputeType::BF16;
  if (bias) im->bias.assign(bias, bias + out_features);
  im->fuse_bias = bias != nullptr;
  im->pack(weight, dt::bf16);
  PackedLinear p;
  p.impl_ = std::move(im);
  return p;
}

PackedLinear PackedLinear::lazy(std::vector<const void*> parts, const float* weight_scale, const float* bias,
                                int64_t in_features, int64_t part_out, ComputeType ct, std::shared_ptr<const void> owner,
                                std::function<void()> after_pack) {
  const int64_t out = (int64_t)parts.size() * part_out;
  const bool requantise = ct == ComputeType::I8 && int8_weight_max() < 127;
  if (!has_native_product(ct) || requantise) {  // widened and packed at once (bf16 without bf16 instructions, or
                                                // int8 requantised to 7 bits)
    std::vector<float> w((size_t)out * in_features);
    for (size_t i = 0; i < parts.size(); ++i)
      widen_weights(w.data() + i * part_out * in_features, parts[i],
                    weight_scale ? weight_scale + i * part_out : nullptr, part_out, in_features, ct);
    const bool emulate = !requantise && bf16_gemm_emulated();
    if (!requantise && !emulate) note_fallback(ct);
    PackedLinear p = emulate ? emulated_bf16(w.data(), bias, in_features, out)
                             : PackedLinear(w.data(), bias, in_features, out,
                                            requantise ? ComputeType::I8 : ComputeType::F32);
    if (after_pack) after_pack();
    return p;
  }
  auto im = std::make_shared<Impl>();
  im->in = in_features;
  im->out = out;
  im->ct = ct;
  im->part_out = part_out;
  if (bias) im->bias.assign(bias, bias + out);
  if (ct == ComputeType::I8) im->w_scale.assign(weight_scale, weight_scale + out);
  im->fuse_bias = bias && ct != ComputeType::I8;
  im->plain = std::move(parts);
  im->owner = std::move(owner);
  im->after_pack = std::move(after_pack);
  im->packed = false;
  memory::desc unused;
  // A probe for the kernel (and the CPU's support of `ct`): primitive creation throws when there is none.
  bool fast = false;
  try {
    fast = static_cast<bool>(im->primitive(1, Epilogue::None, false, false, true, unused));
  } catch (const dnnl::error&) {
  }
  if (!fast) im->pack_parts();  // throws the one-line message when there is no kernel for ct at all
  PackedLinear p;
  p.impl_ = std::move(im);
  return p;
}

bool PackedLinear::is_packed() const { return !impl_ || impl_->packed.load(std::memory_order_acquire); }

namespace {
// Whether w[n] (fp32, or raw bf16 when bf16) holds no NaN and no infinity, in chunks over the threads.
bool finite_weights(const void* data, int64_t n, bool bf16) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  int bad = 0;
  if (!bf16) {
    const float* w = static_cast<const float*>(data);
#pragma omp parallel for reduction(| : bad) schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const float* q = w + c * kChunk;
      const int64_t m = std::min(kChunk, n - c * kChunk);
      int b = 0;
#pragma omp simd reduction(| : b)
      for (int64_t i = 0; i < m; ++i) b |= !(std::fabs(q[i]) <= FLT_MAX);
      bad |= b;
    }
  } else {  // bf16: exponent bits all ones is an infinity or a NaN
    const uint16_t* w = static_cast<const uint16_t*>(data);
#pragma omp parallel for reduction(| : bad) schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const uint16_t* q = w + c * kChunk;
      const int64_t m = std::min(kChunk, n - c * kChunk);
      int b = 0;
#pragma omp simd reduction(| : b)
      for (int64_t i = 0; i < m; ++i) b |= (q[i] & 0x7f80) == 0x7f80;
      bad |= b;
    }
  }
  return !bad;
}
}  // namespace

bool PackedLinear::all_finite() const {
  if (!impl_) return true;
  const Impl& im = *impl_;
  int bad = 0;
  for (float b : im.bias) bad |= !(std::fabs(b) <= FLT_MAX);
  for (float s : im.w_scale) bad |= !(std::fabs(s) <= FLT_MAX);  // quantize_row's NaN marks a non-finite row
  if (bad) return false;
  if (im.ct == ComputeType::I8) return true;
  const bool bf16 = im.ct == ComputeType::BF16 && !im.emulated;  // emulated: fp32 weights
  {
    std::shared_lock<std::shared_mutex> lock(im.pack_mu);
    if (!im.packed.load(std::memory_order_relaxed)) {
      for (const void* part : im.plain)
        if (!finite_weights(part, im.part_out * im.in, bf16)) return false;
      return true;
    }
  }
  // The packed buffer (padding included, which oneDNN zero-fills).
  const size_t bytes = im.weights_md.get_size();
  return finite_weights(im.weights.get_data_handle(), (int64_t)(bytes / (bf16 ? 2 : 4)), bf16);
}

int64_t PackedLinear::in_features() const { return impl_ ? impl_->in : 0; }
int64_t PackedLinear::out_features() const { return impl_ ? impl_->out : 0; }
ComputeType PackedLinear::compute_type() const { return impl_ ? impl_->ct : ComputeType::F32; }

// The product of an input already in the matmul's type: src [N, in] (fp32, bf16 or s8), row_scale [N] for per-token
// int8, col_scale [out] for per-tensor int8 (fused); writes out_f32 [N, out], or out_bf16 (ct BF16 only), and, for
// per-token int8, the epilogue's rows into next when non-null. Lazy weights: the first call multiplies by them in
// place (each part into its output columns), the next one packs them (PackedLinear::lazy).
void PackedLinear::Impl::run(float* out_f32, uint16_t* out_bf16, const void* src, const float* row_scale,
                             const float* col_scale, int64_t N, Epilogue ep, PreparedInput* next) const {
  const int64_t O = out;
  thread_local std::vector<float> emulated_src, emulated_dst;
  if (emulated) {  // bf16 input widened to fp32; a bf16 output made from an fp32 one below
    const uint16_t* h = static_cast<const uint16_t*>(src);
    float* x = scratch(emulated_src, (size_t)(N * in));
#pragma omp parallel for if (N * in > 65536)
    for (int64_t i = 0; i < N * in; ++i) x[i] = std::bit_cast<float>((uint32_t)h[i] << 16);
    src = x;
    if (out_bf16) out_f32 = scratch(emulated_dst, (size_t)(N * O));
  }
  const bool fused = col_scale != nullptr, bf16_dst = out_bf16 != nullptr && !emulated;
  // Packing lazy weights is the one change a product makes to the shared Impl; it runs under pack_mu.
  Impl& self = const_cast<Impl&>(*this);
  std::shared_lock<std::shared_mutex> plain_lock;
  bool in_place = false;
  if (!packed.load(std::memory_order_acquire)) {
    if (plain_calls.fetch_add(1, std::memory_order_relaxed) > 0) {
      self.pack_parts();
    } else {
      plain_lock = std::shared_lock<std::shared_mutex>(pack_mu);
      in_place = !packed.load(std::memory_order_relaxed);
      if (!in_place) plain_lock.unlock();
    }
  }
  memory::desc scratch_md;
  dnnl::matmul prim = primitive(N, ep, fused, bf16_dst, in_place, scratch_md);
  if (in_place && !prim) {  // no fast kernel for the plain layout at this row count
    plain_lock.unlock();
    self.pack_parts();
    in_place = false;
    prim = primitive(N, ep, fused, bf16_dst, false, scratch_md);
  }
  thread_local std::vector<uint8_t> scratch_buf;
  const int64_t parts = in_place ? (int64_t)plain.size() : 1, PO = in_place ? part_out : O;
  memory src_m(src_md(N), cpu_engine(), const_cast<void*>(src));
  const memory::desc row_md({1, PO}, dt::f32, tag::ab);
  const size_t esize = bf16_dst ? 2 : 4;
  thread_local std::vector<uint8_t> part_buf;  // a part's [N, PO] product when there are several
  if (parts > 1 && part_buf.size() < (size_t)(N * PO) * esize) part_buf.resize((size_t)(N * PO) * esize);
  uint8_t* const out_bytes = bf16_dst ? (uint8_t*)out_bf16 : (uint8_t*)out_f32;
  for (int64_t p = 0; p < parts; ++p) {  // one product per part of lazy weights, each into its output columns
    void* dst = parts > 1 ? (void*)part_buf.data() : (void*)out_bytes;
    memory dst_m(in_place ? plain_dst_md(N, bf16_dst) : dst_md(N, bf16_dst), cpu_engine(), dst);
    memory w_m = in_place ? memory(plain_md(), cpu_engine(), const_cast<void*>(plain[p])) : weights;
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, w_m}, {DNNL_ARG_DST, dst_m}};
    memory bias_m;
    if (!bias.empty()) bias_m = memory(row_md, cpu_engine(), const_cast<float*>(bias.data() + p * PO));
    if (fuse_bias) args.emplace(DNNL_ARG_BIAS, bias_m);
    if (fused) {
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                   memory(row_md, cpu_engine(), const_cast<float*>(col_scale + p * PO)));
      if (!bias.empty()) args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, bias_m);
    }
    if (scratch_md.get_size() > 0)
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch_md, cpu_engine(), scratch(scratch_buf, scratch_md.get_size())));
    prim.execute(cpu_stream(), args);
    if (parts > 1) {  // the part's rows into its output columns
      cpu_stream().wait();
      const uint8_t* from = part_buf.data();
#pragma omp parallel for if (N * PO > 65536)
      for (int64_t n = 0; n < N; ++n)
        std::memcpy(out_bytes + (size_t)(n * O + p * PO) * esize, from + (size_t)(n * PO) * esize, (size_t)PO * esize);
    }
  }
  cpu_stream().wait();
  if (plain_lock.owns_lock()) plain_lock.unlock();
  if (emulated && out_bf16) {
#pragma omp parallel for if (N * O > 65536)
    for (int64_t i = 0; i < N * O; ++i) out_bf16[i] = to_bf16(out_f32[i]);
  }
  if (ct != ComputeType::I8 || fused) return;
  // out = act(acc * x_scale[n] * w_scale[o] + bias[o]) (the int32 sums arrive converted to fp32), then the next
  // product's input row, one row at a time while it is in cache, on the calling thread per chunk of rows. A single
  // row wider than 65536 takes its activation from the whole-output call instead (it parallelises itself).
  const float* b = bias.empty() ? nullptr : bias.data();
  const DequantRows fn = avx512() ? dequant_rows_avx512 : dequant_rows_avx2;
  const bool act_per_row = ep == Epilogue::None || O <= 65536 || next;
  const Epilogue row_ep = act_per_row ? ep : Epilogue::None;
  const int64_t chunk = std::max<int64_t>(1, 16384 / O);
#pragma omp parallel for schedule(static) if (N * O > 65536)
  for (int64_t n0 = 0; n0 < N; n0 += chunk)
    fn(out_f32, n0, std::min(N, n0 + chunk), O, row_scale, w_scale.data(), b, row_ep, next);
  if (!act_per_row) activation_forward(out_f32, out_f32, N * O, activation_of(ep));
}

// fp32 input [N, in] in the matmul's type: src (inp itself for F32, else a thread-local buffer), and the int8
// scales: row_scale [N] per token, or col_scale [out] (x_scale * w_scale[o]) per tensor.
void PackedLinear::Impl::convert(const float* inp, int64_t N, const void*& src, const float*& rs,
                                 const float*& cs) const {
  const int64_t K = in, O = out;
  thread_local std::vector<uint16_t> bf16_buf;
  thread_local std::vector<int8_t> s8_buf;
  thread_local std::vector<float> row_scale, col_scale;
  src = inp;
  rs = cs = nullptr;
  if (ct == ComputeType::BF16) {
    uint16_t* b = scratch(bf16_buf, (size_t)N * K);
#pragma omp parallel for if (N * K > 65536)
    for (int64_t i = 0; i < N * K; ++i) b[i] = to_bf16(inp[i]);
    src = b;
  } else if (ct == ComputeType::I8) {
    int8_t* q = scratch(s8_buf, (size_t)N * K);
    if (!g_int8_per_token.load(std::memory_order_relaxed)) {
      const float xs = quantize_tensor(q, inp, N * K);
      if (!std::isnan(xs)) {  // else a NaN or infinity in the input: per row below, so that only its rows are NaN
        float* c = scratch(col_scale, (size_t)O);
        for (int64_t o = 0; o < O; ++o) c[o] = xs * w_scale[o];
        cs = c;
      }
    }
    if (!cs) {
      float* r = scratch(row_scale, (size_t)N);
#pragma omp parallel for if (N * K > 65536)
      for (int64_t n = 0; n < N; ++n) r[n] = quantize_row(q + n * K, inp + n * K, K);
      rs = r;
    }
    src = q;
  }
}

void PackedLinear::forward(float* out, const float* inp, int64_t N, Epilogue ep) const {
  if (N <= 0) return;
  const void* src;
  const float *rs, *cs;
  impl_->convert(inp, N, src, rs, cs);
  impl_->run(out, nullptr, src, rs, cs, N, ep, nullptr);
}

ComputeType PackedLinear::input_type() const {
  if (!impl_ || !g_fused_quant.load(std::memory_order_relaxed)) return ComputeType::F32;
  if (impl_->ct == ComputeType::I8 && !g_int8_per_token.load(std::memory_order_relaxed)) return ComputeType::F32;
  return impl_->ct;
}

namespace {
void check_prepared(const PreparedInput& in, ComputeType want, int64_t K) {
  if (want == ComputeType::F32 || in.ct != want || in.cols != K || in.rows < 0)
    throw std::invalid_argument(std::string("PackedLinear: prepared input of type ") + compute_type_name(in.ct) +
                                " and " + std::to_string(in.cols) + " columns for a product taking " +
                                compute_type_name(want) + " and " + std::to_string(K));
}
// The matmul's source and per-row scales (I8) held by `in`.
void prepared_src(const PreparedInput& in, const void*& src, const float*& rs) {
  const bool s8 = in.ct == ComputeType::I8;
  src = s8 ? (const void*)in.s8.data() : (const void*)in.bf16.data();
  rs = s8 ? in.scale.data() : nullptr;
}
}  // namespace

void PackedLinear::forward(float* out, const PreparedInput& in, Epilogue ep) const {
  check_prepared(in, input_type(), in_features());
  if (in.rows == 0) return;
  const void* src;
  const float* rs;
  prepared_src(in, src, rs);
  impl_->run(out, nullptr, src, rs, nullptr, in.rows, ep, nullptr);
}

void PackedLinear::forward_to(PreparedInput& next, ComputeType next_ct, float* work, const float* inp,
                              const PreparedInput* in, int64_t N, Epilogue ep) const {
  if (next_ct == ComputeType::F32)
    throw std::invalid_argument("PackedLinear::forward_to: the next product takes fp32 (use forward)");
  if (in) {
    check_prepared(*in, input_type(), in_features());
    N = in->rows;
  }
  const Impl& im = *impl_;
  next.reset(next_ct, N, im.out);
  if (N <= 0) return;
  const void* src;
  const float *rs = nullptr, *cs = nullptr;
  if (in)
    prepared_src(*in, src, rs);
  else
    im.convert(inp, N, src, rs, cs);
  if (im.ct == ComputeType::BF16 && next_ct == ComputeType::BF16) {
    im.run(nullptr, next.bf16.data(), src, nullptr, nullptr, N, ep, nullptr);  // oneDNN writes bf16
  } else if (im.ct == ComputeType::I8 && !cs) {
    im.run(work, nullptr, src, rs, nullptr, N, ep, &next);  // the per-row epilogue writes next
  } else {
    im.run(work, nullptr, src, rs, cs, N, ep, nullptr);
    prepare_input(next, next_ct, work, N, im.out);
  }
}

void PreparedInput::reset(ComputeType t, int64_t r, int64_t c) {
  ct = t;
  rows = t == ComputeType::F32 ? 0 : r;
  cols = t == ComputeType::F32 ? 0 : c;
  if (t == ComputeType::BF16 && (int64_t)bf16.size() < r * c) bf16.resize((size_t)(r * c));
  if (t == ComputeType::I8) {
    if ((int64_t)s8.size() < r * c) s8.resize((size_t)(r * c));
    if ((int64_t)scale.size() < r) scale.resize((size_t)r);
  }
}

void prepare_input_ref(PreparedInput& dst, ComputeType ct, const float* x, int64_t rows, int64_t cols) {
  dst.reset(ct, rows, cols);
  for (int64_t r = 0; r < rows && ct != ComputeType::F32; ++r) {
    const float* v = x + r * cols;
    if (ct == ComputeType::BF16) {
      for (int64_t c = 0; c < cols; ++c) dst.bf16[r * cols + c] = to_bf16(v[c]);
      continue;
    }
    float mx = 0.0f;
    bool finite = true;
    for (int64_t c = 0; c < cols; ++c) {
      finite = finite && std::isfinite(v[c]);
      mx = std::max(mx, std::fabs(v[c]));
    }
    const float scale = !finite ? NAN : mx > 0.0f ? mx / 127.0f : 1.0f;
    dst.scale[r] = scale;
    for (int64_t c = 0; c < cols; ++c)
      dst.s8[r * cols + c] = finite ? (int8_t)std::clamp(std::nearbyint(v[c] / scale), -127.0f, 127.0f) : 0;
  }
}

void prepare_input(PreparedInput& dst, ComputeType ct, const float* x, int64_t rows, int64_t cols) {
  dst.reset(ct, rows, cols);
  if (ct == ComputeType::F32 || rows <= 0) return;
  const bool wide = kernel_isa() == KernelIsa::Avx512;
  const int64_t chunk = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t r1 = std::min(rows, r0 + chunk);
    wide ? prepare_rows_avx512(dst, x, r0, r1) : prepare_rows_avx2(dst, x, r0, r1);
  }
}

}  // namespace tfm::ops

namespace tfm::ops {
void set_int8_activation_scales(Int8ActivationScales s) { g_int8_per_token = s == Int8ActivationScales::PerToken; }
void set_fused_quantisation(bool on) { g_fused_quant = on; }
bool fused_quantisation() { return g_fused_quant; }
Int8ActivationScales int8_activation_scales() {
  return g_int8_per_token ? Int8ActivationScales::PerToken : Int8ActivationScales::PerTensor;
}
}  // namespace tfm::ops
