// Golden tests: our encoders against PyTorch running the reference modules (fixtures from scripts/make_fixtures.py).
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "models/encoder.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;

namespace {
// Max |a - b| over the whole tensor, padded positions included (both references compute padded query rows
// normally: they attend to the valid keys). `attention_mask` is unused, kept for the call sites.
double max_err_valid(const Tensor& got, const Tensor& want, const Tensor& attention_mask) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.numel() != want.numel()) return INFINITY;
  const int64_t H = got.size(-1), N = got.numel() / H;
  double worst = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      double e = std::fabs((double)got.f32()[n * H + h] - want.f32()[n * H + h]);
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  }
  return worst;
}
}  // namespace

TEST(EncoderGolden, TutorialTransformerEncoderMatchesPyTorch) {
  auto model = load_encoder(fixture("transformer_encoder"));
  auto io = SafeTensors::open(fixture("transformer_encoder/io.safetensors"));
  Tensor ids = io.get("input_ids"), mask = io.get("attention_mask");
  EncoderOutput out = model->forward(ids, Tensor(), mask);
  EXPECT_LE(max_err_valid(out.last_hidden_state, io.get("last_hidden_state"), mask), 1e-4);
  Tensor ones = Tensor::from_i64(mask.shape(), std::vector<int64_t>(mask.numel(), 1));
  EncoderOutput nomask = model->forward(ids, Tensor(), Tensor());
  EXPECT_LE(max_err_valid(nomask.last_hidden_state, io.get("last_hidden_state_nomask"), ones), 1e-4);
}

TEST(EncoderGolden, BertMatchesPyTorchIncludingAllLayersAndPooler) {
  auto model = load_encoder(fixture("bert"));
  auto io = SafeTensors::open(fixture("bert/io.safetensors"));
  Tensor ids = io.get("input_ids"), tt = io.get("token_type_ids"), mask = io.get("attention_mask");
  EncoderOutput out = model->forward(ids, tt, mask, /*all_layers=*/true);
  EXPECT_LE(max_err_valid(out.last_hidden_state, io.get("last_hidden_state"), mask), 1e-4);
  EXPECT_LE(max_err_valid(out.hidden_states, io.get("hidden_states"), mask), 1e-4);
  Tensor pooled_want = io.get("pooler_output");
  Tensor ones = Tensor::from_i64({pooled_want.size(0)}, std::vector<int64_t>(pooled_want.size(0), 1));
  EXPECT_LE(max_err_valid(out.pooler_output, pooled_want, ones), 1e-4);
}

TEST(EncoderGolden, BertLoadsPrefixedCheckpointWithGammaBetaAndIgnoresHeads) {
  EncoderConfig c = EncoderConfig::load(fixture("bert/config.json"));
  SafeTensorsWeights w(fixture("bert/model_prefixed.safetensors"));
  auto model = make_encoder(c, w);
  auto io = SafeTensors::open(fixture("bert/io.safetensors"));
  Tensor mask = io.get("attention_mask");
  EncoderOutput out = model->forward(io.get("input_ids"), io.get("token_type_ids"), mask);
  EXPECT_LE(max_err_valid(out.last_hidden_state, io.get("last_hidden_state"), mask), 1e-4);
}

TEST(EncoderGolden, BertGeluNewMatchesPyTorch) {
  auto model = load_encoder(fixture("bert_gelu_new"));
  auto io = SafeTensors::open(fixture("bert_gelu_new/io.safetensors"));
  Tensor mask = io.get("attention_mask");
  Tensor tt = io.has("token_type_ids") ? io.get("token_type_ids") : Tensor();
  EncoderOutput out = model->forward(io.get("input_ids"), tt, mask);
  EXPECT_LE(max_err_valid(out.last_hidden_state, io.get("last_hidden_state"), mask), 1e-4);
}

// ---------------------------------------------------------------- bad input

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
nlohmann::json bert_config() {
  return nlohmann::json::parse(R"({"model_type":"bert","vocab_size":60,"hidden_size":32,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":64,"max_position_embeddings":20,"type_vocab_size":2})");
}
}  // namespace

TEST(EncoderBadInput, HiddenSizeNotDivisibleByHeads) {
  auto j = bert_config();
  j["num_attention_heads"] = 5;
  EXPECT_NE(error_of([&] { EncoderConfig::from_json(j, "config.json"); }).find("not divisible by num_attention_heads"),
            std::string::npos);
}

TEST(EncoderBadInput, WrongTypeAndMissingKeyNameTheKey) {
  auto j = bert_config();
  j["hidden_size"] = "32";
  EXPECT_NE(error_of([&] { EncoderConfig::from_json(j, "config.json"); }).find("hidden_size"), std::string::npos);
  j = bert_config();
  j.erase("vocab_size");
  EXPECT_NE(error_of([&] { EncoderConfig::from_json(j, "config.json"); }).find("vocab_size"), std::string::npos);
  j = bert_config();
  j["hidden_act"] = "mish";
  EXPECT_NE(error_of([&] { EncoderConfig::from_json(j, "config.json"); }).find("mish"), std::string::npos);
}

