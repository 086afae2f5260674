// In-process A/B of the fused non-GEMM kernels (issue 9 part 3) at BERT-base sizes, one thread, variants
// interleaved, best of 23 reps, so the ratios hold on a loaded machine where whole forwards do not:
//   - attention: the GEMM + scores path (what a caller asking for probs gets, and main's inference path before
//     the blocked kernel) vs the blocked online softmax on the AVX-512 and AVX2 copies;
//   - add + LayerNorm: a separate add loop then layer_norm_forward vs add_layer_norm_forward per ISA;
//   - GELU (activation_forward) per ISA;
//   - the producers of a GEMM input (issue 24): add + LayerNorm then the product's own conversion pass
//     (prepare_input) vs layer_norm_forward_to writing bf16 / s8 rows in the same pass; the int8 FFN-in product
//     with GELU writing fp32 then the FFN-out's quantisation pass vs forward_to writing the s8 rows in its
//     epilogue (and the product alone, no epilogue, for the epilogue's cost); bf16 the same with oneDNN writing
//     bf16.
// Usage: bench_kernels (no arguments); prints one line per op and shape, ratios to the first variant.
// set_kernel_isa(Avx512) throws on a CPU without AVX-512.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include "core/threading.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/isa.h"
#include "ops/layer_norm.h"
using namespace tfm::ops;
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main() {
  tfm::set_num_threads(1);
  if (!cpu_has_avx512()) {
    std::fprintf(stderr, "bench_kernels: this CPU has no AVX-512; only the AVX2 copies exist here\n");
    return 1;
  }
  struct V { const char* name; std::function<void()> fn; double best = 1e9; };
  auto run = [](const char* title, std::vector<V> vs) {
    for (int r = 0; r < 25; ++r)
      for (auto& v : vs) { double t0 = now(); v.fn(); double t = now() - t0; if (r > 1) v.best = std::min(v.best, t); }
    printf("%s:", title);
    for (auto& v : vs) printf("  %s %.3f ms (%.2fx)", v.name, v.best * 1e3, v.best / vs[0].best);
    printf("\n");
  };
  int64_t shapes[][2] = {{1, 128}, {8, 128}, {1, 512}, {32, 32}};
  for (auto& sh : shapes) {
    int64_t B = sh[0], L = sh[1], H = 12, Dh = 64, D = 768, N = B * L;
    std::vector<float> qkv(N * 3 * D), out(N * D), probs(B * H * L * L), x(N * D), r(N * D), w(D, 1.1f), b(D, 0.1f);
    for (auto& e : qkv) e = (rand() / (float)RAND_MAX - 0.5f) * 4;
    for (auto& e : x) e = rand() / (float)RAND_MAX;
    for (auto& e : r) e = rand() / (float)RAND_MAX;
    AttentionDims d{B, L, L, H, Dh};
    d.q_ld = d.k_ld = d.v_ld = 3 * D;
    d.out_ld = D;
    AttentionMask m;
    auto att = [&](KernelIsa isa, float* p) { return [&, isa, p] { set_kernel_isa(isa); attention_forward(out.data(), p, qkv.data(), qkv.data() + D, qkv.data() + 2 * D, d, m); }; };
    char t[64];
    snprintf(t, sizeof t, "attention [%ld,%ld]", (long)B, (long)L);
    run(t, {{"gemm-path", att(KernelIsa::Avx512, probs.data())}, {"blocked-avx512", att(KernelIsa::Avx512, nullptr)}, {"blocked-avx2", att(KernelIsa::Avx2, nullptr)}});
    if (cpu_has_avx512_bf16()) {  // a bf16 / int8 model's attention (AttentionDims::bf16) against the fp32 copy
      AttentionDims db = d;
      db.bf16 = true;
      auto attb = [&](const AttentionDims& dd) { return [&] { set_kernel_isa(KernelIsa::Avx512); attention_forward(out.data(), nullptr, qkv.data(), qkv.data() + D, qkv.data() + 2 * D, dd, m); }; };
      snprintf(t, sizeof t, "attention bf16 [%ld,%ld]", (long)B, (long)L);
      run(t, {{"fp32-avx512", attb(d)}, {"bf16-dot", attb(db)}});
      const double flop = 4.0 * B * H * L * L * Dh;
      std::vector<V> one = {{"bf16-dot", attb(db)}};
      for (int r = 0; r < 15; ++r) { double t0 = now(); one[0].fn(); one[0].best = std::min(one[0].best, now() - t0); }
      printf("  bf16-dot: %.1f GFLOP/s (4 B H L^2 head_dim flops, 1 thread)\n", flop / one[0].best * 1e-9);
    }
    std::vector<float> y(N * D);
    snprintf(t, sizeof t, "add+LN [%ld,%ld]", (long)B, (long)L);
    run(t, {{"add;LN", [&] { std::vector<float>& a = y; for (int64_t i = 0; i < N * D; ++i) a[i] = x[i] + r[i]; layer_norm_forward(a.data(), nullptr, nullptr, a.data(), w.data(), b.data(), N, D, 1e-12f); }},
            {"fused-avx512", [&] { set_kernel_isa(KernelIsa::Avx512); add_layer_norm_forward(y.data(), nullptr, x.data(), r.data(), w.data(), b.data(), N, D, 1e-12f); }},
            {"fused-avx2", [&] { set_kernel_isa(KernelIsa::Avx2); add_layer_norm_forward(y.data(), nullptr, x.data(), r.data(), w.data(), b.data(), N, D, 1e-12f); }}});
    for (ComputeType ct : {ComputeType::BF16, ComputeType::I8}) {
      PreparedInput q;
      snprintf(t, sizeof t, "add+LN -> %s [%ld,%ld]", compute_type_name(ct), (long)B, (long)L);
      set_kernel_isa(KernelIsa::Avx512);
      run(t, {{"LN;convert", [&] { add_layer_norm_forward(y.data(), nullptr, x.data(), r.data(), w.data(), b.data(), N, D, 1e-12f); prepare_input(q, ct, y.data(), N, D); }},
              {"fused", [&] { layer_norm_forward_to(y.data(), nullptr, x.data(), r.data(), w.data(), b.data(), N, D, 1e-12f, ct, q); }}});
      if (ct == ComputeType::BF16 && !has_bf16_gemm()) continue;
      std::vector<float> wi(3072 * D), bi(3072), h(N * 3072);
      for (auto& e : wi) e = (rand() / (float)RAND_MAX - 0.5f) * 0.1f;
      for (auto& e : bi) e = rand() / (float)RAND_MAX - 0.5f;
      PackedLinear ffn_in(wi.data(), bi.data(), D, 3072, ct);
      PreparedInput xq, hq;
      prepare_input(xq, ct, x.data(), N, D);
      snprintf(t, sizeof t, "%s FFN-in+GELU [%ld,%ld]", compute_type_name(ct), (long)B, (long)L);
      run(t, {{"fp32-out;convert", [&] { ffn_in.forward(h.data(), xq, Epilogue::Gelu); prepare_input(hq, ct, h.data(), N, 3072); }},
              {"fused", [&] { ffn_in.forward_to(hq, ct, h.data(), nullptr, &xq, N, Epilogue::Gelu); }},
              {"no-act", [&] { ffn_in.forward(h.data(), xq, Epilogue::None); }}});
    }
    std::vector<float> g(N * 3072), go(N * 3072);
    for (auto& e : g) e = (rand() / (float)RAND_MAX - 0.5f) * 6;
    snprintf(t, sizeof t, "GELU [%ld,%ld]x3072", (long)B, (long)L);
    run(t, {{"avx2", [&] { set_kernel_isa(KernelIsa::Avx2); activation_forward(go.data(), g.data(), N * 3072, Activation::Gelu); }},
            {"avx512", [&] { set_kernel_isa(KernelIsa::Avx512); activation_forward(go.data(), g.data(), N * 3072, Activation::Gelu); }}});
  }
}
