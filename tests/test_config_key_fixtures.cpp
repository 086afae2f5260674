// The fixtures of tests/fixtures/config_keys/ (issue 48): one folder per family whose config.json sets the keys that
// change the numbers to values other than their defaults (tests/test_config_keys.cpp checks that every such key has
// one), against the family's PyTorch reference. Written by the --config-keys part of the family's script:
//   bert                   scripts/make_fixtures.py            hidden_act gelu_new, layer_norm_eps 0.05
//   roberta                scripts/make_roberta_fixtures.py    pad_token_id 5, hidden_act relu, layer_norm_eps 0.05
//   distilbert             scripts/make_family_head_fixtures.py activation relu
//   mpnet                  scripts/make_mpnet_fixtures.py      hidden_act relu, layer_norm_eps 0.05
//   electra                scripts/make_electra_fixtures.py    hidden_act relu, layer_norm_eps 0.05, 8 heads
//   nomic_bert             scripts/make_nomic_bert_fixtures.py activation_function geglu, biases, eps 0.05
//   transformer_encoder    scripts/make_fixtures.py            hidden_act relu
//   modernbert_seqcls      scripts/make_modernbert_fixtures.py norm_eps, biases, hidden_activation, window, period,
//                                                              thetas, classifier_pooling / activation / bias
//   modernbert_layer_types scripts/make_modernbert_fixtures.py layer_types, rope_parameters
//   marian_keys, m2m100_keys scripts/make_marian_fixtures.py   scale_embedding, activation_function, pad_token_id
//   seq2seq_keys           scripts/make_fixtures.py            decode_positions absolute, activation gelu
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decode/search.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "models/heads.h"
#include "models/hf_seq2seq.h"
#include "models/seq2seq.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;

namespace {

std::string dir_of(const std::string& name) { return fixture("config_keys/" + name); }

// max |got - want| over the rows [B, L, ...] where mask [B, L] is 1.
double max_err_valid(const Tensor& got, const Tensor& want, const Tensor& mask) {
  EXPECT_EQ(got.shape(), want.shape());
  const int64_t rows = mask.numel(), width = want.numel() / rows;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r)
    if (mask.i64()[r])
      for (int64_t i = 0; i < width; ++i)
        worst = std::max(worst, std::fabs((double)got.f32()[r * width + i] - want.f32()[r * width + i]));
  return worst;
}

class ConfigKeyEncoder : public ::testing::TestWithParam<std::string> {};

// The encoder's last_hidden_state (and pooler_output where the reference wrote one) on the padded batch.
TEST_P(ConfigKeyEncoder, MatchesPyTorch) {
  const std::string dir = dir_of(GetParam());
  auto model = load_encoder(dir);
  SafeTensors ex = SafeTensors::open(dir + "/expected.safetensors");
  const Tensor ids = ex.get("input_ids"), mask = ex.get("attention_mask");
  const Tensor types = ex.has("token_type_ids") ? ex.get("token_type_ids") : Tensor();
  const EncoderOutput out = model->forward(ids, types, mask);
  EXPECT_LE(max_err_valid(out.last_hidden_state, ex.get("last_hidden_state"), mask), 1e-4) << GetParam();
  if (ex.has("pooler_output")) {
    ASSERT_TRUE(out.pooler_output.defined()) << GetParam();
    EXPECT_LE(test::max_abs_diff(out.pooler_output, ex.get("pooler_output")), 1e-4) << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Folders, ConfigKeyEncoder,
                         ::testing::Values("bert", "roberta", "distilbert", "mpnet", "transformer_encoder",
                                           "modernbert_layer_types", "electra", "nomic_bert"));

// ModernBertForSequenceClassification with mean pooling, a gelu_new head with biases, and the body's keys changed.
TEST(ConfigKeyHeads, ModernBertSequenceLogitsMatchPyTorch) {
  const std::string dir = dir_of("modernbert_seqcls");
  TaskModel m = TaskModel::load(dir, HeadKind::SequenceClassification);
  SafeTensors ex = SafeTensors::open(dir + "/expected.safetensors");
  const Tensor got = m.sequence_logits(ex.get("input_ids"), Tensor(), ex.get("attention_mask"));
  EXPECT_LE(test::max_abs_diff(got, ex.get("logits")), 1e-4);
}

std::vector<int64_t> ints(const Tensor& t) { return std::vector<int64_t>(t.i64(), t.i64() + t.numel()); }

// max |got - want| of the logits [B, Lt, V] at positions t < tgt_len[b].
double max_err_steps(const Tensor& got, const Tensor& want, const std::vector<int64_t>& tgt_len) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return INFINITY;
  const int64_t Lt = want.size(1), V = want.size(2);
  double worst = 0;
  for (int64_t b = 0; b < want.size(0); ++b)
    for (int64_t t = 0; t < tgt_len[b]; ++t)
      for (int64_t v = 0; v < V; ++v) {
        const int64_t i = (b * Lt + t) * V + v;
        worst = std::max(worst, std::fabs((double)got.f32()[i] - want.f32()[i]));
      }
  return worst;
}