TEST(EncoderBadInput, ShapeMismatchWithConfigNamesTensorAndShapes) {
  auto j = bert_config();
  j["intermediate_size"] = 48;  // the fixture's weights are 64 wide
  EncoderConfig c = EncoderConfig::from_json(j, "config.json");
  SafeTensorsWeights w(fixture("bert/model.safetensors"));
  std::string msg = error_of([&] { make_encoder(c, w); });
  EXPECT_NE(msg.find("encoder.layer.0.intermediate.dense.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[64, 32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[48, 32]"), std::string::npos) << msg;
}

TEST(EncoderBadInput, MissingTensorIsNamed) {
  EncoderConfig c = EncoderConfig::load(fixture("bert/config.json"));
  c.num_hidden_layers = 3;  // the file has two layers
  SafeTensorsWeights w(fixture("bert/model.safetensors"));
  std::string msg = error_of([&] { make_encoder(c, w); });
  EXPECT_NE(msg.find("missing tensor 'encoder.layer.2.attention.self.query.weight'"), std::string::npos) << msg;
}

TEST(EncoderBadInput, TooLongSequenceAndOutOfVocabIds) {
  auto model = load_encoder(fixture("bert"));
  Tensor long_ids = Tensor::from_i64({1, 21}, std::vector<int64_t>(21, 1));
  EXPECT_NE(error_of([&] { model->forward(long_ids, Tensor(), Tensor()); }).find("max_position_embeddings"),
            std::string::npos);
  Tensor bad = Tensor::from_i64({1, 3}, {1, 60, 2});
  EXPECT_NE(error_of([&] { model->forward(bad, Tensor(), Tensor()); }).find("outside the vocabulary"),
            std::string::npos);
}

TEST(EncoderBadInput, AllPaddingRowGivesFiniteOutput) {
  auto model = load_encoder(fixture("bert"));
  Tensor ids = Tensor::from_i64({1, 3}, {1, 2, 3});
  Tensor mask = Tensor::from_i64({1, 3}, {0, 0, 0});
  EncoderOutput out = model->forward(ids, Tensor(), mask);
  for (int64_t i = 0; i < out.last_hidden_state.numel(); ++i) ASSERT_TRUE(std::isfinite(out.last_hidden_state.f32()[i]));
}

// forward_first_token (sequence classification's read of h[:, 0] and the pooler; CLS pooling): post-LN families
// run their last layer on position 0 only, and its result equals the full forward's h[:, 0] and pooler_output up
// to the float rounding of products over fewer rows, on a batch with left and right padding, in every dtype,
// padded and unpadded (forward_unpadded's rows: 0 where position 0 is padding). Pre-LN and ModernBERT run the full
// stack (last_hidden_state stays defined there).
TEST(EncoderFirstToken, LastLayerOnPositionZeroEqualsTheFullForward) {
  struct Case {
    const char* folder;
    bool first_token_path;  // the last layer runs position 0 only
  };
  for (const Case& k : {Case{"bert", true}, Case{"mpnet", true}, Case{"roberta", true},
                        Case{"family_heads/distilbert", true}, Case{"family_heads/modernbert_seqcls", false},
                        Case{"transformer_encoder", false}})
    for (ops::ComputeType ct : {ops::ComputeType::F32, ops::ComputeType::BF16, ops::ComputeType::I8}) {
      SCOPED_TRACE(std::string(k.folder) + " " + ops::compute_type_name(ct));
      auto model = load_encoder(fixture(k.folder), ct);
      const int64_t B = 3, L = 6, H = model->config().hidden_size, V = model->config().vocab_size;
      std::vector<int64_t> ids(B * L), mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1};
      for (int64_t i = 0; i < B * L; ++i) ids[i] = 5 + (7 * i + 3) % (V - 5);
      const Tensor ids_t = Tensor::from_i64({B, L}, ids), mask_t = Tensor::from_i64({B, L}, mask);
      for (bool unpadded : {false, true}) {
      SCOPED_TRACE(unpadded ? "unpadded" : "padded");
      const EncoderOutput full = unpadded ? model->forward_unpadded(ids_t, Tensor(), mask_t)
                                          : model->forward(ids_t, Tensor(), mask_t);
      const EncoderOutput first = model->forward_first_token(ids_t, Tensor(), mask_t, unpadded);
      ASSERT_TRUE(first.first_token_state.defined());
      ASSERT_EQ(first.first_token_state.shape(), (std::vector<int64_t>{B, H}));
      EXPECT_EQ(first.last_hidden_state.defined(), !k.first_token_path);
      double worst = 0, scale = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < H; ++c) {
          const float want = full.last_hidden_state.f32()[b * L * H + c];
          worst = std::max(worst, (double)std::fabs(first.first_token_state.f32()[b * H + c] - want));
          scale = std::max(scale, (double)std::fabs(want));
        }
      EXPECT_LE(worst, 1e-5 * std::max(scale, 1.0));
      EXPECT_GT(scale, 0.0);
      ASSERT_EQ(first.pooler_output.defined(), full.pooler_output.defined());
      if (full.pooler_output.defined()) {
        EXPECT_TRUE(test::all_close(first.pooler_output.f32(), full.pooler_output.f32(), B * H, 1e-5f, 1e-5f));
      }
      }
    }
}
