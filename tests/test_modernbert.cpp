// ModernBERT against the PyTorch reference of modeling_modernbert.py (fixtures from
// scripts/make_modernbert_fixtures.py, tests/fixtures/modernbert), and its kernels (ops/rotary.h,
// ops/local_attention.h) against plain references on every ISA copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "models/heads.h"
#include "models/modernbert.h"
#include "ops/attention.h"
#include "ops/local_attention.h"
#include "ops/rotary.h"
#include "run_tfm.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::max_abs_diff;
using tfm::test::min_row_cosine;
using tfm::test::IsaScope;
using tfm::test::isas;
using tfm::test::run_tfm_in;
using tfm::test::spit;
using tfm::test::TempFolder;
using tfm::test::TfmRun;

namespace {
std::vector<float> randn(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal();
  return v;
}

std::unique_ptr<EncoderModel> model_with(const std::function<void(nlohmann::json&)>& edit,
                                         const std::string& file = "modernbert/model.safetensors",
                                         ops::ComputeType ct = ops::ComputeType::F32) {
  nlohmann::json j = load_json_file(fixture("modernbert/config.json"));
  edit(j);
  EncoderConfig c = EncoderConfig::from_json(j, "config.json");
  SafeTensorsWeights w(fixture(file));
  return make_encoder(c, w, ct);
}

constexpr double kTol = 2e-5;
}  // namespace

// ---------------------------------------------------------------- kernels

TEST(Rotary, MatchesReferenceOnEveryIsaInsideAFusedQkvRow) {
  const int64_t B = 2, L = 37, nh = 3, hd = 16, ld = 3 * nh * hd + 5;  // q | k | v columns, padded rows
  for (double theta : {10000.0, 160000.0}) {
    std::vector<float> x0 = randn(B * L * ld, 7);
    std::vector<float> want = x0;
    ops::rotary_apply_ref(want.data(), B, L, 2 * nh, hd, ld, theta);
    std::vector<float> cs(L * hd / 2), sn(L * hd / 2);
    ops::rotary_tables(cs.data(), sn.data(), L, hd, theta);
    for (ops::KernelIsa isa : isas()) {
      IsaScope scope(isa);
      std::vector<float> got = x0;
      ops::rotary_apply(got.data(), B, L, 2 * nh, hd, ld, cs.data(), sn.data());
      EXPECT_LE(max_abs_diff(got, want), 2e-5) << ops::kernel_isa_name(isa) << " theta " << theta;
      // The v columns (and the row padding) are untouched.
      for (int64_t r = 0; r < B * L; ++r)
        for (int64_t c = 2 * nh * hd; c < ld; ++c) ASSERT_EQ(got[r * ld + c], x0[r * ld + c]);
    }
  }
  // Position 0 is the identity; others are not.
  std::vector<float> x = randn(2 * 16, 3), y = x;
  std::vector<float> cs(2 * 8), sn(2 * 8);
  ops::rotary_tables(cs.data(), sn.data(), 2, 16, 10000.0);
  ops::rotary_apply(y.data(), 1, 2, 1, 16, 16, cs.data(), sn.data());
  for (int c = 0; c < 16; ++c) EXPECT_EQ(y[c], x[c]);
  EXPECT_GT(std::fabs(y[16] - x[16]) + std::fabs(y[24] - x[24]), 1e-3);
}

