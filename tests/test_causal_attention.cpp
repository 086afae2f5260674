// Causal self-attention as a flag of nn::MultiHeadAttention (causal: query i sees keys j <= i; a decoder used as an
// encoder, Qwen3-Embedding): the module's flag against the caller's causal mask on a plain module (ops::
// AttentionMask::causal, checked against the reference in test_attention.cpp), left padding of a padded batch
// against the unpadded path (per-sentence causality), the training forward against inference, gradients against
// finite differences, and the flag's effect on the Qwen3 fixture (compared with PyTorch in
// test_grouped_query_attention.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "attention_fixture.h"

using namespace tfm;

namespace {
struct Attn {
  nn::ParamStore store;
  nn::MultiHeadAttention a;
  static constexpr int64_t H = 8, nh = 2;
  explicit Attn(bool causal) {
    nn::Vars vb(store);
    a.num_heads = nh;
    a.hidden_size = H;
    a.qkv = nn::Linear::load(vb.prefix("Wqkv"), H, 3 * H);
    a.output = nn::Linear::load(vb.prefix("Wo"), H, H);
    a.rotary = nn::Rotary::make(100.0, H / nh);
    a.causal = causal;
    store.finalize();
    store.all_data() = test::random_vec(store.total(), 61, -0.6f, 0.6f);
  }
};
}  // namespace

TEST(CausalAttention, FlagEqualsTheCallersCausalMaskOnEveryPath) {
  const int64_t B = 2, L = 7, H = Attn::H;
  Attn flag(true), plain(false);
  const std::vector<float> x = test::random_vec(B * L * H, 62);
  std::vector<float> mask(B * L, 1.0f);
  mask[L] = mask[L + 1] = mask[L + 2] = 0.0f;  // row 1 left-padded by 3
  ops::AttentionMask km, causal;
  km.key_mask = causal.key_mask = mask.data();
  causal.causal = true;
  std::vector<float> want(B * L * H), out(B * L * H);
  plain.a.forward(nn::Context{}, want.data(), x.data(), x.data(), B, L, L, causal);
  flag.a.forward(nn::Context{}, out.data(), x.data(), x.data(), B, L, L, km);
  EXPECT_TRUE(test::all_close(out, want, 0.0f));
  std::vector<float> bidirectional(B * L * H);
  plain.a.forward(nn::Context{}, bidirectional.data(), x.data(), x.data(), B, L, L, km);
  EXPECT_GT(test::max_abs_diff(bidirectional, want), 0.02);  // the flag changes the result

  test::pack_for_inference(flag.a);
  std::vector<float> inf(B * L * H), qkv(B * L * 3 * H), ctx(B * L * H);
  flag.a.forward_inference(inf.data(), x.data(), B, L, km, qkv.data(), ctx.data());
  test::Unpadded u(x, mask.data(), B, L, H);
  std::vector<float> uo(u.x.size());
  flag.a.forward_inference(uo.data(), u.x.data(), u.varlen(), qkv.data(), ctx.data());
  for (int64_t r = 0; r < B * L; ++r)  // a left-padded query sees no key: its row is not compared
    if (mask[r] != 0.0f) {
      EXPECT_TRUE(test::all_close(inf.data() + r * H, want.data() + r * H, H, 1e-5f)) << r;
    }
  for (size_t r = 0; r < u.rows.size(); ++r)
    EXPECT_TRUE(test::all_close(uo.data() + r * H, want.data() + u.rows[r] * H, H, 1e-5f)) << "unpadded " << r;
}

TEST(CausalAttention, GradientsMatchFiniteDifferences) {
  Attn t(true);
  const int64_t B = 1, L = 5, H = Attn::H;
  std::vector<float> x = test::random_vec(B * L * H, 63);
  const std::vector<float> w = test::random_vec(B * L * H, 64);
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
  // The last query's output moves with every key; the first one's with its own token only.
  std::vector<float> x2 = x;
  for (int64_t c2 = 0; c2 < H; ++c2) x2[(L - 1) * H + c2] += 0.5f;
  std::vector<float> o1(B * L * H), o2(B * L * H);
  t.a.forward(nn::Context{}, o1.data(), x.data(), x.data(), B, L, L, {});
  t.a.forward(nn::Context{}, o2.data(), x2.data(), x2.data(), B, L, L, {});
  EXPECT_TRUE(test::all_close(o1.data(), o2.data(), (L - 1) * H, 0.0f));
}

TEST(CausalAttention, WindowRefusesIt) {
  Attn t(true);
  t.a.window = 2;
  std::vector<float> x(3 * Attn::H, 0.1f), out(x.size());
  EXPECT_THROW(t.a.forward(nn::Context{}, out.data(), x.data(), x.data(), 1, 3, 3, {}), std::invalid_argument);
}
