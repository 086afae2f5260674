// Grouped-query attention (ops::AttentionDims::num_kv_heads; nn::MultiHeadAttention::num_kv_heads and head_size):
// the inference kernels (blocked, GEMM path, bf16, unpadded) against the double-precision reference and against
// attention over explicitly repeated heads (Hugging Face's repeat_kv), and a Qwen3Attention (4 query heads, 2
// key/value heads, head_dim 8 over hidden_size 16, q/k RMSNorm, rotary, causal, left padding) against PyTorch
// (scripts/make_attention_option_fixtures.py, checked there against a float64 loop) with split and fused
// projections, in training (every gradient) and in inference (padded and unpadded).
#include <gtest/gtest.h>

#include <vector>

#include "attention_fixture.h"
#include "ops/attention.h"
#include "ops/isa.h"

using namespace tfm;

namespace {
// k, v [N, kvh * hd] repeated to [N, nh * hd]: head h reads kv head h / (nh / kvh).
std::vector<float> repeat(const std::vector<float>& x, int64_t N, int64_t nh, int64_t kvh, int64_t hd) {
  std::vector<float> out(N * nh * hd);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t c = 0; c < hd; ++c) out[(n * nh + h) * hd + c] = x[(n * kvh + h / (nh / kvh)) * hd + c];
  return out;
}
}  // namespace

TEST(GroupedQueryAttention, KernelsReadTheGroupsKeysAsRepeatedHeads) {
  const int64_t B = 2, nh = 6, kvh = 2, hd = 16;
  for (int64_t L : {5, 40, 130}) {  // GEMM path, and the blocked kernel above 32 keys
    SCOPED_TRACE(L);
    const std::vector<float> q = test::random_vec(B * L * nh * hd, 1), k = test::random_vec(B * L * kvh * hd, 2),
                             v = test::random_vec(B * L * kvh * hd, 3);
    const std::vector<float> kr = repeat(k, B * L, nh, kvh, hd), vr = repeat(v, B * L, nh, kvh, hd);
    std::vector<float> mask(B * L, 1.0f);
    mask[2 * L - 1] = 0.0f;
    ops::AttentionMask m;
    m.key_mask = mask.data();
    ops::AttentionDims plain{B, L, L, nh, hd};
    ops::AttentionDims grouped = plain;
    grouped.num_kv_heads = kvh;
    std::vector<float> want(B * L * nh * hd), ref(want.size());
    ops::attention_forward_ref(want.data(), nullptr, q.data(), kr.data(), vr.data(), plain, m);
    ops::attention_forward_ref(ref.data(), nullptr, q.data(), k.data(), v.data(), grouped, m);
    EXPECT_TRUE(test::all_close(ref, want, 1e-6f));
    for (auto isa : test::isas()) {
      test::IsaScope scope(isa);
      for (bool blocked : {false, true}) {
        test::BlockedAttentionScope force(blocked);
        std::vector<float> out(want.size());
        ops::attention_forward(out.data(), nullptr, q.data(), k.data(), v.data(), grouped, m);
        EXPECT_TRUE(test::all_close(out, want, 2e-5f)) << "blocked " << blocked;
        // bf16 products (where the CPU has them; fp32 otherwise): the grouped read equals the repeated heads'.
        ops::AttentionDims gb = grouped, pb = plain;
        gb.bf16 = pb.bf16 = true;
        std::vector<float> ob(want.size()), wb(want.size());
        ops::attention_forward(ob.data(), nullptr, q.data(), k.data(), v.data(), gb, m);
        ops::attention_forward(wb.data(), nullptr, q.data(), kr.data(), vr.data(), pb, m);
        EXPECT_TRUE(test::all_close(ob, wb, 0.0f)) << "bf16, blocked " << blocked;
        std::vector<float> probs(B * nh * L * L);  // the saving path (GEMMs into probs)
        ops::attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), grouped, m);
        EXPECT_TRUE(test::all_close(out, want, 2e-5f));
      }
      // Unpadded, causal: each sentence alone.
      const int64_t offsets[3] = {0, L - 2, 2 * L - 3};
      ops::AttentionDims u = grouped;
      u.seq_offsets = offsets;
      ops::AttentionMask causal;
      causal.causal = true;
      std::vector<float> out(want.size()), exp(want.size());
      ops::attention_forward(out.data(), nullptr, q.data(), k.data(), v.data(), u, causal);
      ops::AttentionDims ur = plain;
      ur.seq_offsets = offsets;
      ops::attention_forward_ref(exp.data(), nullptr, q.data(), kr.data(), vr.data(), ur, causal);
      for (int64_t b = 0; b < 2; ++b) {
        ops::AttentionDims one{1, offsets[b + 1] - offsets[b], offsets[b + 1] - offsets[b], nh, hd};
        ops::attention_forward_ref(exp.data() + offsets[b] * nh * hd, nullptr, q.data() + offsets[b] * nh * hd,
                                   kr.data() + offsets[b] * nh * hd, vr.data() + offsets[b] * nh * hd, one, causal);
      }
      EXPECT_TRUE(test::all_close(out.data(), exp.data(), offsets[2] * nh * hd, 2e-5f));
    }
  }
  ops::AttentionDims bad{1, 2, 2, 6, 4};
  bad.num_kv_heads = 4;
  std::vector<float> z(2 * 6 * 4, 0.0f), o(z.size());
  EXPECT_THROW(ops::attention_forward(o.data(), nullptr, z.data(), z.data(), z.data(), bad, {}), std::invalid_argument);
}