// The banded kernel against two references: its own (double, the window as a loop bound) and the naive
// attention_forward_ref with the window written out as a dense [B, L, L] mask.
TEST(SlidingWindowAttention, EqualsNaiveMaskedAttentionOnEveryIsa) {
  struct Case {
    int64_t B, L, nh, hd, window;
    bool pad;
  };
  const std::vector<Case> cases = {{1, 1, 1, 16, 0, false},  {2, 7, 2, 16, 1, true},   {1, 130, 3, 32, 4, true},
                                   {2, 300, 2, 64, 64, true}, {1, 70, 1, 24, 200, false}, {1, 257, 2, 20, 0, true}};
  for (const Case& cs : cases) {
    const int64_t H = cs.nh * cs.hd, ld = 3 * H;
    std::vector<float> qkv = randn(cs.B * cs.L * ld, 11 + cs.L);
    std::vector<float> key_mask(cs.B * cs.L, 1.0f);
    if (cs.pad)
      for (int64_t b = 0; b < cs.B; ++b)
        for (int64_t l = 0; l < cs.L; ++l)
          if ((l * 7 + b) % 5 == 3) key_mask[b * cs.L + l] = 0.0f;  // holes as well as a tail
    std::vector<float> dense(cs.B * cs.L * cs.L);
    for (int64_t b = 0; b < cs.B; ++b)
      for (int64_t i = 0; i < cs.L; ++i)
        for (int64_t j = 0; j < cs.L; ++j)
          dense[(b * cs.L + i) * cs.L + j] = std::abs(i - j) <= cs.window && key_mask[b * cs.L + j] != 0 ? 1.0f : 0.0f;
    ops::AttentionDims d;
    d.batch = cs.B, d.q_len = d.kv_len = cs.L, d.num_heads = cs.nh, d.head_dim = cs.hd;
    d.q_ld = d.k_ld = d.v_ld = ld, d.out_ld = H;
    const float *q = qkv.data(), *k = q + H, *v = q + 2 * H;
    ops::AttentionMask m;
    m.mask = dense.data();
    std::vector<float> naive(cs.B * cs.L * H), ref(cs.B * cs.L * H);
    ops::attention_forward_ref(naive.data(), nullptr, q, k, v, d, m);
    ops::sliding_window_attention_ref(ref.data(), q, k, v, d, key_mask.data(), cs.window);
    for (int64_t i = 0; i < (int64_t)ref.size(); ++i) ASSERT_NEAR(ref[i], naive[i], 1e-5) << i;
    for (ops::KernelIsa isa : isas()) {
      IsaScope scope(isa);
      std::vector<float> got(cs.B * cs.L * H, NAN);
      ops::sliding_window_attention(got.data(), q, k, v, d, key_mask.data(), cs.window);
      EXPECT_LE(max_abs_diff(got, naive), 2e-5)
          << ops::kernel_isa_name(isa) << " L " << cs.L << " window " << cs.window << " head_dim " << cs.hd;
    }
  }
}

// Global layers: the blocked online-softmax path of attention_forward (no probs) equals the naive reference
// on a long padded input.
TEST(SlidingWindowAttention, GlobalLayersBlockwiseEqualNaive) {
  const int64_t B = 1, L = 700, nh = 2, hd = 32, H = nh * hd, ld = 3 * H;
  std::vector<float> qkv = randn(B * L * ld, 5);
  std::vector<float> key_mask(L, 1.0f);
  for (int64_t l = 650; l < L; ++l) key_mask[l] = 0.0f;
  ops::AttentionDims d;
  d.batch = B, d.q_len = d.kv_len = L, d.num_heads = nh, d.head_dim = hd, d.q_ld = d.k_ld = d.v_ld = ld, d.out_ld = H;
  ops::AttentionMask m;
  m.key_mask = key_mask.data();
  const float *q = qkv.data(), *k = q + H, *v = q + 2 * H;
  std::vector<float> want(L * H), got(L * H);
  ops::attention_forward_ref(want.data(), nullptr, q, k, v, d, m);
  for (ops::KernelIsa isa : isas()) {
    IsaScope scope(isa);
    ops::attention_forward(got.data(), nullptr, q, k, v, d, m);
    EXPECT_LE(max_abs_diff(got, want), 2e-5) << ops::kernel_isa_name(isa);
  }
}

