// RoBERTa / XLM-RoBERTa / CamemBERT base models against the PyTorch reference of modeling_roberta.py
// (fixtures from scripts/make_roberta_fixtures.py, tests/fixtures/roberta).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "run_tfm.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::max_abs_diff;
using tfm::test::min_row_cosine;
using tfm::test::run_tfm_in;
using tfm::test::spit;
using tfm::test::TempFolder;
using tfm::test::TfmRun;

namespace {
constexpr double kTol = 2e-5;
}  // namespace

// config.json names RobertaForMaskedLM; the file holds roberta.* + lm_head.* + the int64 position_ids buffer.
TEST(RobertaGolden, MaskedLmFolderLoadsAsBaseModelAndMatchesPyTorch) {
  auto model = load_encoder(fixture("roberta"));
  auto io = SafeTensors::open(fixture("roberta/expected.safetensors"));
  EncoderOutput one = model->forward(io.get("input_ids_single"), Tensor(), Tensor());
  EXPECT_LE(max_abs_diff(one.last_hidden_state, io.get("last_hidden_state_single")), kTol);
  EXPECT_FALSE(one.pooler_output.defined());  // RobertaForMaskedLM has no pooler
  Tensor mask = io.get("attention_mask");
  EncoderOutput batch = model->forward(io.get("input_ids"), Tensor(), mask);
  EXPECT_LE(max_abs_diff(batch.last_hidden_state, io.get("last_hidden_state")), kTol);
}

TEST(RobertaGolden, UnprefixedBaseModelWithPoolerAndTypeIdsZero) {
  EncoderConfig c = EncoderConfig::load(fixture("roberta/config.json"));
  EXPECT_EQ(c.pad_token_id, 1);
  EXPECT_EQ(c.type_vocab_size, 1);
  SafeTensorsWeights w(fixture("roberta/model_base.safetensors"));
  auto model = make_encoder(c, w);
  auto io = SafeTensors::open(fixture("roberta/expected.safetensors"));
  Tensor ids = io.get("input_ids"), mask = io.get("attention_mask");
  Tensor zeros = Tensor::from_i64(ids.shape(), std::vector<int64_t>(ids.numel(), 0));
  EncoderOutput out = model->forward(ids, zeros, mask);
  EXPECT_LE(max_abs_diff(out.last_hidden_state, io.get("last_hidden_state")), kTol);
  ASSERT_TRUE(out.pooler_output.defined());
  EXPECT_LE(max_abs_diff(out.pooler_output, io.get("pooler_output")), kTol);
}

// XLMRobertaModel and CamembertModel are RobertaModel under other names.
TEST(RobertaGolden, XlmRobertaAndCamembertModelTypesLoadTheSameComposition) {
  nlohmann::json j = load_json_file(fixture("roberta/config.json"));
  auto io = SafeTensors::open(fixture("roberta/expected.safetensors"));
  for (const char* type : {"xlm-roberta", "camembert"}) {
    j["model_type"] = type;
    j["architectures"] = nlohmann::json::array();
    EncoderConfig c = EncoderConfig::from_json(j, "config.json");
    SafeTensorsWeights w(fixture("roberta/model.safetensors"));
    auto model = make_encoder(c, w);
    EncoderOutput out = model->forward(io.get("input_ids"), Tensor(), io.get("attention_mask"));
    EXPECT_LE(max_abs_diff(out.last_hidden_state, io.get("last_hidden_state")), kTol) << type;
  }
}

// Positions start at pad_token_id + 1: a BERT-style (unshifted) lookup would not match, so this can fail.
TEST(RobertaGolden, WrongPadTokenIdChangesTheOutput) {
  nlohmann::json j = load_json_file(fixture("roberta/config.json"));
  j["pad_token_id"] = 0;
  EncoderConfig c = EncoderConfig::from_json(j, "config.json");
  SafeTensorsWeights w(fixture("roberta/model.safetensors"));
  auto model = make_encoder(c, w);
  auto io = SafeTensors::open(fixture("roberta/expected.safetensors"));
  EncoderOutput out = model->forward(io.get("input_ids_single"), Tensor(), Tensor());
  EXPECT_GT(max_abs_diff(out.last_hidden_state, io.get("last_hidden_state_single")), 1e-2);
}