class ConfigKeyTranslation : public ::testing::TestWithParam<std::string> {};

// Hugging Face translation folders: teacher-forced logits of a padded batch.
TEST_P(ConfigKeyTranslation, TeacherForcedLogitsMatchPyTorch) {
  const std::string dir = dir_of(GetParam());
  Seq2SeqModel model(hf_seq2seq_config(load_json_file(dir + "/config.json"), dir + "/config.json"));
  model.load(dir + "/model.safetensors");
  model.prepare_inference(ops::ComputeType::F32);
  SafeTensors ex = SafeTensors::open(dir + "/expected.safetensors");
  const Tensor src = ex.get("src"), dec = ex.get("dec_input");
  const std::vector<int64_t> src_len = ints(ex.get("src_len")), tgt_len = ints(ex.get("tgt_len"));
  const int64_t B = src.size(0), Ls = src.size(1), Lt = dec.size(1);
  std::vector<int64_t> labels(B * Lt, 0);
  Seq2SeqBatch batch{src.i64(), src_len.data(), dec.i64(), labels.data(), tgt_len.data(), B, Ls, Lt};
  EXPECT_LT(max_err_steps(model.forward_logits(batch), ex.get("logits"), tgt_len), 2e-4) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Folders, ConfigKeyTranslation, ::testing::Values("marian_keys", "m2m100_keys"));

// Absent keys take MarianConfig's and M2M100Config's defaults (configuration_marian.py: activation_function "gelu",
// scale_embedding False; configuration_m2m_100.py: "relu", True); M2M100 always shares its embeddings.
TEST(ConfigKeyDefaults, TranslationFamiliesUseTheConfigClassesDefaults) {
  for (const char* name : {"marian_keys", "m2m100_keys"}) {
    nlohmann::json j = load_json_file(dir_of(name) + "/config.json");
    for (const char* key : {"activation_function", "scale_embedding", "decoder_layers", "decoder_vocab_size"})
      j.erase(key);
    j["share_encoder_decoder_embeddings"] = false;
    j["decoder_vocab_size"] = j["vocab_size"];
    const Seq2SeqConfig c = hf_seq2seq_config(j, "config.json");
    const bool marian = std::string(name) == "marian_keys";
    EXPECT_EQ(c.activation, marian ? "gelu" : "relu") << name;
    EXPECT_EQ(c.scale_embedding, !marian) << name;
    EXPECT_EQ(c.shared_embeddings, !marian) << name;
    EXPECT_EQ(c.decoder_layers, c.num_layers) << name;
  }
}

// A Marian decoder_vocab_size that shared embeddings cannot have is refused, naming both sizes.
TEST(ConfigKeyDefaults, SharedMarianEmbeddingsNeedOneVocabularySize) {
  nlohmann::json j = load_json_file(dir_of("marian_keys") + "/config.json");
  j["decoder_vocab_size"] = 61;
  try {
    hf_seq2seq_config(j, "config.json");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder_vocab_size 61 differs from vocab_size 60"), std::string::npos)
        << e.what();
  }
}

// The d2l seq2seq with decode_positions "absolute" and activation "gelu": greedy decoding (with the position mode
// the config names, as the Translator picks it) and the teacher-forced logits of its own output.
TEST(ConfigKeySeq2Seq, GreedyDecodingMatchesPyTorch) {
  const std::string dir = dir_of("seq2seq_keys");
  Seq2SeqModel model(Seq2SeqConfig::load(dir + "/config.json"));
  model.load(dir + "/model.safetensors");
  SafeTensors ex = SafeTensors::open(dir + "/expected.safetensors");
  const Tensor src = ex.get("enc_X"), valid = ex.get("enc_valid_lens"), want = ex.get("greedy_ids");
  const std::vector<int64_t> steps = ints(ex.get("steps"));
  const int64_t B = src.size(0), T = want.size(1);
  DecodeOptions opt;
  opt.max_steps = T;
  opt.position_mode = model.config().decode_positions == "absolute" ? PositionMode::kAbsolute : PositionMode::kD2lStep;
  const auto got = greedy_decode(model, src.i64(), valid.i64(), B, src.size(1), opt);
  std::vector<int64_t> dec(B * T, 1), labels(B * T, 0);  // <pad> 1 after the prefix
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> w;
    for (int64_t t = 0; t < T && want.i64()[b * T + t] >= 0; ++t) w.push_back(want.i64()[b * T + t]);
    EXPECT_EQ(got[b], w) << "row " << b;
    dec[b * T] = opt.bos_id;
    for (size_t t = 0; t + 1 < (size_t)T && t < w.size(); ++t) dec[b * T + t + 1] = w[t];
  }
  model.prepare_inference(ops::ComputeType::F32);
  const std::vector<int64_t> src_len = ints(valid);
  Seq2SeqBatch batch{src.i64(), src_len.data(), dec.data(), labels.data(), steps.data(), B, src.size(1), T};
  EXPECT_LT(max_err_steps(model.forward_logits(batch), ex.get("greedy_logits"), steps), 2e-4);
}

}  // namespace