// An unpadded batch (seq_offsets): each sentence's rows equal the kernel run on that sentence alone, and the
// reference's unpadded rows.
TEST(SlidingWindowAttention, UnpaddedEqualsEachSentenceAloneOnEveryIsa) {
  for (int64_t window : {0, 4, 64}) {
    const std::vector<int64_t> lens = {5, 130, 0, 17, 250, 1};
    const int64_t nh = 2, hd = 32, H = nh * hd, ld = 3 * H, B = (int64_t)lens.size();
    std::vector<int64_t> off(B + 1, 0);
    for (int64_t b = 0; b < B; ++b) off[b + 1] = off[b] + lens[b];
    const int64_t T = off[B];
    std::vector<float> qkv = randn(T * ld, 31 + window);
    const float *q = qkv.data(), *k = q + H, *v = q + 2 * H;
    ops::AttentionDims d;
    d.batch = B, d.num_heads = nh, d.head_dim = hd, d.q_ld = d.k_ld = d.v_ld = ld, d.out_ld = H;
    d.seq_offsets = off.data();
    std::vector<float> ref(T * H, NAN);
    ops::sliding_window_attention_ref(ref.data(), q, k, v, d, nullptr, window);
    for (ops::KernelIsa isa : isas()) {
      IsaScope scope(isa);
      std::vector<float> got(T * H, NAN), alone(T * H, NAN);
      ops::sliding_window_attention(got.data(), q, k, v, d, nullptr, window);
      for (int64_t b = 0; b < B; ++b) {
        ops::AttentionDims s = d;
        s.seq_offsets = nullptr;
        s.batch = 1, s.q_len = s.kv_len = lens[b];
        const int64_t o = off[b];
        ops::sliding_window_attention(alone.data() + o * H, q + o * ld, k + o * ld, v + o * ld, s, nullptr, window);
      }
      EXPECT_EQ(max_abs_diff(got, alone), 0.0) << ops::kernel_isa_name(isa) << " window " << window;
      EXPECT_LE(max_abs_diff(got, ref), 2e-5) << ops::kernel_isa_name(isa) << " window " << window;
    }
  }
  // With seq_offsets there is no key mask; decreasing offsets are refused.
  std::vector<float> x(3 * 3 * 8, 0.5f), out(3 * 8), km(3, 1.0f);
  std::vector<int64_t> off = {0, 2, 3};
  ops::AttentionDims d;
  d.batch = 2, d.num_heads = 2, d.head_dim = 4, d.seq_offsets = off.data();
  EXPECT_THROW(ops::sliding_window_attention(out.data(), x.data(), x.data(), x.data(), d, km.data(), 1),
               std::invalid_argument);
  std::vector<int64_t> bad = {0, 3, 2};
  d.seq_offsets = bad.data();
  EXPECT_THROW(ops::sliding_window_attention(out.data(), x.data(), x.data(), x.data(), d, nullptr, 1),
               std::invalid_argument);
}

TEST(SlidingWindowAttention, BadArgumentsAreRefused) {
  std::vector<float> x(64, 0.0f), out(64);
  ops::AttentionDims d;
  d.q_len = 2, d.kv_len = 3, d.head_dim = 4;
  EXPECT_THROW(ops::sliding_window_attention(out.data(), x.data(), x.data(), x.data(), d, nullptr, 1),
               std::invalid_argument);
  d.kv_len = 2;
  EXPECT_THROW(ops::sliding_window_attention(out.data(), x.data(), x.data(), x.data(), d, nullptr, -1),
               std::invalid_argument);
}

// ---------------------------------------------------------------- the model

// config.json names ModernBertForMaskedLM; the file holds model.* + head.* + decoder.bias (decoder tied).
TEST(ModernBertGolden, MaskedLmFolderLoadsAsBaseModelAndMatchesPyTorch) {
  auto model = load_encoder(fixture("modernbert"));
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  EncoderOutput one = model->forward(io.get("input_ids_single"), Tensor(), Tensor());
  EXPECT_LE(max_abs_diff(one.last_hidden_state, io.get("last_hidden_state_single")), kTol);
  EXPECT_FALSE(one.pooler_output.defined());
  EncoderOutput batch = model->forward(io.get("input_ids"), Tensor(), io.get("attention_mask"));
  EXPECT_LE(max_abs_diff(batch.last_hidden_state, io.get("last_hidden_state")), kTol);
}

TEST(ModernBertGolden, UnprefixedBaseModelAndAllLayers) {
  EncoderConfig c = EncoderConfig::load(fixture("modernbert/config.json"));
  SafeTensorsWeights w(fixture("modernbert/model_base.safetensors"));
  auto model = make_encoder(c, w);
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  Tensor ids = io.get("input_ids"), mask = io.get("attention_mask");
  Tensor zeros = Tensor::from_i64(ids.shape(), std::vector<int64_t>(ids.numel(), 0));
  EncoderOutput out = model->forward(ids, zeros, mask, /*all_layers=*/true);
  EXPECT_LE(max_abs_diff(out.last_hidden_state, io.get("last_hidden_state")), kTol);
  EXPECT_EQ(out.hidden_states.shape(), (Shape{c.num_hidden_layers + 1, 2, ids.size(1), c.hidden_size}));
}

