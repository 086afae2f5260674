// The ELECTRA family (models/electra.cpp) against the PyTorch reference of modeling_electra.py
// (scripts/make_electra_fixtures.py, tests/fixtures/electra): embeddings embedding_size wide, embeddings_project
// to hidden_size, BERT's layers; the ElectraForPreTraining layout of google/electra-*-discriminator. Its heads,
// every command and dtype, the server and Python: test_family_heads.cpp, test_family_matrix.cpp,
// python/tests/test_family_matrix.py; fine-tuning: test_finetune_families.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "run_tfm.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::max_abs_diff;
using tfm::test::min_row_cosine;
using tfm::test::run_tfm_in;
using tfm::test::TempFolder;
using tfm::test::TfmRun;

namespace {
constexpr double kTol = 2e-5;

EncoderConfig electra_config(const nlohmann::json& patch = nlohmann::json::object()) {
  nlohmann::json j = load_json_file(fixture("electra/config.json"));
  for (auto& [k, v] : patch.items()) j[k] = v;
  return EncoderConfig::from_json(j, "config.json");
}

// Row b of a [B, L, H] tensor, its first n positions, as [1, n, H].
Tensor rows(const Tensor& t, int64_t b, int64_t n) {
  const int64_t L = t.size(1), H = t.size(2);
  Tensor out = Tensor::empty({1, n, H});
  std::copy(t.f32() + b * L * H, t.f32() + (b * L + n) * H, out.f32());
  return out;
}
}  // namespace

// The ElectraForPreTraining folder (electra.* + discriminator_predictions.*) loads as ElectraModel: single input,
// a padded batch with a sentence pair's token types, and every hidden state (the first is the projected embedding
// output, as ElectraModel's encoder receives it).
TEST(ElectraGolden, PreTrainingFolderLoadsAsBaseModelAndMatchesPyTorch) {
  auto model = load_encoder(fixture("electra"));  // also checks every stored tensor but the skipped heads is used
  auto io = SafeTensors::open(fixture("electra/expected.safetensors"));
  EncoderOutput one = model->forward(io.get("input_ids_single"), Tensor(), Tensor());
  EXPECT_LE(max_abs_diff(one.last_hidden_state, io.get("last_hidden_state_single")), kTol);
  EXPECT_FALSE(one.pooler_output.defined());  // ElectraModel has no pooler
  EncoderOutput batch = model->forward(io.get("input_ids"), io.get("token_type_ids"), io.get("attention_mask"), true);
  EXPECT_LE(max_abs_diff(batch.last_hidden_state, io.get("last_hidden_state")), kTol);
  ASSERT_TRUE(batch.hidden_states.defined());
  EXPECT_LE(max_abs_diff(batch.hidden_states, io.get("hidden_states")), kTol);
}

// The unpadded forward (embed, /embed) and the first-token forward (sequence classification) on the same batch.
TEST(ElectraGolden, UnpaddedAndFirstTokenForwardsMatchPyTorch) {
  auto model = load_encoder(fixture("electra"));
  auto io = SafeTensors::open(fixture("electra/expected.safetensors"));
  const Tensor ids = io.get("input_ids"), types = io.get("token_type_ids"), mask = io.get("attention_mask");
  const Tensor want = io.get("last_hidden_state");
  EncoderOutput u = model->forward_unpadded(ids, types, mask);
  EXPECT_GE(min_row_cosine(u.last_hidden_state, want, mask), 1.0 - 1e-6);
  const int64_t n1 = io.get("input_ids_single").size(1);  // row 1 is the single input, padded
  EXPECT_LE(max_abs_diff(rows(u.last_hidden_state, 1, n1), io.get("last_hidden_state_single")), kTol);
  EncoderOutput f = model->forward_first_token(ids, types, mask, /*unpadded=*/true);
  const int64_t L = ids.size(1), H = want.size(2);
  for (int64_t b = 0; b < 2; ++b)
    EXPECT_TRUE(test::all_close(f.first_token_state.f32() + b * H, want.f32() + b * L * H, H, 1e-4f)) << b;
}