TEST(RobertaDtypes, Bf16AndInt8TokenCosineToFp32Reference) {
  EncoderConfig c = EncoderConfig::load(fixture("roberta/config.json"));
  auto io = SafeTensors::open(fixture("roberta/expected.safetensors"));
  Tensor mask = io.get("attention_mask");
  for (ops::ComputeType ct : {ops::ComputeType::BF16, ops::ComputeType::I8}) {
    SafeTensorsWeights w(fixture("roberta/model.safetensors"));
    auto model = make_encoder(c, w, ct);
    EncoderOutput out = model->forward(io.get("input_ids"), Tensor(), mask);
    const double cs = min_row_cosine(out.last_hidden_state, io.get("last_hidden_state"), mask);
    EXPECT_GE(cs, ct == ops::ComputeType::BF16 ? 0.9999 : 0.999) << ops::compute_type_name(ct);
  }
}

TEST(RobertaBadInput, UnknownModelTypeNamesTheSupportedOnes) {
  nlohmann::json j = load_json_file(fixture("roberta/config.json"));
  j["model_type"] = "longformer";
  try {
    EncoderConfig::from_json(j, "config.json");
    FAIL() << "accepted model_type longformer";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("longformer"), std::string::npos) << m;
    for (const char* t : {"bert", "roberta", "xlm-roberta", "camembert"}) EXPECT_NE(m.find(t), std::string::npos) << m;
  }
}

TEST(RobertaBadInput, SequencePastTheShiftedPositionsIsRefused) {
  auto model = load_encoder(fixture("roberta"));
  // max_position_embeddings 40, pad_token_id 1: positions 2..39 hold 38 tokens; 39 do not fit.
  Tensor ok = Tensor::from_i64({1, 38}, std::vector<int64_t>(38, 5));
  EXPECT_NO_THROW(model->forward(ok, Tensor(), Tensor()));
  Tensor too_long = Tensor::from_i64({1, 39}, std::vector<int64_t>(39, 5));
  EXPECT_THROW(model->forward(too_long, Tensor(), Tensor()), std::invalid_argument);
}

// tfm encode on the folder: its byte-level BPE tokenizer.json gives Hugging Face's ids, the forward the reference.
TEST(RobertaCli, EncodeMatchesPyTorch) {
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", fixture("roberta"), "--threads", "1", "--text",
                                   "A man in a blue shirt is standing on a ladder.", "-o", tmp.path + "/h.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("input_ids: [3256, 19, 314, 277, 257, 585, 445, 320, 502, 307, 257, 3251, 8, 3258]"),
            std::string::npos)
      << r.out;
  auto io = SafeTensors::open(fixture("roberta/expected.safetensors"));
  Tensor h = load_npy(tmp.path + "/h.npy");
  EXPECT_LE(max_abs_diff(h, io.get("last_hidden_state_single")), kTol);
}

// tfm embed --pooling mean: the mean over real tokens of the reference's last_hidden_state (the batch pads with
// the tokenizer's <pad>, which is not the config's pad_token_id, so real tokens keep their positions).
TEST(RobertaCli, EmbedMeanPoolingMatchesPyTorch) {
  TempFolder tmp;
  spit(tmp.path + "/in.txt",
       "A man in a blue shirt is standing on a ladder.\nTwo young, White males are outside near many bushes.\n");
  TfmRun r = run_tfm_in(tmp.path, {"embed", "--model", fixture("roberta"), "--pooling", "mean", "--quiet", "--input",
                                   tmp.path + "/in.txt", "-o", tmp.path + "/v.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto io = SafeTensors::open(fixture("roberta/expected.safetensors"));
  Tensor want_h = io.get("last_hidden_state"), mask = io.get("attention_mask");
  const int64_t B = want_h.size(0), L = want_h.size(1), H = want_h.size(2);
  Tensor want = Tensor::empty({B, H});
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      double sum = 0;
      int64_t n = 0;
      for (int64_t l = 0; l < L; ++l)
        if (mask.i64()[b * L + l]) sum += want_h.f32()[(b * L + l) * H + h], ++n;
      want.f32()[b * H + h] = (float)(sum / (double)n);
    }
  }
  Tensor v = load_npy(tmp.path + "/v.npy");
  EXPECT_LE(max_abs_diff(v, want), kTol);
}