// The parts that distinguish ModernBERT each change the output, so the golden tests can fail on them.
TEST(ModernBertGolden, WindowThetasAndLayerPatternEachMatter) {
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  Tensor ids = io.get("input_ids_single"), want = io.get("last_hidden_state_single");
  const std::vector<std::pair<const char*, std::function<void(nlohmann::json&)>>> edits = {
      {"local_attention 64", [](nlohmann::json& j) { j["local_attention"] = 64; }},
      {"local_attention 6", [](nlohmann::json& j) { j["local_attention"] = 6; }},
      {"local_rope_theta", [](nlohmann::json& j) { j["local_rope_theta"] = 160000.0; }},
      {"global_rope_theta", [](nlohmann::json& j) { j["global_rope_theta"] = 10000.0; }},
      {"every 2nd layer", [](nlohmann::json& j) { j["global_attn_every_n_layers"] = 2; }},
      {"hidden_activation", [](nlohmann::json& j) { j["hidden_activation"] = "gelu_pytorch_tanh"; }},
  };
  for (const auto& [name, edit] : edits) {
    auto model = model_with(edit);
    EXPECT_GT(max_abs_diff(model->forward(ids, Tensor(), Tensor()).last_hidden_state, want), 1e-4) << name;
  }
  // layer_types and rope_parameters (newer configs) say the same as the older keys.
  auto same = model_with([](nlohmann::json& j) {
    j.erase("global_attn_every_n_layers");
    j.erase("global_rope_theta");
    j.erase("local_rope_theta");
    j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
    j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 160000.0}}},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  });
  EXPECT_LE(max_abs_diff(same->forward(ids, Tensor(), Tensor()).last_hidden_state, want), kTol);
}

TEST(ModernBertDtypes, Bf16AndInt8TokenCosineToFp32Reference) {
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  Tensor mask = io.get("attention_mask");
  for (ops::ComputeType ct : {ops::ComputeType::BF16, ops::ComputeType::I8}) {
    auto model = model_with([](nlohmann::json&) {}, "modernbert/model.safetensors", ct);
    EncoderOutput out = model->forward(io.get("input_ids"), Tensor(), mask);
    const double cs = min_row_cosine(out.last_hidden_state, io.get("last_hidden_state"), mask);
    EXPECT_GE(cs, ct == ops::ComputeType::BF16 ? 0.9999 : 0.999) << ops::compute_type_name(ct);
  }
}

// 8,192 tokens (max_position_embeddings) run on the tiny model; 8,193 are refused with a clear error.
TEST(ModernBertLong, EightThousandTokensRunAndOneMoreIsRefused) {
  auto model = load_encoder(fixture("modernbert"));
  const int64_t L = 8192;
  std::vector<int64_t> ids(L);
  Rng rng(9);
  for (auto& id : ids) id = (int64_t)rng.below(3256);
  EncoderOutput out = model->forward(Tensor::from_i64({1, L}, ids), Tensor(), Tensor());
  ASSERT_EQ(out.last_hidden_state.shape(), (Shape{1, L, 64}));
  for (int64_t i = 0; i < out.last_hidden_state.numel(); ++i)
    ASSERT_TRUE(std::isfinite(out.last_hidden_state.f32()[i])) << i;
  ids.push_back(5);
  EXPECT_THROW(model->forward(Tensor::from_i64({1, L + 1}, ids), Tensor(), Tensor()), std::invalid_argument);
}

