// The module library (src/nn/): each module's backward against central finite differences of its forward, the
// inference paths (fused QKV, fused residual + LayerNorm, the decoder's incremental step) against the saving
// forward, and the parameter store's prefixes. The models built from these modules are checked against PyTorch
// in test_reference_outputs.cpp (seq2seq), test_encoders.cpp and test_reference_preln.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "io/safetensors.h"
#include "nn/params.h"
#include "nn/transformer_block.h"
#include "nn/weights.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/isa.h"
#include "test_util.h"

namespace tfm {
namespace {

using test::all_close;
using test::expect_gradient;
using test::GradCheck;
using test::random_vec;

constexpr int64_t H = 16, kHeads = 2, F = 24;

nn::MultiHeadAttention make_attention(const nn::Vars& vb, bool bias) {
  nn::MultiHeadAttention a;
  a.query = nn::Linear::load(vb.prefix("query"), H, H, bias);
  a.key = nn::Linear::load(vb.prefix("key"), H, H, bias);
  a.value = nn::Linear::load(vb.prefix("value"), H, H, bias);
  a.output = nn::Linear::load(vb.prefix("output"), H, H, bias);
  a.num_heads = kHeads;
  a.hidden_size = H;
  return a;
}
nn::FeedForward make_ffn(const nn::Vars& vb, ops::Activation act) {
  nn::FeedForward f;
  f.linear1 = nn::Linear::load(vb.prefix("linear1"), H, F);
  f.linear2 = nn::Linear::load(vb.prefix("linear2"), F, H);
  f.act = act;
  return f;
}
nn::EncoderBlock make_encoder_block(nn::ParamStore& store, bool norm_first, ops::Activation act) {
  const nn::Vars vb(store);
  nn::EncoderBlock b;
  b.attention = make_attention(vb.prefix("attention"), true);
  b.norm1 = nn::LayerNorm::load(vb.prefix("norm1"), H, 1e-5f);
  b.ffn = make_ffn(vb.prefix("ffn"), act);
  b.norm2 = nn::LayerNorm::load(vb.prefix("norm2"), H, 1e-5f);
  b.norm_first = norm_first;
  return b;
}
nn::DecoderBlock make_decoder_block(nn::ParamStore& store, bool norm_first, ops::Activation act) {
  const nn::Vars vb(store);
  nn::DecoderBlock b;
  b.attention1 = make_attention(vb.prefix("attention1"), false);
  b.norm1 = nn::LayerNorm::load(vb.prefix("norm1"), H, 1e-5f);
  b.attention2 = make_attention(vb.prefix("attention2"), false);
  b.norm2 = nn::LayerNorm::load(vb.prefix("norm2"), H, 1e-5f);
  b.ffn = make_ffn(vb.prefix("ffn"), act);
  b.norm3 = nn::LayerNorm::load(vb.prefix("norm3"), H, 1e-5f);
  b.norm_first = norm_first;
  return b;
}
// The inference layout of an encoder block: the fused QKV product and every Linear packed in ct.
void pack_for_inference(nn::EncoderBlock& blk, ops::ComputeType ct) {
  nn::MultiHeadAttention& a = blk.attention;
  std::vector<float> w(3 * H * H), bias(3 * H);
  int64_t i = 0;
  for (const nn::Linear* l : {&a.query, &a.key, &a.value}) {
    std::memcpy(w.data() + i * H * H, l->weight.data(), sizeof(float) * H * H);
    std::memcpy(bias.data() + i * H, l->bias.data(), sizeof(float) * H);
    ++i;
  }
  a.qkv = nn::Linear::from_weights(w.data(), bias.data(), H, 3 * H, ct);
  for (nn::Linear* l : {&a.output, &blk.ffn.linear1, &blk.ffn.linear2}) l->pack(ct);
}
// Random values; LayerNorm weights near 1 so the blocks stay well conditioned.
void randomise(nn::ParamStore& store, uint64_t seed) {
  store.finalize();
  Rng rng(seed);
  for (const auto& e : store.entries()) {
    const bool ln_weight = e.name.find("norm") != std::string::npos && e.name.find("weight") != std::string::npos;
    float* p = store.all_data().data() + e.offset;
    for (int64_t i = 0; i < e.numel; ++i) p[i] = ln_weight ? 1.0f + rng.uniform(-0.2f, 0.2f) : rng.uniform(-0.5f, 0.5f);
  }
}

double dot(const float* y, const std::vector<float>& R) {
  double s = 0;
  for (size_t i = 0; i < R.size(); ++i) s += (double)y[i] * R[i];
  return s;
}

// Central differences of f with respect to every element, against the analytic gradient (the first 5 misses
// reported).
const GradCheck kGrad{2e-3, 5e-3, 3e-2, false, 1, 5};

// An encoder block's backward from R (after f's forward) against central differences of f = <out, R>: the input
// gradient and every parameter's.
void expect_encoder_block_grads(nn::ParamStore& store, nn::EncoderBlock& blk, const std::function<double()>& f,
                                std::vector<float>& x, const std::vector<float>& R) {
  store.zero_grad();
  std::vector<float> dx(x.size(), 0.0f);
  blk.backward(R.data(), dx.data());
  const std::vector<float> g = store.all_grad();
  expect_gradient(x.data(), dx.data(), x.size(), f, "dx", kGrad);
  for (const auto& e : store.entries())
    expect_gradient(store.all_data().data() + e.offset, g.data() + e.offset, e.numel, f, e.name, kGrad);
}

struct BlockCase {
  bool norm_first;
  ops::Activation act;
};
class NnBlockGrad : public ::testing::TestWithParam<BlockCase> {};

TEST_P(NnBlockGrad, EncoderBlockMatchesFiniteDifferences) {
  const BlockCase bc = GetParam();
  nn::ParamStore store;
  nn::EncoderBlock blk = make_encoder_block(store, bc.norm_first, bc.act);
  randomise(store, 3);
  const int64_t B = 2, L = 3;
  std::vector<int64_t> valid = {3, 2};
  ops::AttentionMask mask;
  mask.valid_lens = valid.data();
  auto x = random_vec(B * L * H, 4), R = random_vec(B * L * H, 5);
  nn::Context ctx;
  ctx.grad = true;
  auto f = [&] {
    blk.forward(ctx, x.data(), B, L, mask);
    return dot(blk.out.data(), R);
  };
  f();
  expect_encoder_block_grads(store, blk, f, x, R);
}

TEST_P(NnBlockGrad, DecoderBlockMatchesFiniteDifferences) {
  const BlockCase bc = GetParam();
  nn::ParamStore store;
  nn::DecoderBlock blk = make_decoder_block(store, bc.norm_first, bc.act);
  randomise(store, 6);
  const int64_t B = 2, Lt = 3, Ls = 4;
  std::vector<int64_t> src_valid = {4, 2};
  ops::AttentionMask causal, enc_mask;
  causal.causal = true;
  enc_mask.valid_lens = src_valid.data();
  auto x = random_vec(B * Lt * H, 7), enc = random_vec(B * Ls * H, 8), R = random_vec(B * Lt * H, 9);
  nn::Context ctx;
  ctx.grad = true;
  auto f = [&] {
    blk.forward(ctx, x.data(), enc.data(), B, Lt, Ls, causal, enc_mask);
    return dot(blk.out.data(), R);
  };
  f();
  store.zero_grad();
  std::vector<float> dx(x.size(), 0.0f), denc(enc.size(), 0.0f);
  blk.backward(R.data(), dx.data(), denc.data());
  const std::vector<float> g = store.all_grad();
  expect_gradient(x.data(), dx.data(), x.size(), f, "dx", kGrad);
  expect_gradient(enc.data(), denc.data(), enc.size(), f, "denc", kGrad);
  for (const auto& e : store.entries())
    expect_gradient(store.all_data().data() + e.offset, g.data() + e.offset, e.numel, f, e.name, kGrad);
}

INSTANTIATE_TEST_SUITE_P(PostAndPreLN, NnBlockGrad,
                         // smooth activations: a ReLU kink between x - h and x + h breaks central differences
                         // (ReLU's backward is checked in test_seq2seq.cpp and against PyTorch)
                         ::testing::Values(BlockCase{false, ops::Activation::Gelu},
                                           BlockCase{true, ops::Activation::Gelu},
                                           BlockCase{false, ops::Activation::GeluTanh},
                                           BlockCase{true, ops::Activation::GeluTanh}));

// Self-attention's training forward stacks q | k | v into one product (MultiHeadAttention::fused_qkv); given the
// same values through two buffers (cross-attention's path: three [H, H] products) every output and gradient is the
// same up to summation order, with and without biases, with the input gradients in one buffer or two; with fp32
// and with bf16 parameter products (the stacked path converts the input once; the separate ones each convert it).
TEST(NnAttention, StackedSelfAttentionProjectionsMatchSeparateOnes) {
  std::vector<float> out_fp32;  // bias, fp32: the bf16 products must give another answer
  for (ops::ComputeType precision : {ops::ComputeType::F32, ops::ComputeType::BF16})
  for (bool bias : {true, false}) {
    if (precision == ops::ComputeType::BF16 && !ops::bf16_gemm_available()) continue;
    SCOPED_TRACE(ops::compute_type_name(precision));
    nn::ParamStore store;
    nn::MultiHeadAttention a = make_attention(nn::Vars(store), bias);
    for (nn::Linear* l : {&a.query, &a.key, &a.value, &a.output}) l->precision = precision;
    randomise(store, 11);
    const int64_t B = 2, L = 5;
    std::vector<int64_t> valid = {5, 3};
    ops::AttentionMask mask;
    mask.valid_lens = valid.data();
    auto x = random_vec(B * L * H, 12), R = random_vec(B * L * H, 13);
    const std::vector<float> x2 = x;  // the same values at another address: the unstacked path
    nn::Context ctx;
    ctx.grad = true;
    std::vector<float> out(x.size()), out_ref(x.size());
    // Reference: xq and xkv at different addresses, dxq and dxkv separate.
    a.forward(ctx, out_ref.data(), x.data(), x2.data(), B, L, L, mask);
    ASSERT_FALSE(a.fused_qkv);
    store.zero_grad();
    std::vector<float> dq_ref(x.size(), 0.0f), dkv_ref(x.size(), 0.0f);
    a.backward(R.data(), dq_ref.data(), dkv_ref.data());
    const std::vector<float> g_ref = store.all_grad();
    // Stacked, input gradients in one buffer.
    a.forward(ctx, out.data(), x.data(), x.data(), B, L, L, mask);
    ASSERT_TRUE(a.fused_qkv);
    EXPECT_TRUE(all_close(out, out_ref, 1e-5f, 1e-5f)) << "bias " << bias;
    if (bias && precision == ops::ComputeType::F32) out_fp32 = out;
    if (bias && precision == ops::ComputeType::BF16) {
      double diff = 0;
      for (size_t i = 0; i < out.size(); ++i) diff = std::max(diff, (double)std::fabs(out[i] - out_fp32[i]));
      EXPECT_GT(diff, 1e-4) << "the products did not run in bf16";
    }
    store.zero_grad();
    std::vector<float> dx(x.size(), 0.5f), dx_ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) dx_ref[i] = 0.5f + dq_ref[i] + dkv_ref[i];  // added to
    a.backward(R.data(), dx.data(), dx.data());
    EXPECT_TRUE(all_close(dx, dx_ref, 1e-5f, 1e-4f)) << "bias " << bias;
    EXPECT_TRUE(all_close(store.all_grad(), g_ref, 1e-5f, 1e-4f)) << "bias " << bias;
    // Stacked, input gradients in two buffers.
    a.forward(ctx, out.data(), x.data(), x.data(), B, L, L, mask);
    ASSERT_TRUE(a.fused_qkv);
    store.zero_grad();
    std::vector<float> dq(x.size(), 0.0f), dkv(x.size(), 0.0f);
    a.backward(R.data(), dq.data(), dkv.data());
    EXPECT_TRUE(all_close(dq, dq_ref, 1e-5f, 1e-4f)) << "bias " << bias;
    EXPECT_TRUE(all_close(dkv, dkv_ref, 1e-5f, 1e-4f)) << "bias " << bias;
    EXPECT_TRUE(all_close(store.all_grad(), g_ref, 1e-5f, 1e-4f)) << "bias " << bias;
  }
}

// attention_output_dropout = false (DistilBERT's TransformerBlock): the attention sublayer's residual gets no
// dropout mask, the feed-forward's still does, and backward runs on that saved state.
TEST(NnBlock, AttentionOutputDropoutCanBeOff) {
  for (bool norm_first : {false, true}) {
    nn::ParamStore store;
    nn::EncoderBlock blk = make_encoder_block(store, norm_first, ops::Activation::Gelu);
    randomise(store, 12);
    const int64_t B = 2, L = 5;
    const auto x = random_vec(B * L * H, 13);
    nn::Context ctx;
    ctx.grad = true;
    ctx.dropout = 0.5f;
    Rng rng(3);
    ctx.rng = &rng;
    blk.forward(ctx, x.data(), B, L, ops::AttentionMask{});
    EXPECT_TRUE(blk.r1.drop.defined());
    blk.attention_output_dropout = false;
    blk.forward(ctx, x.data(), B, L, ops::AttentionMask{});
    EXPECT_FALSE(blk.r1.drop.defined());
    EXPECT_TRUE(blk.r2.drop.defined());
    std::vector<float> dx(B * L * H, 0.0f);
    const std::vector<float> dout = random_vec(B * L * H, 14);
    blk.backward(dout.data(), dx.data());  // runs on the saved state without the attention mask
    for (float v : dx) ASSERT_TRUE(std::isfinite(v));
  }
}

// With dropout (attention weights and both residuals), a block keeps only its masks' draws and backward writes
// the masks again: its gradients are those of the forward's masks, checked against central differences of a
// forward that draws the same masks every time (the generator reset before each).
TEST(NnBlock, DropoutMasksWrittenAgainInBackwardMatchFiniteDifferences) {
  for (bool norm_first : {false, true}) {
    nn::ParamStore store;
    nn::EncoderBlock blk = make_encoder_block(store, norm_first, ops::Activation::Gelu);
    randomise(store, 31);
    const int64_t B = 2, L = 3;
    auto x = random_vec(B * L * H, 32), R = random_vec(B * L * H, 33);
    Rng rng(34);
    nn::Context ctx;
    ctx.grad = true;
    ctx.dropout = 0.3f;
    ctx.rng = &rng;
    auto f = [&] {
      rng = Rng(34);
      blk.forward(ctx, x.data(), B, L, ops::AttentionMask{});
      return dot(blk.out.data(), R);
    };
    f();
    ASSERT_TRUE(blk.r1.drop.defined());
    ASSERT_TRUE(blk.attention.drop.defined());
    EXPECT_TRUE(blk.attention.drop_mask.empty());  // no mask kept between the passes
    expect_encoder_block_grads(store, blk, f, x, R);
  }
}

// first_token_only (the last layer of sequence-classification training): keys and values from every position,
// everything else on position 0 alone. Its out equals the full forward's out[:, 0], and its backward from a
// gradient at position 0 equals the full backward from that gradient padded with zeros (input and parameter
// gradients), with a key mask and with a score bias (MPNet: row 0 of the table, dbias [heads, 1, L]).
TEST(NnBlock, FirstTokenOnlyEqualsTheFullLayerAtPositionZero) {
  for (bool with_bias : {false, true}) {
    nn::ParamStore store;
    nn::EncoderBlock blk = make_encoder_block(store, /*norm_first=*/false, ops::Activation::Gelu);
    randomise(store, 21);
    const int64_t B = 3, L = 6;
    std::vector<float> key_mask(B * L, 1.0f);
    for (int64_t j = 4; j < L; ++j) key_mask[L + j] = 0.0f;  // row 1: 4 real tokens
    const std::vector<float> bias = random_vec(kHeads * L * L, 22);
    std::vector<float> bias0(kHeads * L);
    for (int64_t h = 0; h < kHeads; ++h)
      std::copy_n(bias.data() + h * L * L, L, bias0.data() + h * L);
    ops::AttentionMask mask, mask0;
    mask.key_mask = mask0.key_mask = key_mask.data();
    if (with_bias) {
      mask.bias = bias.data();
      mask0.bias = bias0.data();
    }
    const auto x = random_vec(B * L * H, 23);
    const auto dfirst = random_vec(B * H, 24);
    nn::Context ctx;
    ctx.grad = true;

    blk.forward(ctx, x.data(), B, L, mask);
    std::vector<float> full_first(B * H), dout(B * L * H, 0.0f);
    for (int64_t b = 0; b < B; ++b) {
      std::copy_n(blk.out.data() + b * L * H, H, full_first.data() + b * H);
      std::copy_n(dfirst.data() + b * H, H, dout.data() + b * L * H);
    }
    store.zero_grad();
    std::vector<float> dx_ref(x.size(), 0.25f);
    blk.backward(dout.data(), dx_ref.data());
    const std::vector<float> g_ref = store.all_grad();
    std::vector<float> dbias_ref(kHeads * L);
    if (with_bias)
      for (int64_t h = 0; h < kHeads; ++h)
        std::copy_n(blk.attention.dbias.data() + h * L * L, L, dbias_ref.data() + h * L);

    blk.forward(ctx, x.data(), B, L, mask0, /*first_token_only=*/true);
    ASSERT_EQ((int64_t)blk.out.size(), B * H);
    EXPECT_TRUE(all_close(blk.out, full_first, 1e-5f, 1e-5f)) << "bias " << with_bias;
    store.zero_grad();
    std::vector<float> dx(x.size(), 0.25f);  // added to
    blk.backward(dfirst.data(), dx.data());
    EXPECT_TRUE(all_close(dx, dx_ref, 1e-5f, 1e-4f)) << "bias " << with_bias;
    EXPECT_TRUE(all_close(store.all_grad(), g_ref, 1e-5f, 1e-4f)) << "bias " << with_bias;
    if (with_bias) { EXPECT_TRUE(all_close(blk.attention.dbias, dbias_ref, 1e-5f, 1e-4f)); }
  }
  nn::ParamStore store;
  nn::EncoderBlock pre = make_encoder_block(store, /*norm_first=*/true, ops::Activation::Gelu);
  randomise(store, 25);
  const auto x = random_vec(2 * 3 * H, 26);
  EXPECT_THROW(pre.forward(nn::Context{}, x.data(), 2, 3, ops::AttentionMask{}, true), std::logic_error);
}

// The inference path (fused QKV product, residual + LayerNorm in one pass, activation fused into the first FFN
// product; pre-LN chaining the next layer's norm) gives the saving forward's result.
TEST(NnBlock, EncoderInferenceMatchesSavingForward) {
  for (bool norm_first : {false, true}) {
    nn::ParamStore store;
    nn::EncoderBlock blk = make_encoder_block(store, norm_first, ops::Activation::Gelu);
    randomise(store, 10);
    const int64_t B = 2, L = 40;  // > 32 keys: the blocked online-softmax kernel
    std::vector<float> key_mask(B * L, 1.0f);
    for (int64_t j = 30; j < L; ++j) key_mask[L + j] = 0.0f;
    ops::AttentionMask mask;
    mask.key_mask = key_mask.data();
    auto x = random_vec(B * L * H, 11);
    blk.forward(nn::Context{}, x.data(), B, L, mask);
    const std::vector<float> expected = blk.out;

    pack_for_inference(blk, ops::ComputeType::F32);
    std::vector<float> X = x;
    nn::BlockScratch s;
    if (norm_first) {  // on entry s.h holds norm1(x); without a next norm only the residual is added
      s.h.resize(B * L * H);
      blk.norm1.forward_inference(s.h.data(), X.data(), B * L);
    }
    blk.forward_inference(X.data(), B, L, mask, s);
    EXPECT_TRUE(all_close(X, expected, 2e-5f, 2e-5f)) << "norm_first " << norm_first;
  }
}

// The stack with every GEMM input written by the kernel producing it (LayerNorms and the first FFN product write
// bf16 or s8 rows with their scales; ops::set_fused_quantisation, the default) against the same stack with each
// product converting its fp32 input itself: int8 bit for bit (the same row kernels), bf16 within the rounding of
// oneDNN's own bf16 output of the first FFN product. Post-LN and pre-LN (LayerNorms chained across layers), padded
// and unpadded, on both ISA copies.
TEST(NnBlock, FusedQuantisationLeavesTheStackOutputUnchanged) {
  const bool saved = ops::fused_quantisation();
  for (ops::KernelIsa isa : test::isas()) {
    test::IsaScope scope(isa);
    for (bool norm_first : {false, true})
      for (ops::ComputeType ct : {ops::ComputeType::BF16, ops::ComputeType::I8}) {
        if (ct == ops::ComputeType::BF16 && !ops::has_native_product(ct) && !ops::bf16_gemm_emulated()) continue;
        nn::ParamStore stores[3];
        std::vector<nn::EncoderBlock> layers;
        for (int l = 0; l < 3; ++l) {
          layers.push_back(make_encoder_block(stores[l], norm_first, ops::Activation::Gelu));
          randomise(stores[l], 30 + l);
          pack_for_inference(layers.back(), ct);
        }
        const int64_t B = 2, L = 40;
        std::vector<float> key_mask(B * L, 1.0f);
        for (int64_t j = 25; j < L; ++j) key_mask[L + j] = 0.0f;
        const auto x = random_vec(B * L * H, 31);
        for (bool unpadded : {false, true}) {
          SCOPED_TRACE(std::string(ops::kernel_isa_name(isa)) + (norm_first ? " pre-LN " : " post-LN ") +
                       ops::compute_type_name(ct) + (unpadded ? " unpadded" : " padded"));
          std::vector<float> fused = x, plain = x;
          ops::set_fused_quantisation(true);
          nn::encoder_stack_inference(layers, fused.data(), B, L, key_mask.data(), unpadded);
          ops::set_fused_quantisation(false);
          nn::encoder_stack_inference(layers, plain.data(), B, L, key_mask.data(), unpadded);
          if (ct == ops::ComputeType::I8)
            EXPECT_EQ(std::memcmp(fused.data(), plain.data(), sizeof(float) * fused.size()), 0);
          else
            EXPECT_TRUE(all_close(fused, plain, 2e-2f, 2e-2f));
          EXPECT_FALSE(all_close(fused, x, 1e-3f));  // the layers ran
        }
      }
  }
  ops::set_fused_quantisation(saved);
}

// The decoder's incremental step over the KV cache gives, position by position, the teacher-forced forward.
TEST(NnBlock, DecoderStepMatchesTeacherForcedForward) {
  for (bool norm_first : {false, true})
    for (bool packed : {false, true}) {
      nn::ParamStore store;
      nn::DecoderBlock blk = make_decoder_block(store, norm_first, ops::Activation::Relu);
      randomise(store, 12);
      const int64_t B = 2, Lt = 4, Ls = 5;
      std::vector<int64_t> src_valid = {5, 3};
      ops::AttentionMask causal, enc_mask;
      causal.causal = true;
      enc_mask.valid_lens = src_valid.data();
      auto x = random_vec(B * Lt * H, 13), enc = random_vec(B * Ls * H, 14);
      blk.forward(nn::Context{}, x.data(), enc.data(), B, Lt, Ls, causal, enc_mask);
      const std::vector<float> expected = blk.out;
      if (packed) {
        for (nn::MultiHeadAttention* a : {&blk.attention1, &blk.attention2})
          for (nn::Linear* l : {&a->query, &a->key, &a->value, &a->output}) l->pack(ops::ComputeType::F32);
        for (nn::Linear* l : {&blk.ffn.linear1, &blk.ffn.linear2}) l->pack(ops::ComputeType::F32);
      }
      nn::Context ctx;
      ctx.packed = true;
      nn::LayerKV kv;
      blk.start(ctx, kv, enc.data(), B * Ls);
      std::vector<int64_t> rows(B * Lt), blocks = {0, 1};
      std::vector<nn::Buf> scratch(nn::kNumStepScratch);
      for (int64_t t = 0; t < Lt; ++t) {
        std::vector<float> xt(B * H);
        for (int64_t b = 0; b < B; ++b) {
          std::memcpy(xt.data() + b * H, x.data() + (b * Lt + t) * H, sizeof(float) * H);
          rows[b * Lt + t] = t * B + b;
        }
        nn::StepArgs a;
        a.rows = B;
        a.base = t * B;
        a.self.kv_len = t + 1;
        a.self.rows = rows.data();
        a.self.rows_stride = Lt;
        a.cross.kv_len = Ls;
        a.cross.blocks = blocks.data();
        a.cross.valid_lens = src_valid.data();
        a.scratch = scratch.data();
        blk.step(ctx, xt.data(), kv, a);
        for (int64_t b = 0; b < B; ++b)
          EXPECT_TRUE(all_close(xt.data() + b * H, expected.data() + (b * Lt + t) * H, H, 2e-5f, 2e-5f))
              << "norm_first " << norm_first << " packed " << packed << " step " << t << " row " << b;
      }
    }
}

// One post-LN block loaded from a BertModel checkpoint under its Hugging Face names gives, layer by layer, the
// hidden states PyTorch computed (tests/fixtures/bert, scripts/make_fixtures.py): the inference path (packed,
// fused QKV) and the saving forward of training (separate query / key / value on the fp32 parameters).
TEST(NnBlock, BertLayerForwardMatchesPyTorchHiddenStates) {
  SafeTensorsWeights w(test::fixture("bert/model.safetensors"));
  auto io = SafeTensors::open(test::fixture("bert/io.safetensors"));
  const Tensor hs = io.get("hidden_states"), am = io.get("attention_mask");  // [layers + 1, B, L, 32], [B, L]
  const int64_t B = hs.size(1), L = hs.size(2), Hd = hs.size(3), I = 64, n = B * L;
  std::vector<float> key_mask(n);
  for (int64_t i = 0; i < n; ++i) key_mask[i] = am.i64()[i] ? 1.0f : 0.0f;
  ops::AttentionMask mask;
  mask.key_mask = key_mask.data();
  for (int64_t l = 0; l + 1 < hs.size(0); ++l) {
    const nn::Vars vb = nn::Vars(w).prefix("encoder.layer").prefix(l), self = vb.prefix("attention.self");
    nn::EncoderBlock b;
    b.attention.num_heads = 4;
    b.attention.hidden_size = Hd;
    b.attention.qkv = nn::Linear::load_packed({self.prefix("query"), self.prefix("key"), self.prefix("value")}, Hd,
                                              Hd, ops::ComputeType::F32);
    b.attention.query = nn::Linear::load(self.prefix("query"), Hd, Hd);
    b.attention.key = nn::Linear::load(self.prefix("key"), Hd, Hd);
    b.attention.value = nn::Linear::load(self.prefix("value"), Hd, Hd);
    b.attention.output = nn::Linear::load(vb.prefix("attention.output.dense"), Hd, Hd);
    b.norm1 = nn::LayerNorm::load(vb.prefix("attention.output.LayerNorm"), Hd, 1e-12f);
    b.ffn.linear1 = nn::Linear::load(vb.prefix("intermediate.dense"), Hd, I);
    b.ffn.linear2 = nn::Linear::load(vb.prefix("output.dense"), I, Hd);
    b.ffn.act = ops::Activation::Gelu;
    b.norm2 = nn::LayerNorm::load(vb.prefix("output.LayerNorm"), Hd, 1e-12f);
    const float* in = hs.f32() + l * n * Hd;
    const float* want = hs.f32() + (l + 1) * n * Hd;
    b.forward(nn::Context{}, in, B, L, mask);
    EXPECT_TRUE(all_close(b.out.data(), want, n * Hd, 1e-4f, 1e-4f)) << "saving forward, layer " << l;
    for (nn::Linear* lin : {&b.attention.output, &b.ffn.linear1, &b.ffn.linear2}) lin->pack(ops::ComputeType::F32);
    std::vector<float> X(in, in + n * Hd);
    nn::BlockScratch s;
    b.forward_inference(X.data(), B, L, mask, s);
    EXPECT_TRUE(all_close(X.data(), want, n * Hd, 1e-4f, 1e-4f)) << "inference, layer " << l;
  }
}

// ---------------------------------------------------------------- Linear, LayerNorm, Embedding

// The training passes' scratch pool (nn::take_scratch): a buffer given back serves the next request it can
// hold (the same storage), sized as asked; a larger request gets its own.
TEST(NnScratch, GivenBuffersServeTheNextRequest) {
  // On a new thread: the pool is per thread, and this one's may hold what earlier tests gave back.
  std::thread([] {
    nn::Buf a, b, c;
    float* p = nn::take_scratch(a, 1000);
    EXPECT_EQ(a.size(), 1000u);
    nn::give_scratch(a);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(a.capacity(), 0u);
    EXPECT_EQ(nn::take_scratch(b, 500), p);
    EXPECT_EQ(b.size(), 500u);
    EXPECT_NE(nn::take_scratch(c, 5000), p);
    EXPECT_EQ(c.size(), 5000u);
    nn::give_scratch(b);
    nn::give_scratch(c);
  }).join();
}

TEST(NnLayers, LinearAndLayerNormMatchFiniteDifferences) {
  nn::ParamStore store;
  const nn::Vars vb(store);
  nn::Linear lin = nn::Linear::load(vb.prefix("lin"), 5, 8);
  nn::LayerNorm ln = nn::LayerNorm::load(vb.prefix("ln"), 8, 1e-5f);
  randomise(store, 20);
  const int64_t N = 4;
  auto x = random_vec(N * 5, 21), R = random_vec(N * 8, 22);
  std::vector<float> y(N * 8), z(N * 8);
  nn::Context ctx;
  ctx.grad = true;
  auto f = [&] {
    lin.forward(ctx, y.data(), x.data(), N);
    ln.forward(z.data(), y.data(), N);
    return dot(z.data(), R);
  };
  f();
  store.zero_grad();
  std::vector<float> dy(N * 8), dx(N * 5);
  ln.backward(dy.data(), R.data());
  lin.backward(dx.data(), dy.data(), x.data(), N, /*accumulate=*/false);
  const std::vector<float> g = store.all_grad();
  expect_gradient(x.data(), dx.data(), x.size(), f, "dx", kGrad);
  for (const auto& e : store.entries())
    expect_gradient(store.all_data().data() + e.offset, g.data() + e.offset, e.numel, f, e.name, kGrad);
}

TEST(NnLayers, EmbeddingScalesAddsPositionsAndScattersGradients) {
  nn::ParamStore store;
  nn::Embedding emb = nn::Embedding::load(nn::Vars(store).prefix("embedding"), 6, 4, 2.0f);
  randomise(store, 30);
  const std::vector<int64_t> ids = {1, 5, 1, 0, 2, 5};  // [B=2, L=3]
  auto P = random_vec(3 * 4, 31), R = random_vec(6 * 4, 32);
  std::vector<float> out(6 * 4);
  emb.forward(nn::Context{}, out.data(), ids.data(), 2, 3, P.data());
  const float* W = emb.weight.data();
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(out[n * 4 + c], W[ids[n] * 4 + c] * 2.0f + P[(n % 3) * 4 + c]);
  store.zero_grad();
  std::vector<float> d = R;
  emb.backward(d.data());
  std::vector<double> expect(6 * 4, 0.0);
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t c = 0; c < 4; ++c) expect[ids[n] * 4 + c] += 2.0 * R[n * 4 + c];
  for (int64_t i = 0; i < 24; ++i) EXPECT_NEAR(emb.weight.grad()[i], expect[i], 1e-5) << i;
}

