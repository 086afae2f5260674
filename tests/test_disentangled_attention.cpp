// nn::DisentangledAttention (nn/disentangled_attention.h), DeBERTa's c2p + p2c score bias, against
// modeling_deberta_v2.py's make_log_bucket_position and disentangled_attention_bias run by
// scripts/make_deberta_fixtures.py (tests/fixtures/deberta_v2/expected.safetensors; that script checks both against
// a float64 re-derivation: the buckets in closed form, the bias as an explicit loop).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "io/safetensors.h"
#include "nn/disentangled_attention.h"
#include "ops/attention.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::max_abs_diff;

namespace {

const SafeTensors& expected() {
  static const SafeTensors io = SafeTensors::open(fixture("deberta_v2/expected.safetensors"));
  return io;
}

// The fixture's option: 4 heads of 8, position_buckets 8, max_relative_positions 16, pos_key / pos_query [16, 32].
nn::DisentangledAttention fixture_bias(bool c2p = true, bool p2c = true) {
  nn::DisentangledAttention d;
  d.num_heads = 4;
  d.head_dim = 8;
  d.span = 8;
  d.bucket_size = 8;
  d.max_position = 16;
  d.c2p = c2p;
  d.p2c = p2c;
  const Tensor pk = expected().get("bias_pos_key"), pq = expected().get("bias_pos_query");
  d.pos_key.assign(pk.f32(), pk.f32() + pk.numel());
  d.pos_query.assign(pq.f32(), pq.f32() + pq.numel());
  return d;
}

// The float64 closed form of the script's second derivation.
int64_t bucket64(int64_t r, int64_t bucket_size, int64_t max_position) {
  const int64_t mid = bucket_size / 2;
  if (std::llabs(r) <= mid) return r;
  const double v = std::ceil(std::log((double)std::llabs(r) / mid) / std::log((double)(max_position - 1) / mid) *
                             (double)(mid - 1)) + (double)mid;
  return r < 0 ? -(int64_t)v : (int64_t)v;
}

}  // namespace

// make_log_bucket_position of r = -R .. R for the fixture's setting (8 buckets, 16 positions; R 40) and
// deberta-v3-base's (256, 512; R 2048), element for element; and the float64 closed form agrees everywhere there.
TEST(DisentangledAttention, LogBucketsEqualHuggingFaces) {
  struct Case {
    const char* name;
    int64_t buckets, max_position;
  };
  for (const Case& c : {Case{"buckets_8_16", 8, 16}, Case{"buckets_256_512", 256, 512}}) {
    const Tensor want = expected().get(c.name);
    const int64_t R = (want.numel() - 1) / 2;
    int64_t bad = 0;
    for (int64_t r = -R; r <= R; ++r) {
      const int64_t got = nn::deberta_log_bucket(r, c.buckets, c.max_position);
      bad += got != want.i64()[r + R];
      EXPECT_EQ(got, bucket64(r, c.buckets, c.max_position)) << c.name << " r " << r;
    }
    EXPECT_EQ(bad, 0) << c.name;
  }
  EXPECT_EQ(nn::deberta_log_bucket(-7, 0, 16), -7);  // no buckets: r as it is
}

// The c2p + p2c bias of one sentence equals disentangled_attention_bias (gather, transpose, two scales); the fast
// path (products over the reached pos rows) equals the plain reference.
TEST(DisentangledAttention, BiasEqualsHuggingFacesGatherForm) {
  const nn::DisentangledAttention d = fixture_bias();
  const Tensor q = expected().get("bias_q"), k = expected().get("bias_k"), want = expected().get("bias");
  const int64_t L = q.size(0), H = q.size(1);
  ASSERT_EQ(want.numel(), 4 * L * L);
  std::vector<float> got(4 * L * L), ref(4 * L * L);
  d.bias(got.data(), q.f32(), k.f32(), H, L);
  d.bias_ref(ref.data(), q.f32(), k.f32(), H, L);
  EXPECT_LT(max_abs_diff(got.data(), want.f32(), got.size()), 2e-5);
  EXPECT_LT(max_abs_diff(got.data(), ref.data(), got.size()), 2e-5);
  EXPECT_FLOAT_EQ(d.scale(), 1.0f / std::sqrt(24.0f));  // head_dim 8 * scale_factor 3
}

