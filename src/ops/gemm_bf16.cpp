#include "ops/gemm_bf16.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "ops/gemm.h"

namespace tfm::ops {

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// dst[r, c] (compact, rows x cols) = bf16(src[r * ld + c]), or with transpose src is [cols, rows]:
// dst[r, c] = bf16(src[c * ld + r]).
void convert(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld, bool transpose) {
  if (!transpose) {
#pragma omp parallel for if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      const float* s = src + r * ld;
      uint16_t* d = dst + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) d[c] = to_bf16(s[c]);
    }
    return;
  }
  // Blocked transpose so both sides stay in cache.
  constexpr int64_t kB = 32;
#pragma omp parallel for collapse(2) if (rows * cols > 65536)
  for (int64_t r0 = 0; r0 < rows; r0 += kB)
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      const int64_t r1 = std::min(rows, r0 + kB), c1 = std::min(cols, c0 + kB);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[r * cols + c] = to_bf16(src[c * ld + r]);
    }
}

using Key = std::tuple<int64_t, int64_t, int64_t, bool, int64_t, uint32_t, uint32_t>;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Cache {
  std::mutex mu;
  std::map<Key, dnnl::matmul> prims;
};
Cache& cache() {
  static Cache c;
  return c;
}

// src [M, K] bf16 ab; weights [K, N] bf16 (ab, or ba = an [N, K] row-major matrix); dst [M, N] f32, row stride ldc.
dnnl::matmul primitive(int64_t M, int64_t N, int64_t K, bool trans_b, int64_t ldc, float alpha, float beta) {
  const Key key{M, N, K, trans_b, ldc, bits(alpha), bits(beta)};
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.prims.find(key);
  if (it != c.prims.end()) return it->second;
  // Batch shapes vary from step to step (length bucketing); bound the cache so a long run cannot grow it forever.
  if (c.prims.size() > 4096) c.prims.clear();
  memory::desc src({M, K}, dt::bf16, tag::ab);
  memory::desc wei({K, N}, dt::bf16, trans_b ? tag::ba : tag::ab);
  memory::desc dst({M, N}, dt::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, engine()));
  c.prims.emplace(key, prim);
  return prim;
}
}  // namespace

float round_to_bf16(float x) {
  uint32_t u = (uint32_t)to_bf16(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool has_bf16_gemm() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

void require_bf16_gemm() {
  if (!has_bf16_gemm())
    throw std::runtime_error("precision 'bf16' needs a CPU with bf16 instructions (AVX512_BF16 or AMX); oneDNN " +
                             onednn_version() + " reports " + cpu_isa_name() + ": use \"precision\": \"fp32\"");
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // empty sum: C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  require_bf16_gemm();
  thread_local std::vector<uint16_t> a_buf, b_buf;  // grown, never shrunk: no allocation per step
  if (a_buf.size() < (size_t)(M * K)) a_buf.resize(M * K);
  if (b_buf.size() < (size_t)(K * N)) b_buf.resize(K * N);
  convert(a_buf.data(), A, M, K, lda, trans_a);
  // B as stored: [N, K] when trans_b (read as the "ba" layout of [K, N]), else [K, N].
  if (trans_b)
    convert(b_buf.data(), B, N, K, ldb, false);
  else
    convert(b_buf.data(), B, K, N, ldb, false);
  dnnl::matmul prim = primitive(M, N, K, trans_b, ldc, alpha, beta);
  memory src_m(memory::desc({M, K}, dt::bf16, tag::ab), engine(), a_buf.data());
  memory wei_m(memory::desc({K, N}, dt::bf16, trans_b ? tag::ba : tag::ab), engine(), b_buf.data());
  memory dst_m(memory::desc({M, N}, dt::f32, memory::dims{ldc, 1}), engine(), C);
  prim.execute(stream(), {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, wei_m}, {DNNL_ARG_DST, dst_m}});
  stream().wait();
}

}  // namespace tfm::ops