// ---------------------------------------------------------------- parameters

TEST(NnParams, PrefixesNameTensorsAsTheCheckpoint) {
  nn::ParamStore store;
  const nn::Vars vb(store);
  nn::Linear l = nn::Linear::load(vb.prefix("encoder.layer").prefix(3).prefix("attention.self.query"), 4, 2);
  ASSERT_EQ(store.entries().size(), 2u);
  EXPECT_EQ(store.entries()[0].name, "encoder.layer.3.attention.self.query.weight");
  EXPECT_EQ(store.entries()[0].shape, (Shape{2, 4}));
  EXPECT_EQ(store.entries()[1].name, "encoder.layer.3.attention.self.query.bias");
  EXPECT_TRUE(vb.prefix("encoder.layer.3.attention.self.query").has("bias"));
  EXPECT_FALSE(vb.has("missing"));
  store.finalize();
  EXPECT_THROW(store.add("late", {1}), std::logic_error);  // registration ends with finalize
  EXPECT_EQ(store.total(), 10);  // [2, 4] + [2]
  EXPECT_EQ(l.weight.data(), store.all_data().data());
  EXPECT_EQ(l.bias.grad(), store.all_grad().data() + 8);
}

TEST(NnParams, FileSourceReportsTheMissingNameWithItsAliases) {
  RandomWeights w(1);
  const nn::Vars vb(w);
  nn::Linear l = nn::Linear::load(vb.prefix("pooler.dense"), 3, 3);
  EXPECT_TRUE(l.weight.defined());
  EXPECT_EQ(l.weight.grad(), nullptr);  // read-only: no gradient
  SafeTensorsWeights file(test::fixture("bert/model.safetensors"));
  auto aliases = [](const std::string& n) { return std::vector<std::string>{"bert." + n}; };
  const nn::Vars fv(file, aliases);
  try {
    fv.prefix("no.such").get("weight", {2, 2});
    FAIL() << "expected a missing-tensor error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing tensor 'no.such.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'bert.no.such.weight'"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tfm
