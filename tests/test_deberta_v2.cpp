// The DeBERTa-v2 family (models/deberta_v2.cpp, model_type deberta-v2: DeBERTa-v3) against the PyTorch reference of
// modeling_deberta_v2.py (scripts/make_deberta_fixtures.py, tests/fixtures/deberta_v2): disentangled attention with
// log-bucketed relative positions, shared attention keys, norm_rel_ebd, no absolute positions, no token types; and
// the other options (separate pos_key_proj / pos_query_proj, unbucketed clamped positions, position_biased_input,
// token types, embed_proj). Its heads run through tests/test_family_heads.cpp and tests/test_family_matrix.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "models/heads.h"
#include "run_tfm.h"
#include "test_util.h"
#include "text/bert_tokenizer.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::min_row_cosine;
using tfm::test::run_tfm_in;
using tfm::test::TempFolder;
using tfm::test::TfmRun;

namespace {
constexpr float kTol = 5e-5f;

const SafeTensors& expected() {
  static const SafeTensors io = SafeTensors::open(fixture("deberta_v2/expected.safetensors"));
  return io;
}

EncoderConfig deberta_config(const nlohmann::json& patch = nlohmann::json::object(),
                             const std::string& file = "config.json") {
  nlohmann::json j = load_json_file(fixture("deberta_v2/" + file));
  for (auto& [k, v] : patch.items()) j[k] = v;
  return EncoderConfig::from_json(j, "config.json");
}

std::unique_ptr<EncoderModel> deberta_model(const nlohmann::json& patch = nlohmann::json::object(),
                                            ops::ComputeType ct = ops::ComputeType::F32) {
  SafeTensorsWeights w(fixture("deberta_v2/model.safetensors"));
  return make_encoder(deberta_config(patch), w, ct);
}

// The real positions (attention_mask 1) of got and want [B, L, H] are within atol; padded rows are not compared
// (Hugging Face's XSoftmax gives a padded query zero weights, ours attends to the real keys).
::testing::AssertionResult real_rows_close(const float* got, const float* want, const Tensor& mask, int64_t H,
                                           float atol) {
  for (int64_t n = 0; n < mask.numel(); ++n) {
    if (!mask.i64()[n]) continue;
    ::testing::AssertionResult r = test::all_close(got + n * H, want + n * H, H, atol, atol);
    if (!r) return r << " (token " << n << ")";
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult real_rows_close(const Tensor& got, const Tensor& want, const Tensor& mask, float atol) {
  return real_rows_close(got.f32(), want.f32(), mask, want.size(-1), atol);
}

double real_rows_max_diff(const Tensor& a, const Tensor& b, const Tensor& mask) {
  const int64_t H = b.size(-1);
  double m = 0;
  for (int64_t n = 0; n < mask.numel(); ++n)
    if (mask.i64()[n])
      for (int64_t h = 0; h < H; ++h) m = std::max(m, (double)std::fabs(a.f32()[n * H + h] - b.f32()[n * H + h]));
  return m;
}
}  // namespace

// DebertaV2Config's keys: type_vocab_size 0 runs without a table; BERT's required keys take DebertaV2Config's
// defaults when absent.
TEST(DebertaV2Config, KeysAndDefaults) {
  const EncoderConfig c = deberta_config();
  EXPECT_EQ(c.model_type, "deberta-v2");
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.type_vocab_size, 1);  // 0 in the file: no token type table
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-7);
  const EncoderConfig d = EncoderConfig::from_json({{"model_type", "deberta-v2"}}, "config.json");
  EXPECT_EQ(d.hidden_size, 1536);
  EXPECT_EQ(d.vocab_size, 128100);
  EXPECT_DOUBLE_EQ(d.layer_norm_eps, 1e-7);
}

