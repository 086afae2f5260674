// Fine-tuning sentence embeddings (issue 25, tfm finetune --task embed): steps of MultipleNegativesRankingLoss and
// CosineSimilarityLoss training against PyTorch autograd + the Trainer's AdamW (scripts/
// make_finetune_embed_fixtures.py, written from sentence-transformers' losses and modules), finite-difference
// checks of the new backward passes, and the CLI writing a folder that tfm embed loads. Also folders around RoBERTa
// and DistilBERT bodies (scripts/make_finetune_embed_family_fixtures.py); MPNet's and ModernBERT's steps are in
// their families' files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "models/sentence_transformer.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "run_tfm.h"
#include "finetune_test_util.h"
#include "test_util.h"
#include "train/finetune_embed.h"

namespace tfm {
namespace {

using test::close_to;
using test::fixture;
using test::is_key_bias;

const SafeTensors& steps() {
  static const SafeTensors st = SafeTensors::open(fixture("finetune_embed/steps.safetensors"));
  return st;
}

FinetuneHyperparameters hyper(const std::string& which) {
  return test::hyperparameters_from_json(load_json_file(fixture("finetune_embed/hyper.json"))[which]);
}

// The columns of fixture batch k (each padded on its own, as sentence-transformers runs them) padded into one.
SentenceBatch batch_at(const std::string& p);
SentenceBatch batch_of(const std::string& run, int k) { return batch_at(run + ".batch" + std::to_string(k) + "."); }
// Micro-batch j of step k of a gradient-accumulation run.
SentenceBatch micro_batch_of(const std::string& run, int k, int j) {
  return batch_at(run + ".batch" + std::to_string(k) + ".micro" + std::to_string(j) + ".");
}

// The batch whose tensors' names start with p ("R.batchK." or "R.batchK.microJ."), [PAD] = 0.
SentenceBatch batch_at(const std::string& p) { return test::sentence_batch_at(steps(), p, 0); }

// Runs fixture run `run` step by step: the first step's loss and every gradient, then every step's loss and
// learning rate, and every parameter after the last step.
void check_run(const std::string& run, const PoolingConfig& pooling, bool normalize, EmbeddingLoss loss, int K) {
  const EncoderConfig c = EncoderConfig::load(fixture("st_mean/config.json"));
  CheckpointWeights w(fixture("st_mean"));
  SentenceEmbeddingTrainer t(c, w, pooling, normalize, loss, hyper("steps"));
  Tensor losses = steps().get(run + ".loss"), norm = steps().get(run + ".grad_norm"), lr = steps().get(run + ".lr");
  ASSERT_EQ(losses.numel(), K);
  for (int k = 0; k < K; ++k) {
    const SentenceBatch b = batch_of(run, k);
    // The loss and the gradient norm before clipping, every step; every gradient of the first.
    const double l = t.compute_gradients(b, /*dropout=*/false);
    EXPECT_NEAR(l, losses.f32()[k], 1e-5 * std::fabs(losses.f32()[k]) + 1e-7) << run << " step " << k;
    EXPECT_NEAR(grad_norm(t.params()), norm.f32()[k], 1e-4 * norm.f32()[k]) << run << " step " << k;
    if (k == 0) {
      int checked = 0;
      for (const auto& e : t.params().entries()) {
        const float* g = t.params().all_grad().data() + e.offset;
        if (is_key_bias(e.name)) {
          for (int64_t i = 0; i < e.numel; ++i) EXPECT_LE(std::fabs(g[i]), 1e-6f) << e.name;
        } else {
          EXPECT_TRUE(close_to(g, steps().get(run + ".step0.grad." + e.name), 5e-5)) << run << " " << e.name;
        }
        ++checked;
      }
      EXPECT_EQ(checked, 5 + 2 * 16);  // the embeddings (3 tables + LayerNorm) and two layers of 16 tensors
    }
    EXPECT_DOUBLE_EQ(t.train_step(b), l) << run << " step " << k;  // no dropout: the same forward again
    EXPECT_NEAR(t.last_lr(), lr.f32()[k], 1e-9) << run << " step " << k;
  }
  for (const auto& e : t.params().entries()) {
    if (is_key_bias(e.name)) continue;  // Adam turns their rounding-noise gradients into steps of +-lr
    EXPECT_TRUE(close_to(t.params().all_data().data() + e.offset, steps().get(run + ".final." + e.name), 5e-5))
        << run << " " << e.name;
  }
  // The pooler is kept for saving, untouched.
  int pooler = 0;
  for (auto& [name, tensor] : t.state_dict())
    if (name.rfind("pooler.", 0) == 0) {
      ++pooler;
      Tensor want = w.get(name, tensor.shape());
      EXPECT_EQ(std::memcmp(tensor.f32(), want.f32(), sizeof(float) * want.numel()), 0) << name;
    }
  EXPECT_EQ(pooler, 2);
}

TEST(FinetuneEmbed, MultipleNegativesRankingStepsMatchPyTorch) {
  // Mean pooling + Normalize (st_mean's modules), pairs, then triplets with a hard negative, then pairs.
  check_run("mnrl", PoolingConfig::from_names("mean"), true, EmbeddingLoss::MultipleNegativesRanking, 3);
}

TEST(FinetuneEmbed, CosineSimilarityStepsMatchPyTorch) {
  check_run("cosine", PoolingConfig::from_names("mean"), true, EmbeddingLoss::CosineSimilarity, 2);
}

TEST(FinetuneEmbed, ClsPoolingWithoutNormalizeMatchesPyTorch) {
  check_run("cls", PoolingConfig::from_names("cls"), false, EmbeddingLoss::MultipleNegativesRanking, 2);
}

// Gradient accumulation as the Trainer does it: each micro-batch's loss divided by their number (every
// micro-batch with its own in-batch negatives), the gradients summed, one clipped AdamW step.
TEST(FinetuneEmbed, GradientAccumulationStepsMatchPyTorch) {
  const EncoderConfig c = EncoderConfig::load(fixture("st_mean/config.json"));
  CheckpointWeights w(fixture("st_mean"));
  SentenceEmbeddingTrainer t(c, w, PoolingConfig::from_names("mean"), true, EmbeddingLoss::MultipleNegativesRanking,
                             hyper("steps"));
  const Tensor losses = steps().get("accum.loss"), lr = steps().get("accum.lr");
  for (int k = 0; k < 2; ++k) {
    t.params().zero_grad();
    double loss = 0;
    for (int j = 0; j < 2; ++j) loss += t.accumulate_gradients(micro_batch_of("accum", k, j), 0.5f, false) / 2;
    EXPECT_NEAR(loss, losses.f32()[k], 1e-5 * std::fabs(losses.f32()[k]) + 1e-7) << "step " << k;
    t.optimizer().step(t.params());
    EXPECT_NEAR(t.last_lr(), lr.f32()[k], 1e-9) << "step " << k;
  }
  for (const auto& e : t.params().entries()) {
    if (!is_key_bias(e.name)) {
      EXPECT_TRUE(close_to(t.params().all_data().data() + e.offset, steps().get("accum.final." + e.name), 5e-5))
          << e.name;
    }
  }
}

// --precision bf16: the Transformer's products in bf16, fp32 master weights: steps close to fp32's.
TEST(FinetuneEmbed, Bf16StepsStayCloseToFp32) {
  if (!ops::bf16_gemm_available()) GTEST_SKIP() << "no bf16 instructions on this CPU (" << ops::cpu_isa_name() << ")";
  const EncoderConfig c = EncoderConfig::load(fixture("st_mean/config.json"));
  CheckpointWeights w(fixture("st_mean"));
  auto make = [&] {
    return std::make_unique<SentenceEmbeddingTrainer>(c, w, PoolingConfig::from_names("mean"), true,
                                                      EmbeddingLoss::MultipleNegativesRanking, hyper("steps"));
  };
  auto f32 = make(), b16 = make();
  b16->set_precision(ops::ComputeType::BF16);
  EXPECT_THROW(b16->set_precision(ops::ComputeType::I8), std::invalid_argument);
  for (int k = 0; k < 3; ++k) {
    const SentenceBatch b = batch_of("mnrl", k);
    const double l32 = f32->train_step(b), l16 = b16->train_step(b);
    EXPECT_NEAR(l16, l32, 0.02 * std::fabs(l32) + 1e-3) << "step " << k;
    EXPECT_NE(l16, l32) << "bf16 products round differently";
  }
  double diff = 0, scale = 0;
  for (size_t i = 0; i < f32->params().all_data().size(); ++i) {
    diff = std::max(diff, (double)std::fabs(f32->params().all_data()[i] - b16->params().all_data()[i]));
    scale = std::max(scale, (double)std::fabs(f32->params().all_data()[i]));
  }
  EXPECT_LE(diff, 0.02 * scale);
}

// d(loss)/d(input) of loss(x) against central differences at about 60 coordinates (double accumulation inside the
// losses keeps float noise well below the tolerance).
template <class F>
void expect_gradient(const std::string& what, std::vector<float> x, const std::vector<float>& grad, F loss) {
  test::expect_gradient(x, grad, [&] { return loss(x); }, what, {1e-2, 2e-3, 2e-3, true, 1 + x.size() / 60});
}

TEST(FinetuneEmbed, NewBackwardsMatchFiniteDifferences) {
  const int64_t B = 3, D = 8;
  {  // MultipleNegativesRankingLoss with a negative column, scale 20
    std::vector<float> e = test::random_vec(3 * B * D, 11), g(e.size()), scratch(e.size());
    multiple_negatives_ranking_loss(e.data(), B, 3, D, 20.0, g.data());
    expect_gradient("mnrl", e, g, [&](const std::vector<float>& x) {
      return multiple_negatives_ranking_loss(x.data(), B, 3, D, 20.0, scratch.data());
    });
  }
  {  // CosineSimilarityLoss
    std::vector<float> e = test::random_vec(2 * B * D, 12), g(e.size()), scratch(e.size());
    const std::vector<float> s = {0.9f, -0.2f, 0.4f};
    cosine_similarity_loss(e.data(), s.data(), B, D, g.data());
    expect_gradient("cosine", e, g, [&](const std::vector<float>& x) {
      return cosine_similarity_loss(x.data(), s.data(), B, D, scratch.data());
    });
  }
  // Pooling (every mode at once, with padding) followed by Normalize, under a fixed random projection.
  const int64_t N = 2, L = 4, H = 5;
  const PoolingConfig pc = PoolingConfig::from_names("cls+max+mean+mean_sqrt_len+weightedmean+lasttoken");
  const int64_t P = pc.output_dim(H);
  const std::vector<float> mask = {1, 1, 1, 0, 1, 1, 0, 0};
  const std::vector<float> proj = test::random_vec(N * P, 13);
  auto head = [&](const std::vector<float>& h, std::vector<float>* dh) {
    std::vector<float> pooled(N * P), y(N * P), norms(N);
    pooling_forward(pc, h.data(), mask.data(), N, L, H, pooled.data());
    l2_normalize_forward(y.data(), norms.data(), pooled.data(), N, P, 1e-12f);
    double v = 0;
    for (int64_t i = 0; i < N * P; ++i) v += (double)proj[i] * y[i];
    if (dh) {
      std::vector<float> dy = proj;
      l2_normalize_backward(dy.data(), dy.data(), y.data(), norms.data(), N, P, 1e-12f);
      dh->resize(N * L * H);
      pooling_backward(pc, dy.data(), h.data(), mask.data(), N, L, H, dh->data());
    }
    return v;
  };
  const std::vector<float> h = test::random_vec(N * L * H, 14, -2.0f, 2.0f);
  std::vector<float> dh;
  head(h, &dh);
  expect_gradient("pooling + normalize", h, dh, [&](const std::vector<float>& x) { return head(x, nullptr); });
  for (int64_t k = 0; k < H; ++k) EXPECT_EQ(dh[(0 * L + 3) * H + k], 0.0f);  // padding gets no gradient
}

TEST(FinetuneEmbed, PoolingForwardIsTheInferencePooling) {
  // The training pooling equals models/pooling.h pool() (tested against sentence-transformers).
  const Tensor want = SafeTensors::open(fixture("st_mean/expected.safetensors")).get("pool_all");
  const SafeTensors ex = SafeTensors::open(fixture("st_mean/expected.safetensors"));
  const Tensor h = ex.get("last_hidden_state"), m = ex.get("attention_mask");
  const int64_t N = h.size(0), L = h.size(1), H = h.size(2);
  std::vector<float> mask(N * L);
  for (int64_t i = 0; i < N * L; ++i) mask[i] = (float)m.i64()[i];
  const PoolingConfig pc = PoolingConfig::from_names("cls+max+mean+mean_sqrt_len+weightedmean+lasttoken");
  std::vector<float> out(N * pc.output_dim(H));
  pooling_forward(pc, h.f32(), mask.data(), N, L, H, out.data());
  EXPECT_TRUE(test::all_close(out.data(), want.f32(), out.size(), 1e-5f));
}

TEST(FinetuneEmbed, RefusesBatchesItCannotTrain) {
  const EncoderConfig c = EncoderConfig::load(fixture("st_mean/config.json"));
  CheckpointWeights w(fixture("st_mean"));
  SentenceEmbeddingTrainer mnrl(c, w, PoolingConfig::from_names("mean"), true, EmbeddingLoss::MultipleNegativesRanking,
                                FinetuneHyperparameters{});
  SentenceBatch one;
  one.B = 2;
  one.columns = 1;
  one.L = 2;
  one.input_ids = {2, 3, 2, 3};
  one.attention_mask = {1, 1, 1, 1};
  EXPECT_THROW(mnrl.train_step(one), std::invalid_argument);  // no positives
  SentenceEmbeddingTrainer cos(c, w, PoolingConfig::from_names("mean"), true, EmbeddingLoss::CosineSimilarity,
                               FinetuneHyperparameters{});
  SentenceBatch pair = one;
  pair.B = 1;
  pair.columns = 2;
  EXPECT_THROW(cos.train_step(pair), std::invalid_argument);  // no scores
  pair.input_ids.pop_back();
  EXPECT_THROW(mnrl.train_step(pair), std::invalid_argument);  // ids do not match [rows, L]
}

// ---------------------------------------------------------------- the CLI

// st_mean with dropout 0 (the reference's), as links.
std::string no_dropout_copy(const std::string& dir) {
  nlohmann::json cfg = load_json_file(fixture("st_mean/config.json"));
  cfg["hidden_dropout_prob"] = 0.0;
  cfg["attention_probs_dropout_prob"] = 0.0;
  test::spit(dir + "/config.json", cfg.dump(2));
  test::link_folder(fixture("st_mean"), dir + "/st", {{"config.json", dir + "/config.json"}});
  return dir + "/st";
}

using test::csv_rows;

TEST(FinetuneEmbedCli, TrainsAsPyTorchAndWritesAFolderThatTfmEmbedLoads) {
  test::TempFolder t;
  const std::string model = no_dropout_copy(t.path), out = t.path + "/trained";
  const nlohmann::json hp = load_json_file(fixture("finetune_embed/hyper.json"))["e2e"];
  // Anchors and positives as eval data too: every anchor's own positive is its paraphrase among the eval positives.
  test::TfmRun r = test::run_tfm_in(
      t.path, {"finetune", "--task", "embed", "--model", model, "--train", fixture("finetune_embed/e2e_train.csv"),
               "--out", out, "--epochs", "3", "--batch-size", "4", "--lr", "1e-3", "--weight-decay", "0.01",
               "--warmup-steps", "1", "--max-grad-norm", std::to_string((double)hp["max_grad_norm"])});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("MultipleNegativesRankingLoss; 3 steps on 4 examples"), std::string::npos) << r.err;
  for (const char* f : {"modules.json", "1_Pooling/config.json", "2_Normalize", "config.json", "model.safetensors",
                        "vocab.txt", "tokenizer_config.json", "sentence_bert_config.json",
                        "config_sentence_transformers.json", "train_log.csv"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  // train_log.csv: a row per step (one an epoch), as the other tasks'.
  std::string header;
  const auto rows = csv_rows(out + "/train_log.csv", &header);
  EXPECT_EQ(header, "step,epoch,loss,lr,grad_norm,eval_loss,eval_accuracy,eval_mrr");
  const Tensor loss = steps().get("e2e.loss"), lr = steps().get("e2e.lr");
  ASSERT_EQ(rows.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(rows[k][2], loss.f32()[k], 1e-5 * loss.f32()[k]) << "epoch " << k + 1;
    EXPECT_NEAR(rows[k][3], lr.f32()[k], 1e-9) << "epoch " << k + 1;
  }
  // The weights: Hugging Face BertModel names, equal to PyTorch's after three steps; the pooler as it was.
  const SafeTensors saved = SafeTensors::open(out + "/model.safetensors");
  const SafeTensors orig = SafeTensors::open(fixture("st_mean/model.safetensors"));
  int compared = 0;
  for (const std::string& name : orig.names()) {
    ASSERT_TRUE(saved.has(name)) << name;
    const Tensor got = saved.get(name);
    if (name.rfind("pooler.", 0) == 0) {
      EXPECT_EQ(std::memcmp(got.f32(), orig.get(name).f32(), sizeof(float) * got.numel()), 0) << name;
    } else if (!is_key_bias(name)) {
      EXPECT_TRUE(close_to(got.f32(), steps().get("e2e.final." + name), 5e-5)) << name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 37 - 2);
  EXPECT_EQ(saved.names().size(), orig.names().size());
  // The folder loads for inference and embeds as the trained PyTorch model does (key biases aside, which shift
  // every score of a query row alike and so cannot change an embedding).
  const SentenceTransformer m = SentenceTransformer::load(out);
  EXPECT_EQ(m.describe(), SentenceTransformer::load(fixture("st_mean")).describe());
  std::vector<std::string> sentences;
  std::ifstream sf(fixture("finetune_embed/e2e_sentences.txt"));
  for (std::string line; std::getline(sf, line);) sentences.push_back(line);
  const Tensor emb = m.encode(sentences);
  EXPECT_TRUE(close_to(emb.f32(), steps().get("e2e.embeddings"), 1e-4));
  // tfm embed reads it.
  test::TfmRun e = test::run_tfm_in(t.path, {"embed", "--model", out, "--input",
                                             fixture("finetune_embed/e2e_sentences.txt"), "--quiet"});
  ASSERT_EQ(e.exit_code, 0) << e.describe();
  EXPECT_EQ(std::count(e.out.begin(), e.out.end(), '\n'), (long)sentences.size());
}

TEST(FinetuneEmbedCli, EvaluatesRetrievalAndScoredPairs) {
  test::TempFolder t;
  // Eval anchors equal to their positives: each is its own nearest positive, accuracy@1 and MRR 1.
  test::spit(t.path + "/same.jsonl",
             "{\"anchor\": \"the cat sat on the mat.\", \"positive\": \"the cat sat on the mat.\"}\n"
             "{\"anchor\": \"paris is the capital of france.\", \"positive\": \"paris is the capital of france.\"}\n"
             "{\"anchor\": \"two men are playing football\", \"positive\": \"two men are playing football\"}\n");
  test::TfmRun r = test::run_tfm_in(
      t.path, {"finetune", "--task", "embed", "--model", fixture("st_mean"), "--train",
               fixture("finetune_embed/e2e_train.csv"), "--eval", t.path + "/same.jsonl", "--out", t.path + "/o",
               "--epochs", "2", "--batch-size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("eval_accuracy 1.0000  eval_mrr 1.0000"), std::string::npos) << r.err;  // accuracy@1, MRR
  // Scored pairs: CosineSimilarityLoss, Spearman of the similarities with the scores.
  test::spit(t.path + "/sts.csv",
             "sentence1,sentence2,score\n"
             "the cat sat on the mat.,a cat is on the mat,0.9\n"
             "the dog is in the park,paris is the capital of france.,0.1\n"
             "two men are playing football,men playing football,0.8\n"
             "hello,what time is it?,0.0\n");
  r = test::run_tfm_in(t.path, {"finetune", "--task", "embed", "--model", fixture("st_mean"), "--train",
                                t.path + "/sts.csv", "--eval", t.path + "/sts.csv", "--out", t.path + "/sts",
                                "--epochs", "2", "--batch-size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("CosineSimilarityLoss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("eval_spearman 1.0000"), std::string::npos) << r.err;
  std::string header;
  const auto rows = csv_rows(t.path + "/sts/train_log.csv", &header);
  EXPECT_EQ(header, "step,epoch,loss,lr,grad_norm,eval_loss,eval_spearman");
  ASSERT_EQ(rows.size(), 4u);  // 2 steps an epoch; the eval columns on each epoch's last
  EXPECT_TRUE(rows[2].size() < 7 || std::isnan(rows[2][6]));
  EXPECT_GE(rows[3][6], -1.0);
  EXPECT_LE(rows[3][6], 1.0);
}

TEST(FinetuneEmbedCli, BadDataAndFoldersAreOneLineErrors) {
  test::TempFolder t;
  const std::string m = fixture("st_mean");
  auto run = [&](const std::string& model, const std::string& train, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"finetune", "--task", "embed", "--model", model, "--train", train,
                                     "--out", t.path + "/o", "--no-progress"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_tfm_in(t.path, args);
  };
  test::spit(t.path + "/text.csv", "text,label\nthe cat,pos\n");
  test::expect_one_line_error(run(m, t.path + "/text.csv"), "needs columns anchor, positive [, negative]");
  test::spit(t.path + "/empty.csv", "anchor,positive\nthe cat,\n");
  test::expect_one_line_error(run(m, t.path + "/empty.csv"), "line 2: empty positive");
  test::spit(t.path + "/score.csv", "sentence1,sentence2,score\na,b,high\n");
  test::expect_one_line_error(run(m, t.path + "/score.csv"), "score 'high' is not a finite number");
  const std::string pairs = fixture("finetune_embed/e2e_train.csv");
  test::expect_one_line_error(run(m, pairs, {"--batch-size", "1"}), "at least 2");
  test::expect_one_line_error(run(m, pairs, {"--eval", t.path + "/score.csv"}), "other columns");
  test::expect_one_line_error(run(fixture("st_multi"), pairs), "Dense");
  test::expect_one_line_error(run(fixture("heads_seqcls"), pairs), "not a sentence-transformers folder");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));  // nothing written on failure
}

// ---------------------------------------------------------------- RoBERTa and DistilBERT bodies

// sentence-transformers folders around RoBERTa (position ids from padding_idx, <pad> 1) and DistilBERT bodies
// (mean pooling, Normalize), written by scripts/make_finetune_embed_family_fixtures.py with the expected steps.
class FinetuneEmbedFamilySteps : public ::testing::TestWithParam<const char*> {};

// MultipleNegativesRankingLoss steps: pairs, then triplets and pairs accumulated, then pairs; every micro-batch's
// loss, every gradient of the first step, the norms and rates, every parameter after AdamW with warmup.
TEST_P(FinetuneEmbedFamilySteps, MultipleNegativesRankingStepsMatchPyTorch) {
  const std::string name = GetParam(), dir = fixture("finetune_embed_family/" + name);
  const SafeTensors st = SafeTensors::open(fixture("finetune_embed_family/" + name + "_steps.safetensors"));
  const nlohmann::json hj = load_json_file(fixture("finetune_embed_family/" + name + "_hyper.json"));
  const SentenceTransformerLayout lay = read_sentence_transformer_layout(dir);
  ASSERT_TRUE(lay.has_pooling && lay.normalize);
  EXPECT_TRUE(lay.pooling.mean);
  const EncoderConfig c = EncoderConfig::load(dir + "/config.json");
  EXPECT_EQ(c.model_type, name);
  CheckpointWeights w(dir);
  SentenceEmbeddingTrainer t(c, w, lay.pooling, lay.normalize, EmbeddingLoss::MultipleNegativesRanking,
                             test::hyperparameters_from_json(hj), hj["scale"].get<double>());
  // The base model's names, as the folder stores them (no "roberta." / "distilbert." prefix).
  EXPECT_GE(t.params().index_of("embeddings.word_embeddings.weight"), 0);
  const int64_t pad = hj["pad_id"].get<int64_t>();
  EXPECT_EQ(pad, c.pad_token_id);
  test::check_trainer_steps(t, st, hj["parameters"].get<int64_t>(), {},
                            [&](const std::string& p) { return test::sentence_batch_at(st, p, pad); });
}

INSTANTIATE_TEST_SUITE_P(Families, FinetuneEmbedFamilySteps, ::testing::Values("roberta", "distilbert"));

// tfm finetune --task embed on each folder writes a sentence-transformers folder with the same tensor names that
// SentenceTransformer (tfm embed's loader) reloads to the trainer's embeddings of the written weights.
TEST(FinetuneEmbedFamiliesCli, RobertaAndDistilbertFoldersTrainAndReload) {
  test::TempFolder t;
  test::spit(t.path + "/pairs.csv",
             "anchor,positive\nthe cat sat on the mat,a cat is on the mat\nthe dog is in the park,a dog in the park\n"
             "people live in london,london has people\nthe man has a red car,a red car\n");
  const std::vector<std::string> texts = {"the cat sat on the mat", "people live in london", "a red car"};
  for (const char* name : {"roberta", "distilbert"}) {
    const std::string model = fixture(std::string("finetune_embed_family/") + name), out = t.path + "/" + name;
    test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--task", "embed", "--model", model, "--train",
                                               t.path + "/pairs.csv", "--out", out, "--epochs", "2", "--batch-size",
                                               "4", "--lr", "1e-3", "--threads", "1", "--no-progress"});
    ASSERT_EQ(r.exit_code, 0) << name << " " << r.describe();
    EXPECT_NE(r.err.find("MultipleNegativesRankingLoss; 2 steps on 4 examples"), std::string::npos) << r.err;
    const SafeTensors saved = SafeTensors::open(out + "/model.safetensors"),
                      orig = SafeTensors::open(model + "/model.safetensors");
    EXPECT_EQ(saved.names(), orig.names()) << name;
    int moved = 0;
    for (const std::string& n : orig.names())
      moved += std::memcmp(saved.get(n).f32(), orig.get(n).f32(), sizeof(float) * orig.get(n).numel()) != 0;
    EXPECT_GT(moved, (int)orig.names().size() / 2) << name;

    EXPECT_EQ(SentenceTransformer::load(out).describe(), SentenceTransformer::load(model).describe());
    EXPECT_TRUE(test::embeds_as_its_trainer(out, texts)) << name;
  }
}

}  // namespace
}  // namespace tfm
