#include "ops/gemm_bf16.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "ops/dnnl_context.h"
#include "ops/gemm.h"

namespace tfm::ops {

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& engine() { return dnnl_cpu_engine(); }
dnnl::stream& stream() { return dnnl_cpu_stream(); }

// dst[r, c] (compact, rows x cols) = bf16(src[r * ld + c]).
void convert(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > 262144)
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    uint16_t* d = dst + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) d[c] = to_bf16(s[c]);
  }
}

// dst[r, c] (compact, rows x cols) = the fp32 value of the bf16 bits src[r * ld + c] (exact).
void widen(float* dst, const uint16_t* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (rows * cols > 262144)
  for (int64_t r = 0; r < rows; ++r)
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = std::bit_cast<float>((uint32_t)src[r * ld + c] << 16);
}

// M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta, data type
using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, uint32_t, uint32_t, int>;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The primitives of these products, one per shape (ops/dnnl_context.h). Their scratchpad is the caller's
// (scratchpad_mode::user, one buffer per thread, as PackedLinear does): with oneDNN's library-owned one, threads
// running one cached primitive at once (Python threads, tfm serve) could share its scratch memory.
using Prim = CachedMatmul;
MatmulCache<Key>& cache() {
  static MatmulCache<Key> c;
  return c;
}

// Operand descriptors: op(A) [M, K] and op(B) [K, N] as strided views of the row-major stored matrices.
memory::desc a_desc(int64_t M, int64_t K, bool trans_a, int64_t lda, dt type) {
  return memory::desc({M, K}, type, trans_a ? memory::dims{1, lda} : memory::dims{lda, 1});
}
memory::desc b_desc(int64_t K, int64_t N, bool trans_b, int64_t ldb, dt type) {
  return memory::desc({K, N}, type, trans_b ? memory::dims{1, ldb} : memory::dims{ldb, 1});
}

// A matmul for these shapes and strides, created once (about 0.1 ms) and cached. dst [M, N] f32, row stride ldc.
Prim primitive(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, int64_t lda, int64_t ldb,
                       int64_t ldc, float alpha, float beta, dt type) {
  const Key key{M, N, K, trans_a, trans_b, lda, ldb, ldc, bits(alpha), bits(beta), (int)type};
  return cache().get(key, [&] {
    memory::desc src = a_desc(M, K, trans_a, lda, type), wei = b_desc(K, N, trans_b, ldb, type);
    memory::desc dst({M, N}, dt::f32, memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, engine());
    return Prim{dnnl::matmul(pd), pd.scratchpad_desc()};
  });
}

// Runs a cached primitive with this thread's scratchpad.
void execute(const Prim& prim, const memory& src, const memory& wei, const memory& dst) {
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  thread_local std::vector<uint8_t> scratch;
  const size_t bytes = prim.scratchpad.get_size();
  if (bytes > 0) {
    if (scratch.size() < bytes) scratch.resize(bytes);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(prim.scratchpad, engine(), scratch.data()));
  }
  prim.matmul.execute(stream(), args);
  stream().wait();
}
}  // namespace

float round_to_bf16(float x) {
  uint32_t u = (uint32_t)to_bf16(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool has_bf16_gemm() {
  static const bool has = [] {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
  }();
  return has;
}

bool bf16_gemm_emulated() {
  static const bool on = [] {
    const char* env = std::getenv("TFM_EMULATE_BF16");
    return !has_bf16_gemm() && env && std::string(env) == "1";
  }();
  return on;
}

void require_bf16_gemm() {
  if (!has_bf16_gemm() && !bf16_gemm_emulated())
    throw std::runtime_error("precision 'bf16' needs a CPU with bf16 instructions (AVX512_BF16 or AMX); oneDNN " +
                             onednn_version() + " reports " + cpu_isa_name() + ": use \"precision\": \"fp32\"");
}

void convert_to_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
  convert(dst, src, rows, cols, ld);
}

void gemm_bf16_converted(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                         int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // empty sum: C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  require_bf16_gemm();
  if (bf16_gemm_emulated()) {
    // fp32 products of the widened bf16 operands (bf16_gemm_emulated), kc terms of the sum at a time: the widened
    // slices stay small (2 x 4 MB at BERT-base size), so that emulated runs measure about a native run's memory.
    constexpr int64_t kc = 256;
    thread_local std::vector<float> a32, b32;
    for (int64_t k0 = 0; k0 < K; k0 += kc) {
      const int64_t k = std::min(kc, K - k0);
      if (a32.size() < (size_t)(M * k)) a32.resize(M * k);
      if (b32.size() < (size_t)(k * N)) b32.resize(k * N);
      // op(A)[:, k0:k0+k] and op(B)[k0:k0+k, :] compact as stored: A [k, M] or [M, k], B [N, k] or [k, N].
      if (trans_a) widen(a32.data(), A + k0 * lda, k, M, lda);
      else widen(a32.data(), A + k0, M, k, lda);
      if (trans_b) widen(b32.data(), B + k0, N, k, ldb);
      else widen(b32.data(), B + k0 * ldb, k, N, ldb);
      gemm(trans_a, trans_b, M, N, k, alpha, a32.data(), trans_a ? M : k, b32.data(), trans_b ? k : N,
           k0 == 0 ? beta : 1.0f, C, ldc);
    }
    return;
  }
  // A transposed operand is described by its strides (oneDNN's AMX kernels read transposed sources directly).
  const Prim prim = primitive(M, N, K, trans_a, trans_b, lda, ldb, ldc, alpha, beta, dt::bf16);
  memory src_m(a_desc(M, K, trans_a, lda, dt::bf16), engine(), const_cast<uint16_t*>(A));
  memory wei_m(b_desc(K, N, trans_b, ldb, dt::bf16), engine(), const_cast<uint16_t*>(B));
  memory dst_m(memory::desc({M, N}, dt::f32, memory::dims{ldc, 1}), engine(), C);
  execute(prim, src_m, wei_m, dst_m);
}

void gemm_bf16_converted(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                         const uint16_t* B, float beta, float* C, int64_t ldc) {
  gemm_bf16_converted(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K > 0) require_bf16_gemm();
  thread_local std::vector<uint16_t> a_buf, b_buf;  // grown, never shrunk: no allocation per step
  if (a_buf.size() < (size_t)(M * K)) a_buf.resize(M * K);
  if (b_buf.size() < (size_t)(K * N)) b_buf.resize(K * N);
  // Compact bf16 copies of A and B as stored.
  convert(a_buf.data(), A, trans_a ? K : M, trans_a ? M : K, lda);
  convert(b_buf.data(), B, trans_b ? N : K, trans_b ? K : N, ldb);
  gemm_bf16_converted(trans_a, trans_b, M, N, K, alpha, a_buf.data(), b_buf.data(), beta, C, ldc);
}

}  // namespace tfm::ops