// The folder loads through the registry (every stored tensor used) and equals PyTorch on the padded batch at every
// layer, on one sentence alone, and unpadded.
TEST(DebertaV2Golden, LastHiddenStateAndEveryLayerMatchPyTorch) {
  auto model = load_encoder(fixture("deberta_v2"));
  const Tensor ids = expected().get("input_ids"), mask = expected().get("attention_mask");
  EncoderOutput out = model->forward(ids, Tensor(), mask, /*all_layers=*/true);
  EXPECT_TRUE(real_rows_close(out.last_hidden_state, expected().get("last_hidden_state"), mask, kTol));
  const Tensor hs = expected().get("hidden_states");
  ASSERT_EQ(out.hidden_states.shape(), hs.shape());
  const int64_t H = hs.size(-1), per = ids.numel() * H;
  for (int64_t l = 0; l < hs.size(0); ++l)
    EXPECT_TRUE(real_rows_close(out.hidden_states.f32() + l * per, hs.f32() + l * per, mask, H, kTol)) << "layer " << l;
  EncoderOutput single = model->forward(expected().get("single_input_ids"), Tensor(), Tensor());
  EXPECT_LE(test::max_abs_diff(single.last_hidden_state, expected().get("single_last_hidden_state")), kTol);
  EncoderOutput unpadded = model->forward_unpadded(ids, Tensor(), mask);
  EXPECT_TRUE(real_rows_close(unpadded.last_hidden_state, expected().get("last_hidden_state"), mask, kTol));
  for (int64_t n = 0; n < mask.numel(); ++n) {  // padded rows 0 on the unpadded path
    if (!mask.i64()[n]) { EXPECT_EQ(unpadded.last_hidden_state.f32()[n * 32], 0.0f) << n; }
  }
}

// pos_att_type is read: c2p alone and p2c alone (scale_factor 2) equal the reference of the same weights, and each
// differs clearly from both terms.
TEST(DebertaV2Golden, EachDisentangledTermIsUsed) {
  const Tensor ids = expected().get("input_ids"), mask = expected().get("attention_mask");
  const Tensor both = expected().get("last_hidden_state");
  for (const char* term : {"c2p", "p2c"}) {
    auto model = deberta_model({{"pos_att_type", {term}}});
    EncoderOutput out = model->forward(ids, Tensor(), mask);
    EXPECT_TRUE(real_rows_close(out.last_hidden_state, expected().get(std::string(term) + "_only"), mask, kTol)) << term;
    EXPECT_GT(real_rows_max_diff(out.last_hidden_state, both, mask), 0.2) << term;
  }
}

// share_att_key false (pos_key_proj / pos_query_proj), position_buckets 0 (relative positions clamped to
// max_relative_positions 6), norm_rel_ebd none, position_biased_input, token types 0 / 1 of pairs, embed_proj
// 24 -> 32, pos_att_type as the "p2c|c2p" string.
TEST(DebertaV2Golden, TheOtherOptionsMatchPyTorch) {
  SafeTensorsWeights w(fixture("deberta_v2/model_variant.safetensors"));
  auto model = make_encoder(deberta_config(nlohmann::json::object(), "config_variant.json"), w, ops::ComputeType::F32);
  const Tensor mask = expected().get("variant_attention_mask");
  EncoderOutput out = model->forward(expected().get("variant_input_ids"), expected().get("variant_token_type_ids"), mask);
  EXPECT_TRUE(real_rows_close(out.last_hidden_state, expected().get("variant_last_hidden_state"), mask, kTol));
  // The token types are read (all 0 moves the pair's second segment).
  EncoderOutput zero = model->forward(expected().get("variant_input_ids"), Tensor(), mask);
  EXPECT_GT(real_rows_max_diff(zero.last_hidden_state, expected().get("variant_last_hidden_state"), mask), 0.05);
}

TEST(DebertaV2Dtypes, Bf16AndInt8TokenCosineToTheReference) {
  const Tensor ids = expected().get("input_ids"), mask = expected().get("attention_mask");
  for (auto [ct, min_cos] : {std::pair{ops::ComputeType::BF16, 0.999}, std::pair{ops::ComputeType::I8, 0.99}}) {
    auto model = deberta_model(nlohmann::json::object(), ct);
    EncoderOutput out = model->forward(ids, Tensor(), mask);
    EXPECT_GE(min_row_cosine(out.last_hidden_state, expected().get("last_hidden_state"), mask), min_cos)
        << ops::compute_type_name(ct);
  }
}