TEST(ModernBertBadConfig, UnsupportedValuesAreRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> bad = {
      {"rope_parameters.full_attention.rope_type",
       [](nlohmann::json& j) { j["rope_parameters"] = {{"full_attention", {{"rope_type", "yarn"}}}}; }},
      {"classifier_pooling", [](nlohmann::json& j) { j["classifier_pooling"] = "max"; }},
      {"layer_types", [](nlohmann::json& j) { j["layer_types"] = {"full_attention"}; }},
      {"global_attn_every_n_layers", [](nlohmann::json& j) { j["global_attn_every_n_layers"] = 0; }},
      {"local_attention", [](nlohmann::json& j) { j["local_attention"] = -2; }},
      {"hidden_activation", [](nlohmann::json& j) { j["hidden_activation"] = "swish2"; }},
      {"head_dim", [](nlohmann::json& j) { j["num_attention_heads"] = 64; }},
  };
  for (const auto& [key, edit] : bad) {
    nlohmann::json j = load_json_file(fixture("modernbert/config.json"));
    edit(j);
    try {
      EncoderConfig::from_json(j, "config.json");
      ADD_FAILURE() << "accepted a bad " << key;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

// tfm encode on the folder: its byte-level BPE tokenizer.json gives Hugging Face's ids, the forward the reference.
TEST(ModernBertCli, EncodeMatchesPyTorch) {
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", fixture("modernbert"), "--threads", "1", "--text",
                                   "A man in a blue shirt is standing on a ladder.", "-o", tmp.path + "/h.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("input_ids: [3256, 19, 314, 277, 257, 585, 445, 320, 502, 307, 257, 3251, 8, 3258]"),
            std::string::npos)
      << r.out;
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  EXPECT_LE(max_abs_diff(load_npy(tmp.path + "/h.npy"), io.get("last_hidden_state_single")), kTol);
}

// tfm embed --pooling mean: the mean over real tokens of the reference's last_hidden_state.
TEST(ModernBertCli, EmbedMeanPoolingMatchesPyTorch) {
  TempFolder tmp;
  spit(tmp.path + "/in.txt",
       "A man in a blue shirt is standing on a ladder.\nTwo young, White males are outside near many bushes.\n");
  TfmRun r = run_tfm_in(tmp.path, {"embed", "--model", fixture("modernbert"), "--pooling", "mean", "--quiet",
                                   "--input", tmp.path + "/in.txt", "-o", tmp.path + "/v.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  Tensor want_h = io.get("last_hidden_state"), mask = io.get("attention_mask");
  const int64_t B = want_h.size(0), L = want_h.size(1), H = want_h.size(2);
  Tensor want = Tensor::empty({B, H});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double sum = 0;
      int64_t n = 0;
      for (int64_t l = 0; l < L; ++l)
        if (mask.i64()[b * L + l]) sum += want_h.f32()[(b * L + l) * H + h], ++n;
      want.f32()[b * H + h] = (float)(sum / (double)n);
    }
  EXPECT_LE(max_abs_diff(load_npy(tmp.path + "/v.npy"), want), kTol);
}

// ---------------------------------------------------------------- heads (models/heads.h TaskModel)

// ModernBertForMaskedLM: decoder(head(h)) with the decoder tied to the word embeddings (not stored) + decoder.bias.
TEST(ModernBertHeads, MaskedLmLogitsMatchPyTorch) {
  TaskModel m = TaskModel::load(fixture("modernbert"), HeadKind::MaskedLM);
  EXPECT_TRUE(m.tied_decoder());
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  Tensor ids = io.get("input_ids_single"), want = io.get("mlm_logits_single");
  const int64_t L = ids.size(1), V = want.size(2);
  std::vector<std::pair<int64_t, int64_t>> positions;
  for (int64_t l = 0; l < L; ++l) positions.push_back({0, l});
  Tensor got = m.mlm_logits(ids, Tensor(), Tensor(), positions);
  ASSERT_EQ(got.shape(), (Shape{L, V}));
  // The logits reach |34|: 3e-4 is 1e-5 of that.
  double worst = 0;
  for (int64_t i = 0; i < L * V; ++i) worst = std::max(worst, (double)std::fabs(got.f32()[i] - want.f32()[i]));
  EXPECT_LE(worst, 3e-4);
}

// ModernBertForSequenceClassification on the padded batch, with classifier_pooling "cls" (the folder) and "mean".
TEST(ModernBertHeads, SequenceClassificationLogitsMatchPyTorchForClsAndMeanPooling) {
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  Tensor ids = io.get("input_ids"), mask = io.get("attention_mask");
  TaskModel cls = TaskModel::load(fixture("modernbert_seqcls"), HeadKind::SequenceClassification);
  EXPECT_EQ(cls.head_config().id2label, (std::vector<std::string>{"negative", "neutral", "positive"}));
  EXPECT_LE(max_abs_diff(cls.sequence_logits(ids, Tensor(), mask), io.get("seqcls_logits_cls")), 1e-4);
  TempFolder tmp;
  nlohmann::json j = load_json_file(fixture("modernbert_seqcls/config.json"));
  j["classifier_pooling"] = "mean";
  spit(tmp.path + "/config.json", j.dump());
  for (const char* f : {"model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(fixture(std::string("modernbert_seqcls/") + f), tmp.path + "/" + f);
  TaskModel mean = TaskModel::load(tmp.path, HeadKind::SequenceClassification);
  EXPECT_LE(max_abs_diff(mean.sequence_logits(ids, Tensor(), mask), io.get("seqcls_logits_mean")), 1e-4);
  // A masked-LM folder has no classification head, and the other way round.
  EXPECT_THROW(TaskModel::load(fixture("modernbert"), HeadKind::SequenceClassification), std::runtime_error);
  EXPECT_THROW(TaskModel::load(fixture("modernbert_seqcls"), HeadKind::MaskedLM), std::runtime_error);
}

// tfm classify: the pipeline's top label and softmax score of the reference logits, in every dtype.
TEST(ModernBertCli, ClassifyMatchesPyTorchInEveryDtype) {
  TempFolder tmp;
  spit(tmp.path + "/in.txt",
       "A man in a blue shirt is standing on a ladder.\nTwo young, White males are outside near many bushes.\n");
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  Tensor logits = io.get("seqcls_logits_cls");
  const std::vector<std::string> labels = {"negative", "neutral", "positive"};
  for (const char* dtype : {"fp32", "bf16", "int8"}) {
    TfmRun r = run_tfm_in(tmp.path, {"classify", "--model", fixture("modernbert_seqcls"), "--dtype", dtype,
                                     "--input", tmp.path + "/in.txt"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    std::vector<nlohmann::json> lines;
    size_t at = 0;
    while (at < r.out.size()) {
      size_t nl = r.out.find('\n', at);
      if (nl == std::string::npos) nl = r.out.size();
      if (nl > at) lines.push_back(nlohmann::json::parse(r.out.substr(at, nl - at)));
      at = nl + 1;
    }
    ASSERT_EQ(lines.size(), 2u) << r.out;
    for (int64_t b = 0; b < 2; ++b) {
      const float* row = logits.f32() + b * 3;
      double mx = *std::max_element(row, row + 3), z = 0;
      for (int k = 0; k < 3; ++k) z += std::exp(row[k] - mx);
      const int64_t k = std::max_element(row, row + 3) - row;
      EXPECT_EQ(lines[b]["label"], labels[k]) << dtype;
      // int8: 3e-2 (2.3e-2 measured on an AVX2-only CPU, where the int8 weights multiply in fp32: ops/gemm.h).
      const double tol = std::string(dtype) == "fp32" ? 1e-4 : std::string(dtype) == "bf16" ? 2e-2 : 3e-2;
      EXPECT_NEAR(lines[b]["score"].get<double>(), 1.0 / z, tol) << dtype;
    }
  }
}

// tfm convert --dtype int8 / bf16: the Wqkv / Wo / Wi weights stored quantised load as stored (int8) or widened
// (bf16), and stay within the dtype cosines of the fp32 reference.
TEST(ModernBertCli, ConvertedFoldersLoadAndStayCloseToPyTorch) {
  TempFolder tmp;
  auto io = SafeTensors::open(fixture("modernbert/expected.safetensors"));
  Tensor mask = io.get("attention_mask");
  for (const char* dtype : {"bf16", "int8"}) {
    const std::string out = tmp.path + "/" + dtype;
    TfmRun r = run_tfm_in(tmp.path, {"convert", "--model", fixture("modernbert"), "--dtype", dtype, "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    ops::ComputeType ct;
    auto model = load_encoder(out, std::nullopt, &ct);
    EncoderOutput o = model->forward(io.get("input_ids"), Tensor(), mask);
    const double cs = min_row_cosine(o.last_hidden_state, io.get("last_hidden_state"), mask);
    EXPECT_GE(cs, std::string(dtype) == "bf16" ? 0.9999 : 0.999) << dtype << " computed in " << ops::compute_type_name(ct);
  }
}