namespace {
struct Qwen3Attention {
  nn::ParamStore store;
  nn::MultiHeadAttention a;
  static constexpr int64_t H = 16, nh = 4, nkv = 2, hd = 8;
  // fused: one trainable q | k | v projection ("qkv") instead of q_proj / k_proj / v_proj.
  Qwen3Attention(const SafeTensors& fx, bool fused, bool norms = true) {
    nn::Vars vb(store);
    a.num_heads = nh;
    a.num_kv_heads = nkv;
    a.head_size = hd;
    a.hidden_size = H;
    if (fused) {
      a.qkv = nn::Linear::load(vb.prefix("qkv"), H, (nh + 2 * nkv) * hd, false);
    } else {
      a.query = nn::Linear::load(vb.prefix("q_proj"), H, nh * hd, false);
      a.key = nn::Linear::load(vb.prefix("k_proj"), H, nkv * hd, false);
      a.value = nn::Linear::load(vb.prefix("v_proj"), H, nkv * hd, false);
    }
    a.output = nn::Linear::load(vb.prefix("o_proj"), nh * hd, H, false);
    if (norms) {
      a.q_norm = nn::LayerNorm::load_rms(vb.prefix("q_norm"), hd, 1e-6f);
      a.k_norm = nn::LayerNorm::load_rms(vb.prefix("k_norm"), hd, 1e-6f);
    }
    a.rotary = nn::Rotary::make(10000.0, hd);
    a.causal = true;
    store.finalize();
    for (const auto& e : store.entries()) {
      float* dst = store.all_data().data() + e.offset;
      if (e.name != "qkv.weight") {
        const Tensor t = fx.get(e.name);
        std::copy_n(t.f32(), e.numel, dst);
        continue;
      }
      for (const char* part : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) {
        const Tensor t = fx.get(part);
        dst = std::copy_n(t.f32(), t.numel(), dst);
      }
    }
  }
};
}  // namespace