// What this implementation does not run is refused naming the key.
TEST(DebertaV2BadConfig, UnsupportedOptionsAreRefusedNamingTheKey) {
  const std::pair<nlohmann::json, const char*> cases[] = {
      {{{"conv_kernel_size", 3}}, "conv_kernel_size"},
      {{{"pos_att_type", {"p2p"}}}, "pos_att_type"},
      {{{"pos_att_type", 3}}, "pos_att_type"},
      {{{"norm_rel_ebd", "batch_norm"}}, "norm_rel_ebd"},
      {{{"attention_head_size", 16}}, "attention_head_size"},
      {{{"pooler_hidden_size", 16}}, "pooler_hidden_size"},
      {{{"pooler_hidden_act", "nope"}}, "pooler_hidden_act"},
      {{{"max_relative_positions", 4}}, "max_relative_positions"},
  };
  for (const auto& [patch, key] : cases) {
    try {
      deberta_config(patch);
      ADD_FAILURE() << patch.dump() << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("key '") + key + "'"), std::string::npos) << e.what();
    }
  }
}

// The folder's tokenizer.json (DeBERTa-v3's Unigram / Metaspace layout) gives the ids and token types Hugging Face
// tokenizers gave, single texts and pairs.
TEST(DebertaV2Cli, TokenizerGivesTheHuggingFaceIds) {
  const BertTokenizer tok = BertTokenizer::from_dir(fixture("deberta_v2"));
  EXPECT_TRUE(tok.has_token_type_ids());
  const nlohmann::json enc = load_json_file(fixture("family_heads/encodings.json"))["tokenizers"]["deberta_v3"];
  for (const char* group : {"classify", "tag", "fill", "pairs"})
    for (const auto& c : enc[group]) {
      const std::string pair = c["pair"].is_string() ? c["pair"].get<std::string>() : "";
      Encoding got = tok.encode(c["text"].get<std::string>(), c["pair"].is_string() ? &pair : nullptr);
      EXPECT_EQ(got.input_ids, c["input_ids"].get<std::vector<int64_t>>()) << c["text"];
      EXPECT_EQ(got.token_type_ids, c["token_type_ids"].get<std::vector<int64_t>>()) << c["text"];
    }
}

// The NLI-style two-label classifier on (premise, hypothesis) pairs ([CLS] A [SEP] B [SEP]): the logits of the
// reference (ContextPooler + classifier), and `tfm rerank` orders the passages by label 1's probability as the
// reference does.
TEST(DebertaV2Heads, PairsAndRerankMatchPyTorch) {
  const std::string dir = fixture("family_heads/deberta_seqcls");
  TaskModel m = TaskModel::load(dir, HeadKind::SequenceClassification);
  auto e = SafeTensors::open(dir + "/expected.safetensors");
  int n = 0;
  for (; e.has("pairs_input_ids_" + std::to_string(n)); ++n) {
    Tensor lg = m.sequence_logits(e.get("pairs_input_ids_" + std::to_string(n)), Tensor(), Tensor());
    Tensor want = e.get("pairs_logits_" + std::to_string(n));
    EXPECT_TRUE(test::all_close(lg.f32(), want.f32(), lg.numel(), kTol)) << n;
  }
  EXPECT_EQ(n, 4);
  const nlohmann::json want = load_json_file(dir + "/expected.json");
  TempFolder tmp;
  std::vector<std::string> args = {"rerank", "--model", dir, "--query", want["query"].get<std::string>()};
  for (const auto& p : want["passages"]) args.push_back(p.get<std::string>());
  TfmRun r = run_tfm_in(tmp.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const nlohmann::json got = nlohmann::json::parse(r.out);
  ASSERT_EQ(got.size(), want["ranking"].size()) << r.out;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]["index"], want["ranking"][i]["index"]) << r.out;
    EXPECT_NEAR(got[i]["score"].get<double>(), want["ranking"][i]["score"].get<double>(), 1e-4) << r.out;
  }
}

// DeBERTa-v2 has no fine-tuning here: one line naming the families that have it.
TEST(DebertaV2Cli, FinetuningIsAOneLineErrorNamingTheTrainableFamilies) {
  TempFolder tmp;
  test::spit(tmp.path + "/train.csv", "text,label\nthe cat sat on the mat,0\nthe dog is in the park,1\n");
  TfmRun r = run_tfm_in(tmp.path, {"finetune", "--task", "classify", "--model", fixture("family_heads/deberta_seqcls"),
                                   "--train", tmp.path + "/train.csv", "--out", tmp.path + "/o", "--no-progress"});
  test::expect_one_line_error(r, "model_type 'deberta-v2' cannot be fine-tuned yet (supported: bert,");
}