// Each term matters: dropping c2p or p2c (same scale) moves the bias by much more than the tolerance, and the two
// halves add up to the whole.
TEST(DisentangledAttention, EachTermMovesTheBias) {
  const Tensor q = expected().get("bias_q"), k = expected().get("bias_k");
  const int64_t L = q.size(0), H = q.size(1), n = 4 * L * L;
  std::vector<float> both(n), c2p(n), p2c(n);
  fixture_bias().bias(both.data(), q.f32(), k.f32(), H, L);
  nn::DisentangledAttention only_c2p = fixture_bias(true, false), only_p2c = fixture_bias(false, true);
  only_c2p.factor = only_p2c.factor = 3;  // the whole's scale, to compare the halves
  only_c2p.bias(c2p.data(), q.f32(), k.f32(), H, L);
  only_p2c.bias(p2c.data(), q.f32(), k.f32(), H, L);
  EXPECT_GT(max_abs_diff(both, c2p), 0.5);
  EXPECT_GT(max_abs_diff(both, p2c), 0.5);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(both[i], c2p[i] + p2c[i], 1e-5) << i;
}

// Attention with the bias, padded (right padding under a key mask) and unpadded (each sentence at its own
// positions): the real rows equal a plain attention over the reference bias of each sentence.
TEST(DisentangledAttention, PaddedAndUnpaddedAttentionEqualThePlainReference) {
  const nn::DisentangledAttention d = fixture_bias();
  const int64_t heads = 4, hd = 8, H = heads * hd, ld = 3 * H, B = 2, L = 13;
  const int64_t lens[B] = {13, 6};
  const std::vector<float> qkv = test::random_vec(B * L * ld, 4601);
  std::vector<float> key_mask(B * L, 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < lens[b]; ++i) key_mask[b * L + i] = 1.0f;
  std::vector<float> padded(B * L * H), unpadded(B * L * H, 0.0f), want(B * L * H, 0.0f);
  d.attention_inference(padded.data(), qkv.data(), qkv.data() + H, qkv.data() + 2 * H, ld, H, B, L, key_mask.data(),
                        false);
  // Unpadded: the real rows gathered.
  std::vector<float> packed;
  std::vector<int64_t> offsets = {0};
  for (int64_t b = 0; b < B; ++b) {
    packed.insert(packed.end(), qkv.begin() + b * L * ld, qkv.begin() + (b * L + lens[b]) * ld);
    offsets.push_back(offsets.back() + lens[b]);
  }
  std::vector<float> ctx_u(offsets.back() * H);
  d.attention_inference(ctx_u.data(), packed.data(), packed.data() + H, packed.data() + 2 * H, ld, H, B,
                        offsets.data(), false);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lens[b];
    const float* s = qkv.data() + b * L * ld;
    std::vector<float> bias(heads * n * n);
    d.bias_ref(bias.data(), s, s + H, ld, n);
    ops::AttentionDims dims{1, n, n, heads, hd};
    dims.q_ld = dims.k_ld = dims.v_ld = ld;
    dims.out_ld = H;
    dims.scale = d.scale();
    ops::AttentionMask mask;
    mask.bias = bias.data();
    ops::attention_forward_ref(want.data() + b * L * H, nullptr, s, s + H, s + 2 * H, dims, mask);
    std::copy(ctx_u.begin() + offsets[b] * H, ctx_u.begin() + offsets[b + 1] * H, unpadded.begin() + b * L * H);
    EXPECT_LT(max_abs_diff(padded.data() + b * L * H, want.data() + b * L * H, n * H), 1e-5) << "padded row " << b;
    EXPECT_LT(max_abs_diff(unpadded.data() + b * L * H, want.data() + b * L * H, n * H), 1e-5) << "unpadded " << b;
  }
}
