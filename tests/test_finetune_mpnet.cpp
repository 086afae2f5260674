// Fine-tuning MPNet (issue 25): the trainable body (BertTrainable with detail::mpnet_variant, its relative position
// bias trained) against PyTorch: its forward equals MPNetModel's (make_mpnet_fixtures.py), and optimizer steps of
// sequence classification, token classification, masked LM and MultipleNegativesRankingLoss embeddings equal
// PyTorch autograd + the Hugging Face Trainer's AdamW on modeling_mpnet.py's models
// (scripts/make_finetune_mpnet_fixtures.py): the losses, every gradient (encoder.relative_attention_bias.weight
// included), the weights after the steps. Then `tfm finetune --task embed` on an all-mpnet-base-v2-layout folder
// trains as PyTorch does and writes a folder that tfm embed reloads to PyTorch's embeddings. The written *For*
// folders and the CLI for classify / token-classify / mlm are in tests/test_finetune_families.cpp (MPNet cases).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "finetune_test_util.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "models/mpnet.h"
#include "models/pooling.h"
#include "models/sentence_transformer.h"
#include "run_tfm.h"
#include "test_util.h"
#include "train/finetune.h"
#include "train/finetune_embed.h"

namespace tfm {
namespace {

using test::close_to;
using test::fixture;
using test::is_key_bias;

constexpr int64_t kPad = 1;  // MPNet's <pad>

PoolingConfig mean_pooling() {
  PoolingConfig p;
  p.mean = true;
  return p;
}

// The trainable body's forward (no dropout) is MPNetModel's: PyTorch's last_hidden_state of a padded batch and of
// a 60-token row (relative positions in the logarithmic buckets).
TEST(FinetuneMPNet, BodyForwardIsMPNetModel) {
  const EncoderConfig c = EncoderConfig::load(fixture("mpnet/config.json"));
  CheckpointWeights w(fixture("mpnet"));
  nn::ParamStore store;
  detail::BertVariant v = detail::mpnet_variant();
  v.prefix = "";
  BertTrainable body(store, c, v, /*pooler=*/true);
  store.finalize();
  body.load(store, w);
  EXPECT_GE(store.index_of("encoder.relative_attention_bias.weight"), 0);
  EXPECT_EQ(store.index_of("embeddings.token_type_embeddings.weight"), -1);
  const SafeTensors io = SafeTensors::open(fixture("mpnet/expected.safetensors"));
  nn::Context ctx;
  ctx.grad = true;
  {
    const Tensor ids = io.get("input_ids"), am = io.get("attention_mask");
    std::vector<float> mask(am.numel());
    for (int64_t i = 0; i < am.numel(); ++i) mask[i] = (float)am.i64()[i];
    body.forward(ctx, ids.i64(), nullptr, mask.data(), ids.size(0), ids.size(1));
    const Tensor want = io.get("last_hidden_state");
    const int64_t H = c.hidden_size;
    for (int64_t n = 0; n < ids.numel(); ++n)  // the real tokens (a pad row's output is not meaningful)
      if (mask[n] > 0) {
        EXPECT_TRUE(test::all_close(body.last_hidden_state() + n * H, want.f32() + n * H, H, 1e-4f)) << n;
      }
    EXPECT_TRUE(close_to(body.pooler_output(), io.get("pooler_output"), 1e-4));
  }
  {
    const Tensor ids = io.get("input_ids_long");
    body.forward(ctx, ids.i64(), nullptr, nullptr, ids.size(0), ids.size(1));
    EXPECT_TRUE(close_to(body.last_hidden_state(), io.get("last_hidden_state_long"), 1e-4));
  }
}

// The position bias and its backward: bias[h, i, j] = table[bucket(j - i), h]; the backward is the lookup's
// transpose (sum over the (i, j) of each bucket), checked against <dtable, t> = <dbias, bias(t)> for random
// tables, at a length with logarithmic buckets.
TEST(FinetuneMPNet, PositionBiasBackwardIsTheLookupsTranspose) {
  const int64_t heads = 3, L = 40, buckets = 32;
  const std::vector<float> t = test::random_vec(buckets * heads, 7), g = test::random_vec(heads * L * L, 8);
  std::vector<float> bias(heads * L * L), dtable(buckets * heads, 0.0f);
  detail::mpnet_position_bias(bias.data(), t.data(), heads, L);
  for (int64_t h = 0; h < heads; ++h)
    EXPECT_EQ(bias[(h * L + 5) * L + 2], t[detail::mpnet_relative_position_bucket(2 - 5) * heads + h]);
  detail::mpnet_position_bias_backward(dtable.data(), g.data(), heads, L);
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < buckets * heads; ++i) lhs += (double)dtable[i] * t[i];
  for (int64_t i = 0; i < heads * L * L; ++i) rhs += (double)g[i] * bias[i];
  EXPECT_NEAR(lhs, rhs, 1e-3 * std::fabs(rhs));
}

struct StepCase {
  const char* name;  // finetune_family/<name>_steps.safetensors, family_heads/<name>
  HeadKind kind;
  int64_t num_labels;
  const char* architecture;
};

void PrintTo(const StepCase& c, std::ostream* os) { *os << c.name; }

class FinetuneMPNetSteps : public ::testing::TestWithParam<StepCase> {};

TEST_P(FinetuneMPNetSteps, MatchPyTorch) {
  const StepCase& p = GetParam();
  const std::string name = p.name;
  const SafeTensors st = SafeTensors::open(fixture("finetune_family/" + name + "_steps.safetensors"));
  const nlohmann::json hj = load_json_file(fixture("finetune_family/" + name + "_hyper.json"));
  const EncoderConfig c = EncoderConfig::load(fixture("family_heads/" + name + "/config.json"));
  CheckpointWeights w(fixture("family_heads/" + name));
  auto t = test::make_finetune_trainer(p.kind, c, w, p.num_labels, test::hyperparameters_from_json(hj));
  EXPECT_EQ(t->architecture(), p.architecture);
  EXPECT_GE(t->params().index_of("mpnet.encoder.relative_attention_bias.weight"), 0);
  EXPECT_EQ(t->params().index_of("mpnet.pooler.dense.weight"), -1);
  EXPECT_TRUE(t->frozen_parameters().empty());
  test::check_finetune_steps(*t, st, hj["parameters"].get<int64_t>());
}

INSTANTIATE_TEST_SUITE_P(
    Heads, FinetuneMPNetSteps,
    ::testing::Values(StepCase{"mpnet_seqcls", HeadKind::SequenceClassification, 2, "MPNetForSequenceClassification"},
                      StepCase{"mpnet_tokcls", HeadKind::TokenClassification, 5, "MPNetForTokenClassification"},
                      StepCase{"mpnet_mlm", HeadKind::MaskedLM, 0, "MPNetForMaskedLM"}),
    [](const ::testing::TestParamInfo<StepCase>& i) { return std::string(i.param.name); });

// Central differences through the relative position bias (and a projection and the head) of a classification
// step, dropout off.
TEST(FinetuneMPNet, RelativeBiasGradientMatchesFiniteDifferences) {
  const SafeTensors st = SafeTensors::open(fixture("finetune_family/mpnet_seqcls_steps.safetensors"));
  const EncoderConfig c = EncoderConfig::load(fixture("family_heads/mpnet_seqcls/config.json"));
  CheckpointWeights w(fixture("family_heads/mpnet_seqcls"));
  FinetuneHyperparameters hp;
  hp.dropout = 0;
  SequenceClassificationTrainer t(c, w, 2, hp);
  test::check_finetune_finite_differences(t, test::finetune_batch_at(st, "step0.micro0."),
                                          {"mpnet.encoder.relative_attention_bias.weight",
                                           "mpnet.encoder.layer.0.attention.attn.q.weight", "classifier.dense.weight"});
}

// MultipleNegativesRankingLoss steps on the all-mpnet-base-v2-layout folder (mean pooling, Normalize): pairs, then
// triplets and pairs accumulated, then pairs.
TEST(FinetuneMPNet, EmbedStepsMatchPyTorch) {
  const SafeTensors st = SafeTensors::open(fixture("finetune_mpnet/embed_steps.safetensors"));
  const nlohmann::json hj = load_json_file(fixture("finetune_mpnet/embed_hyper.json"));
  const EncoderConfig c = EncoderConfig::load(fixture("mpnet/config.json"));
  CheckpointWeights w(fixture("mpnet"));
  SentenceEmbeddingTrainer t(c, w, mean_pooling(), /*normalize=*/true, EmbeddingLoss::MultipleNegativesRanking,
                             test::hyperparameters_from_json(hj), hj["scale"].get<double>());
  EXPECT_GE(t.params().index_of("encoder.relative_attention_bias.weight"), 0);
  test::check_trainer_steps(t, st, hj["parameters"].get<int64_t>(), {},
                            [&](const std::string& p) { return test::sentence_batch_at(st, p, kPad); });
  int pooler = 0;  // kept for saving, as loaded
  for (auto& [name, tensor] : t.state_dict())
    if (name.rfind("pooler.", 0) == 0) {
      ++pooler;
      const Tensor want = w.get(name, tensor.shape());
      EXPECT_EQ(std::memcmp(tensor.f32(), want.f32(), sizeof(float) * want.numel()), 0) << name;
    }
  EXPECT_EQ(pooler, 2);
}

// ---------------------------------------------------------------- the CLI

// tfm finetune --task embed on the folder with dropout 0 (the reference's): four epochs of one batch equal
// PyTorch's steps (train_log.csv, the written weights), and the folder reloads (SentenceTransformer, tfm embed) to
// the trained PyTorch model's embeddings.
TEST(FinetuneMPNetCli, EmbedTrainsAsPyTorchAndWritesAFolderThatReloads) {
  test::TempFolder t;
  nlohmann::json cfg = load_json_file(fixture("mpnet/config.json"));
  cfg["hidden_dropout_prob"] = 0.0;
  cfg["attention_probs_dropout_prob"] = 0.0;
  test::spit(t.path + "/config.json", cfg.dump(2));
  const std::string model = t.path + "/st", out = t.path + "/trained";
  test::link_folder(fixture("mpnet"), model, {{"config.json", t.path + "/config.json"}});
  const nlohmann::json hj = load_json_file(fixture("finetune_mpnet/e2e_hyper.json"));
  auto arg = [&](const char* key) {
    std::ostringstream s;
    s << hj[key].get<double>();
    return s.str();
  };
  test::TfmRun r = test::run_tfm_in(
      t.path, {"finetune", "--task", "embed", "--model", model, "--train", fixture("finetune_mpnet/e2e_train.jsonl"),
               "--out", out, "--epochs", "4", "--batch-size", "2", "--lr", arg("learning_rate"), "--weight-decay",
               arg("weight_decay"), "--warmup-steps", arg("warmup_steps"), "--max-grad-norm", arg("max_grad_norm"),
               "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const SafeTensors e2e = SafeTensors::open(fixture("finetune_mpnet/e2e_steps.safetensors"));
  std::string header;
  const auto rows = test::csv_rows(out + "/train_log.csv", &header);
  ASSERT_EQ(rows.size(), 4u);
  const Tensor loss = e2e.get("micro_loss"), lr = e2e.get("lr"), norm = e2e.get("grad_norm");
  for (int k = 0; k < 4; ++k) {
    EXPECT_NEAR(rows[k][2], loss.f32()[k], 1e-5 * loss.f32()[k]) << "epoch " << k + 1;
    EXPECT_NEAR(rows[k][3], lr.f32()[k], 1e-9) << "epoch " << k + 1;
    EXPECT_NEAR(rows[k][4], norm.f32()[k], 1e-4 * norm.f32()[k]) << "epoch " << k + 1;
  }
  // MPNetModel's names, PyTorch's values after the steps (the relative position bias moved); the pooler as it was.
  const SafeTensors saved = SafeTensors::open(out + "/model.safetensors");
  const SafeTensors orig = SafeTensors::open(fixture("mpnet/model.safetensors"));
  int compared = 0;
  for (const std::string& name : orig.names()) {
    if (name == "embeddings.position_ids") continue;  // an int64 buffer, not a parameter
    ASSERT_TRUE(saved.has(name)) << name;
    const Tensor got = saved.get(name);
    if (name.rfind("pooler.", 0) == 0) {
      EXPECT_EQ(std::memcmp(got.f32(), orig.get(name).f32(), sizeof(float) * got.numel()), 0) << name;
    } else if (!is_key_bias(name)) {
      EXPECT_TRUE(close_to(got.f32(), e2e.get("final." + name), 5e-5)) << name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, hj["parameters"].get<int>() - 2);
  const Tensor rel0 = orig.get("encoder.relative_attention_bias.weight");
  const Tensor rel1 = saved.get("encoder.relative_attention_bias.weight");
  EXPECT_NE(std::memcmp(rel0.f32(), rel1.f32(), sizeof(float) * rel0.numel()), 0);
  EXPECT_EQ(load_json_file(out + "/config.json")["model_type"], "mpnet");

  const SentenceTransformer m = SentenceTransformer::load(out);
  EXPECT_EQ(m.describe(), SentenceTransformer::load(fixture("mpnet")).describe());
  std::vector<std::string> sentences;
  std::ifstream sf(fixture("mpnet/sentences.txt"));
  for (std::string line; std::getline(sf, line);) sentences.push_back(line);
  const Tensor emb = m.encode(sentences);
  EXPECT_TRUE(close_to(emb.f32(), e2e.get("embeddings"), 1e-4));
  test::TfmRun e =
      test::run_tfm_in(t.path, {"embed", "--model", out, "--input", fixture("mpnet/sentences.txt"), "--quiet"});
  ASSERT_EQ(e.exit_code, 0) << e.describe();
  EXPECT_EQ(std::count(e.out.begin(), e.out.end(), '\n'), (long)sentences.size());
}

}  // namespace
}  // namespace tfm
