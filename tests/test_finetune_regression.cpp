// Regression fine-tuning (issue 25): `tfm finetune --task classify` with num_labels 1 and problem_type
// "regression", as transformers' *ForSequenceClassification trains it (MSELoss()(logits.squeeze(), labels)) and
// run_glue.py reads a float label column. Optimizer steps equal PyTorch autograd + the Trainer
// (scripts/make_finetune_family_fixtures.py: roberta_regression, distilbert_regression); the CLI writes a folder
// with problem_type "regression" and id2label {0: "LABEL_0"} whose raw scores tfm classify prints (the
// text-classification pipeline applies no function for regression) and which reproduce the trainer's eval;
// a non-numeric label under regression is a one-line error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "finetune_test_util.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "run_tfm.h"
#include "test_util.h"
#include "tfm/finetune.h"
#include "train/finetune.h"

namespace tfm {
namespace {

using test::fixture;

// The fixture's trainer: num_labels 1 on the family_heads folder, the one-output head's tensors ("init" in the
// hyperparameters) replaced by the script's (the folder's head has more labels: from_pretrained would draw a new
// one at random).
std::unique_ptr<SequenceClassificationTrainer> regression_trainer(const std::string& name, nlohmann::json* hyper,
                                                                  const SafeTensors& st) {
  *hyper = load_json_file(fixture("finetune_family/" + name + "_hyper.json"));
  const std::string model = fixture("family_heads/" + (*hyper)["model"].get<std::string>());
  const EncoderConfig c = EncoderConfig::load(model + "/config.json");
  CheckpointWeights w(model);
  auto t = std::make_unique<SequenceClassificationTrainer>(c, w, 1, test::hyperparameters_from_json(*hyper));
  EXPECT_TRUE(t->regression());
  const auto init = (*hyper)["init"].get<std::vector<std::string>>();
  EXPECT_EQ(init.size(), 2u);
  for (const std::string& n : init) {
    const Tensor v = st.get("init." + n);
    const int64_t e = t->params().index_of(n);
    EXPECT_GE(e, 0) << n;
    if (e < 0) continue;
    EXPECT_EQ(t->params().entries()[e].numel, v.numel()) << n;
    std::copy(v.f32(), v.f32() + v.numel(), t->params().data(e));
  }
  return t;
}

class FinetuneRegressionSteps : public ::testing::TestWithParam<const char*> {};

// Loss of every micro-batch, every gradient of the first step, gradient norms, rates and every parameter after
// three AdamW steps with warmup, clipping and accumulation.
TEST_P(FinetuneRegressionSteps, MatchPyTorch) {
  const std::string name = GetParam();
  const SafeTensors st = SafeTensors::open(fixture("finetune_family/" + name + "_steps.safetensors"));
  nlohmann::json hj;
  auto t = regression_trainer(name, &hj, st);
  EXPECT_EQ(test::finetune_batch_at(st, "step0.micro0.").targets.size(), 3u);  // float labels read as targets
  test::check_finetune_steps(*t, st, hj["parameters"].get<int64_t>());
}

INSTANTIATE_TEST_SUITE_P(Families, FinetuneRegressionSteps,
                         ::testing::Values("roberta_regression", "distilbert_regression"));

// Central differences of the mean squared error through the one-output head and into the body.
TEST(FinetuneRegression, BackwardMatchesFiniteDifferences) {
  const SafeTensors st = SafeTensors::open(fixture("finetune_family/roberta_regression_steps.safetensors"));
  nlohmann::json hj;
  auto t = regression_trainer("roberta_regression", &hj, st);
  test::check_finetune_finite_differences(*t, test::finetune_batch_at(st, "step0.micro0."),
                                          {"classifier.out_proj.weight", "classifier.out_proj.bias",
                                           "classifier.dense.weight", "roberta.embeddings.word_embeddings.weight"});
}

TEST(FinetuneRegression, BatchesWithoutTargetsAreRefused) {
  const SafeTensors st = SafeTensors::open(fixture("finetune_family/roberta_regression_steps.safetensors"));
  nlohmann::json hj;
  auto t = regression_trainer("roberta_regression", &hj, st);
  FinetuneBatch b = test::finetune_batch_at(st, "step0.micro0.");
  b.targets.pop_back();
  EXPECT_THROW(t->compute_gradients(b, false), std::invalid_argument);
  b = test::finetune_batch_at(st, "step0.micro0.");
  b.targets[1] = NAN;
  try {
    t->compute_gradients(b, false);
    ADD_FAILURE() << "a NaN target was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is not finite"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- the CLI

// A score the tiny model can learn: the sentiment word sets it (good 4.5, bad 0.5, a little per subject), as an
// STS-B-like column of floats. Words of heads_seqcls/vocab.txt.
void write_regression_task(const std::string& dir) {
  const char* subjects[] = {"the cat", "the dog", "the man", "the house", "the park", "the car", "people", "london"};
  std::ostringstream train, eval;
  train << "text,label\n";
  eval << "text,label\n";
  int i = 0;
  for (const char* s : subjects) {
    for (const char* f : {"is", "is very", "has a"}) {
      const double jitter = 0.1 * (i++ % 3);
      train << s << ' ' << f << " good," << 4.5 - jitter << "\n";
      train << s << ' ' << f << " bad," << 0.5 + jitter << "\n";
    }
  }
  for (const char* s : {"football", "paris", "the blue car"}) {
    eval << s << " is good,4.0\n";
    eval << s << " is bad,1.0\n";
  }
  test::spit(dir + "/train.csv", train.str());
  test::spit(dir + "/eval.csv", eval.str());
}

double pearson_of(const std::vector<double>& a, const std::vector<double>& b) {
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i] / (double)a.size(), mb += b[i] / (double)b.size();
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += (a[i] - ma) * (b[i] - mb);
    aa += (a[i] - ma) * (a[i] - ma);
    bb += (b[i] - mb) * (b[i] - mb);
  }
  return ab / std::sqrt(aa * bb);
}

// A float label column trains a regression (no option needed, as run_glue.py); the folder is Hugging Face's
// regression layout; tfm classify prints raw scores whose MSE and Pearson correlation on the eval file are the
// best epoch's logged ones.
TEST(FinetuneRegressionCli, FloatLabelsTrainARegressionThatTfmClassifyScores) {
  test::TempFolder t;
  write_regression_task(t.path);
  const std::string out = t.path + "/score";
  test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                             t.path + "/train.csv", "--eval", t.path + "/eval.csv", "--out", out,
                                             "--epochs", "10", "--batch-size", "8", "--lr", "1e-2", "--seed", "3",
                                             "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("regression, MSELoss"), std::string::npos) << r.err;
  const nlohmann::json cfg = load_json_file(out + "/config.json");
  EXPECT_EQ(cfg["architectures"], nlohmann::json::array({"BertForSequenceClassification"}));
  EXPECT_EQ(cfg["problem_type"], "regression");
  EXPECT_EQ(cfg["id2label"], nlohmann::json({{"0", "LABEL_0"}}));
  EXPECT_EQ(cfg["label2id"], nlohmann::json({{"LABEL_0", 0}}));
  const SafeTensors st = SafeTensors::open(out + "/model.safetensors");
  EXPECT_EQ(st.get("classifier.weight").shape(), (Shape{1, 32}));

  std::string header;
  const auto rows = test::csv_rows(out + "/train_log.csv", &header);
  EXPECT_EQ(header, "step,epoch,loss,lr,grad_norm,eval_loss,eval_pearson,eval_spearmanr");
  ASSERT_EQ(rows.size(), 6u * 10u);  // 48 examples / batch 8, 10 epochs
  double first = 0, last = 0;
  for (int s = 0; s < 6; ++s) first += rows[s][2] / 6, last += rows[54 + s][2] / 6;
  EXPECT_LT(last, 0.3 * first);
  // The best epoch: the lowest eval_loss (its row is the epoch's last step).
  double best_loss = INFINITY, best_pearson = 0, best_spearman = 0;
  for (const auto& row : rows)
    if (row.size() == 8 && row[5] < best_loss) best_loss = row[5], best_pearson = row[6], best_spearman = row[7];
  EXPECT_GT(best_pearson, 0.9);
  EXPECT_GT(best_spearman, 0.8);  // 0.878 when good and bad are apart: the ranks of tied targets are averaged

  // tfm classify on the eval texts: the raw output (no sigmoid: scores beyond 1), the same MSE and Pearson.
  std::vector<double> gold;
  std::string texts;
  {
    std::ifstream ev(t.path + "/eval.csv");
    std::string line;
    std::getline(ev, line);
    while (std::getline(ev, line)) {
      texts += line.substr(0, line.rfind(',')) + "\n";
      gold.push_back(std::stod(line.substr(line.rfind(',') + 1)));
    }
  }
  test::spit(t.path + "/eval.txt", texts);
  test::TfmRun c = test::run_tfm_in(t.path, {"classify", "--model", out, "--input", t.path + "/eval.txt"});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  std::vector<double> pred;
  std::stringstream cs(c.out);
  std::string line;
  while (std::getline(cs, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["label"], "LABEL_0") << line;
    pred.push_back(j["score"].get<double>());
  }
  ASSERT_EQ(pred.size(), gold.size()) << c.out;
  double mse = 0, top = -INFINITY;
  for (size_t i = 0; i < pred.size(); ++i) mse += (pred[i] - gold[i]) * (pred[i] - gold[i]) / (double)pred.size();
  for (double p : pred) top = std::max(top, p);
  EXPECT_GT(top, 1.5) << c.out;
  EXPECT_NEAR(mse, best_loss, 1e-3 * best_loss + 1e-5) << c.out;
  EXPECT_NEAR(pearson_of(pred, gold), best_pearson, 1e-3) << c.out;
  // --function-to-apply sigmoid still gives the pipeline's sigmoid of that score.
  test::TfmRun sg = test::run_tfm_in(t.path, {"classify", "--model", out, "--function-to-apply", "sigmoid",
                                              "paris is good"});
  ASSERT_EQ(sg.exit_code, 0) << sg.describe();
  test::TfmRun raw = test::run_tfm_in(t.path, {"classify", "--model", out, "paris is good"});
  ASSERT_EQ(raw.exit_code, 0) << raw.describe();
  const double s_raw = nlohmann::json::parse(raw.out)["score"], s_sig = nlohmann::json::parse(sg.out)["score"];
  EXPECT_NEAR(s_sig, 1.0 / (1.0 + std::exp(-s_raw)), 1e-5);

  // The written folder says problem_type regression: fine-tuned again, integer scores stay a regression.
  test::spit(t.path + "/ints.csv", "text,label\nthe cat is good,4\nthe cat is bad,1\nthe dog is good,5\n");
  test::TfmRun again = test::run_tfm_in(t.path, {"finetune", "--model", out, "--train", t.path + "/ints.csv", "--out",
                                                 t.path + "/again", "--epochs", "1", "--no-progress"});
  ASSERT_EQ(again.exit_code, 0) << again.describe();
  EXPECT_EQ(load_json_file(t.path + "/again/config.json")["id2label"], nlohmann::json({{"0", "LABEL_0"}}));
  // ... unless told otherwise: classes 1, 4, 5.
  test::TfmRun cls = test::run_tfm_in(t.path, {"finetune", "--model", out, "--train", t.path + "/ints.csv", "--out",
                                               t.path + "/cls", "--epochs", "1", "--no-progress", "--problem-type",
                                               "single_label_classification"});
  ASSERT_EQ(cls.exit_code, 0) << cls.describe();
  const nlohmann::json cls_cfg = load_json_file(t.path + "/cls/config.json");
  EXPECT_EQ(cls_cfg["id2label"], nlohmann::json({{"0", "1"}, {"1", "4"}, {"2", "5"}}));
  EXPECT_EQ(cls_cfg["problem_type"], "single_label_classification");
}

// Integer labels are classes unless --problem-type regression says otherwise; then every label must be a number.
TEST(FinetuneRegressionCli, ProblemTypeOptionAndBadLabelsAreOneLineErrors) {
  test::TempFolder t;
  test::spit(t.path + "/ints.csv", "text,label\nthe cat is good,4\nthe cat is bad,1\nthe dog is good,5\n");
  test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                             t.path + "/ints.csv", "--out", t.path + "/reg", "--epochs", "1",
                                             "--problem-type", "regression", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(load_json_file(t.path + "/reg/config.json")["problem_type"], "regression");
  test::TfmRun c = test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                             t.path + "/ints.csv", "--out", t.path + "/cls", "--epochs", "1",
                                             "--no-progress"});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  EXPECT_NE(c.err.find("labels 1, 4, 5"), std::string::npos) << c.err;

  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"finetune", "--model", fixture("heads_seqcls"), "--out", t.path + "/o",
                                     "--no-progress"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_tfm_in(t.path, args);
  };
  test::spit(t.path + "/mixed.csv", "text,label\nthe cat is good,4.5\nthe cat is bad,pos\n");
  test::expect_one_line_error(run({"--train", t.path + "/mixed.csv", "--problem-type", "regression"}),
                              "mixed.csv: line 3: label 'pos' in column 'label' is not a number; regression");
  test::expect_one_line_error(run({"--train", t.path + "/ints.csv", "--problem-type", "regression", "--labels", "a,b"}),
                              "--labels names the classes of a classifier; regression");
  test::expect_one_line_error(run({"--train", t.path + "/ints.csv", "--problem-type", "regression", "--task", "mlm"}),
                              "--problem-type is for --task classify, not 'mlm'");
  test::expect_one_line_error(run({"--train", t.path + "/ints.csv", "--problem-type", "multi_label_classification"}),
                              "--problem-type");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));
}

}  // namespace
}  // namespace tfm