// embedding_size == hidden_size: no embeddings_project (ElectraModel creates none), unprefixed ElectraModel names.
TEST(ElectraGolden, EmbeddingSizeEqualToHiddenSizeHasNoProjection) {
  const EncoderConfig c = electra_config({{"embedding_size", 32}});
  SafeTensorsWeights w(fixture("electra/model_same.safetensors"));
  auto model = make_encoder(c, w);
  auto io = SafeTensors::open(fixture("electra/expected.safetensors"));
  EncoderOutput out = model->forward(io.get("input_ids"), io.get("token_type_ids"), io.get("attention_mask"));
  EXPECT_LE(max_abs_diff(out.last_hidden_state, io.get("last_hidden_state_same")), kTol);
}

// The checkpoint's embedding width must be the config's: a wrong embedding_size names the tensor and the shapes.
TEST(ElectraBadInput, EmbeddingSizeOtherThanTheCheckpointsIsRefused) {
  const EncoderConfig c = electra_config({{"embedding_size", 16}});
  CheckpointWeights w(fixture("electra"));
  try {
    make_encoder(c, w);
    FAIL() << "embedding_size 16 accepted for a 24-wide checkpoint";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("embeddings.word_embeddings.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("24"), std::string::npos) << m;
  }
  for (int64_t bad : {0, -3}) {
    try {
      electra_config({{"embedding_size", bad}});
      FAIL() << "embedding_size " << bad << " accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("key 'embedding_size' must be positive"), std::string::npos) << e.what();
    }
  }
}

// ElectraConfig's defaults for keys a config.json leaves out (hidden_size 256, embedding_size 128, 4 heads, ...).
TEST(ElectraConfig, MissingKeysTakeElectraConfigDefaults) {
  const EncoderConfig c = EncoderConfig::from_json({{"model_type", "electra"}}, "config.json");
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 12);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(c.max_position_embeddings, 512);
  // A BERT config without them is still an error (its keys are required there).
  EXPECT_THROW(EncoderConfig::from_json({{"model_type", "bert"}}, "config.json"), std::runtime_error);
}

// tfm encode on the folder: the WordPiece tokenizer's ids, the forward the reference.
TEST(ElectraCli, EncodeMatchesPyTorch) {
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", fixture("electra"), "--threads", "1", "--text",
                                   "A man in a blue shirt is standing on a ladder.", "-o", tmp.path + "/h.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto io = SafeTensors::open(fixture("electra/expected.safetensors"));
  const Tensor ids = io.get("input_ids_single");
  std::string want_ids = "input_ids: [";
  for (int64_t i = 0; i < ids.numel(); ++i) want_ids += (i ? ", " : "") + std::to_string(ids.i64()[i]);
  EXPECT_NE(r.out.find(want_ids + "]"), std::string::npos) << r.out;
  EXPECT_LE(max_abs_diff(load_npy(tmp.path + "/h.npy"), io.get("last_hidden_state_single")), kTol);
}

// tfm convert --dtype int8 / bf16: the converted folder (embeddings_project kept fp32 with the tables) encodes
// close to the fp32 reference.
TEST(ElectraCli, ConvertedFoldersEncodeCloseToTheReference) {
  TempFolder tmp;
  auto io = SafeTensors::open(fixture("electra/expected.safetensors"));
  for (const char* dtype : {"int8", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string out = tmp.path + "/" + dtype;
    TfmRun c = run_tfm_in(tmp.path, {"convert", "--model", fixture("electra"), "--dtype", dtype, "--out", out});
    ASSERT_EQ(c.exit_code, 0) << c.describe();
    TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", out, "--threads", "1", "--text",
                                     "A man in a blue shirt is standing on a ladder.", "-o", tmp.path + "/h.npy"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const Tensor want = io.get("last_hidden_state_single");
    EXPECT_GE(min_row_cosine(load_npy(tmp.path + "/h.npy"), want), std::string(dtype) == "int8" ? 0.999 : 0.9999);
  }
}

// The generator's masked-LM head is not one of ELECTRA's heads here: fine-tuning it is one line naming the tasks.
TEST(ElectraCli, MaskedLmFinetuningIsAOneLineError) {
  TempFolder tmp;
  test::spit(tmp.path + "/train.csv", "text\nthe cat sat on the mat\nthe dog is in the park\n");
  TfmRun r = run_tfm_in(tmp.path, {"finetune", "--task", "mlm", "--model", fixture("family_heads/electra_seqcls"),
                                   "--train", tmp.path + "/train.csv", "--out", tmp.path + "/o", "--no-progress"});
  test::expect_one_line_error(r, "masked LM (the generator) is not supported");
}