TEST(GroupedQueryAttention, Qwen3AttentionMatchesPyTorchSplitAndFused) {
  const SafeTensors fx = test::option_fixture("qwen3_attention.safetensors");
  const Tensor xt = fx.get("x");
  const int64_t B = xt.size(0), L = xt.size(1), H = xt.size(2);
  const std::vector<float> x = test::fixture_vec(fx, "x"), mask = test::fixture_vec(fx, "mask"),
                           want = test::fixture_vec(fx, "out"), w = test::fixture_vec(fx, "weight"),
                           want_dx = test::fixture_vec(fx, "dx");
  ops::AttentionMask m;
  m.key_mask = mask.data();
  auto expect_real_rows = [&](const std::vector<float>& got, const char* what) {
    for (int64_t r = 0; r < B * L; ++r)
      if (mask[r] != 0.0f) {
        EXPECT_TRUE(test::all_close(got.data() + r * H, want.data() + r * H, H, 2e-5f, 1e-4f)) << what << " row " << r;
      }
  };
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused qkv" : "split q / k / v");
    Qwen3Attention t(fx, fused);
    nn::Context c;
    c.grad = true;
    std::vector<float> out(B * L * H), dx(B * L * H, 0.0f);
    t.a.forward(c, out.data(), x.data(), x.data(), B, L, L, m);
    expect_real_rows(out, "training");
    t.a.backward(w.data(), dx.data(), dx.data());
    EXPECT_TRUE(test::all_close(dx, want_dx, 2e-5f, 1e-4f));
    for (const auto& e : t.store.entries()) {
      const float* g = t.store.all_grad().data() + e.offset;
      if (e.name != "qkv.weight") {
        EXPECT_TRUE(test::all_close(g, fx.get("d" + e.name).f32(), e.numel, 2e-5f, 1e-4f)) << e.name;
        continue;
      }
      for (const char* part : {"dq_proj.weight", "dk_proj.weight", "dv_proj.weight"}) {
        const Tensor d = fx.get(part);
        EXPECT_TRUE(test::all_close(g, d.f32(), d.numel(), 2e-5f, 1e-4f)) << part;
        g += d.numel();
      }
    }
    test::pack_for_inference(t.a);
    std::vector<float> inf(B * L * H), qkv(B * L * t.a.qkv_width()), ctx(B * L * t.a.q_width());
    t.a.forward_inference(inf.data(), x.data(), B, L, m, qkv.data(), ctx.data());
    expect_real_rows(inf, "padded inference");
    test::Unpadded u(x, mask.data(), B, L, H);  // row 1 starts at column 2: rotary positions from there
    std::vector<float> uo(u.x.size());
    t.a.forward_inference(uo.data(), u.x.data(), u.varlen(), qkv.data(), ctx.data());
    for (size_t r = 0; r < u.rows.size(); ++r)
      EXPECT_TRUE(test::all_close(uo.data() + r * H, want.data() + u.rows[r] * H, H, 2e-5f, 1e-4f)) << "row " << r;
  }
}

TEST(GroupedQueryAttention, RepeatedKeyGradientsMatchFiniteDifferences) {
  const SafeTensors fx = test::option_fixture("qwen3_attention.safetensors");
  Qwen3Attention t(fx, false);
  const int64_t B = 1, L = 4, H = Qwen3Attention::H;
  std::vector<float> x = test::random_vec(B * L * H, 7);
  const std::vector<float> w = test::random_vec(B * L * H, 8);
  auto loss = [&] {
    std::vector<float> out(B * L * H);
    t.a.forward(nn::Context{}, out.data(), x.data(), x.data(), B, L, L, {});
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += (double)out[i] * w[i];
    return s;
  };
  nn::Context c;
  c.grad = true;
  std::vector<float> out(B * L * H), dx(B * L * H, 0.0f);
  t.a.forward(c, out.data(), x.data(), x.data(), B, L, L, {});
  t.store.zero_grad();
  t.a.backward(w.data(), dx.data(), dx.data());
  const std::vector<float> dp = t.store.all_grad();
  test::expect_gradient(x, dx, loss, "dx");
  test::expect_gradient(t.store.all_data(), dp, loss, "parameters");
}
