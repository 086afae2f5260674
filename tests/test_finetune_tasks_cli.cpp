// `tfm finetune --task token-classify` and `--task mlm` end to end (issue 25): the written folders load in
// `tfm classify` (to the trainer's eval accuracy) and `tfm fill-mask`; a stopped run resumes; bad data and
// options are one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "finetune_test_util.h"
#include "ops/gemm_bf16.h"
#include "run_tfm.h"
#include "test_util.h"

namespace tfm {
namespace {

using test::fixture;

// Sentences of heads_tokcls/vocab.txt words: locations after "in", persons first; "londonie" and "friendsie" have a
// continuation sub-token ("##ie"), labelled -100.
void write_ner(const std::string& dir, std::vector<std::pair<std::string, std::vector<std::string>>>* eval_rows) {
  const char* locs[] = {"paris", "london", "england", "france", "londonie"};
  const char* pers[] = {"man", "friends", "men", "friendsie"};
  std::ostringstream train, eval;
  train << "tokens\ttags\n";
  int i = 0;
  for (const char* p : pers)
    for (const char* l : locs) {
      const std::string words = std::string("the ") + p + " is in " + l;
      if (i++ % 5 == 4) {
        eval << "{\"tokens\": [\"the\", \"" << p << "\", \"is\", \"in\", \"" << l
             << "\"], \"tags\": [\"O\", \"B-PER\", \"O\", \"O\", \"B-LOC\"]}\n";
        eval_rows->push_back({words, {"O", "B-PER", "O", "O", "B-LOC"}});
      } else {
        train << words << "\tO B-PER O O B-LOC\n";
      }
      train << l << " has a park\tB-LOC O O O\n";
    }
  test::spit(dir + "/train.tsv", train.str());
  test::spit(dir + "/eval.jsonl", eval.str());
}

std::vector<std::vector<double>> eval_rows_of(const std::string& log_path, size_t columns) {
  std::string header;
  std::vector<std::vector<double>> rows;
  for (auto& v : test::csv_rows(log_path, &header))  // the rows of each epoch's last step: every cell filled
    if (v.size() == columns && std::none_of(v.begin(), v.end(), [](double x) { return std::isnan(x); }))
      rows.push_back(std::move(v));
  return rows;
}

TEST(FinetuneTasksCli, TokenClassifierTrainsAndTfmClassifyAgreesWithItsEval) {
  test::TempFolder t;
  std::vector<std::pair<std::string, std::vector<std::string>>> eval;
  write_ner(t.path, &eval);
  const std::string out = t.path + "/ner";
  test::TfmRun r = test::run_tfm_in(
      t.path, {"finetune", "--task", "token-classify", "--model", fixture("heads_tokcls"), "--train",
               t.path + "/train.tsv", "--eval", t.path + "/eval.jsonl", "--out", out, "--epochs", "6", "--batch-size",
               "4", "--gradient-accumulation-steps", "2", "--lr", "3e-3", "--seed", "5", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("eval_f1"), std::string::npos) << r.err;
  const auto rows = eval_rows_of(out + "/train_log.csv", 10);  // step,epoch,loss,lr,grad_norm + 5 eval columns
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows.back()[0], 6 * 5);  // 36 rows: 9 micro-batches of 4, 5 steps of 2 an epoch
  // The written epoch: the best entity F1, ties the lower eval loss.
  double best_f1 = -1, best_loss = INFINITY, best_acc = 0;
  for (const auto& row : rows)
    if (row[9] > best_f1 || (row[9] == best_f1 && row[5] < best_loss)) best_f1 = row[9], best_loss = row[5], best_acc = row[6];
  EXPECT_GE(best_f1, 0.75);
  // tfm classify on the written folder: each word's first sub-token gets the label the trainer's eval counted.
  std::string texts;
  for (const auto& [words, tags] : eval) texts += words + "\n";
  test::spit(t.path + "/eval.txt", texts);
  test::TfmRun c = test::run_tfm_in(t.path, {"classify", "--model", out, "--all-tokens", "--input", t.path + "/eval.txt"});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  std::stringstream cs(c.out);
  std::string line;
  int correct = 0, n = 0;
  for (const auto& [words, tags] : eval) {
    ASSERT_TRUE(std::getline(cs, line));
    const nlohmann::json arr = nlohmann::json::parse(line);
    size_t w = 0;
    for (const auto& tok : arr) {
      const std::string word = tok["word"];
      if (word.rfind("##", 0) == 0) continue;  // continuation sub-tokens carry no label
      ASSERT_LT(w, tags.size()) << line;
      correct += tok["entity"] == tags[w++];
      ++n;
    }
    EXPECT_EQ(w, tags.size()) << line;
  }
  EXPECT_DOUBLE_EQ((double)correct / n, best_acc) << c.out;
}

TEST(FinetuneTasksCli, MaskedLMTrainsAndTfmFillMaskLoadsIt) {
  test::TempFolder t;
  std::ostringstream train;
  train << "{\"text\": \"the cat sat on the mat\"}\n{\"text\": \"the dog sat on the mat\"}\n"
        << "{\"text\": \"people live in london\"}\n{\"text\": \"the capital of france is paris\"}\n";
  std::string all;
  for (int i = 0; i < 6; ++i) all += train.str();
  test::spit(t.path + "/train.jsonl", all);
  test::spit(t.path + "/eval.jsonl", train.str());
  const std::string out = t.path + "/mlm";
  test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--task", "mlm", "--model", fixture("heads_mlm"), "--train",
                                             t.path + "/train.jsonl", "--eval", t.path + "/eval.jsonl", "--out", out,
                                             "--epochs", "30", "--batch-size", "8", "--lr", "1e-2", "--mlm-probability",
                                             "0.3", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const auto rows = eval_rows_of(out + "/train_log.csv", 7);  // + eval_loss, eval_perplexity
  ASSERT_EQ(rows.size(), 30u);
  EXPECT_LT(rows.back()[5], 0.5 * rows.front()[5]);  // the eval loss falls
  EXPECT_NEAR(rows.back()[6], std::exp(rows.back()[5]), 1e-6 * rows.back()[6]);
  test::TfmRun f = test::run_tfm_in(t.path, {"fill-mask", "--model", out, "--top-k", "3", "the cat sat on the [MASK]"});
  ASSERT_EQ(f.exit_code, 0) << f.describe();
  const nlohmann::json cands = nlohmann::json::parse(f.out);
  ASSERT_EQ(cands.size(), 3u);
  EXPECT_EQ(cands[0]["token_str"], "mat") << f.out;  // learned from the training texts
}

// Resuming needs the state a stopped run leaves (the bit-exact resume itself: FinetuneTasks.*ResumeIsBitExact); a
// completed run removes it.
TEST(FinetuneTasksCli, ResumeNeedsAStoppedRunsState) {
  test::TempFolder t;
  std::vector<std::pair<std::string, std::vector<std::string>>> eval;
  write_ner(t.path, &eval);
  std::vector<std::string> args = {"finetune", "--task", "token-classify", "--model", fixture("heads_tokcls"),
                                   "--train", t.path + "/train.tsv", "--out", t.path + "/o", "--epochs", "2",
                                   "--batch-size", "8", "--threads", "1", "--no-progress"};
  ASSERT_EQ(test::run_tfm_in(t.path, args).exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o/trainer_state.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(t.path + "/o/loss.png"));
  test::expect_one_line_error(test::run_tfm_in(t.path, args), "already exists");
  args.push_back("--resume");
  test::expect_one_line_error(test::run_tfm_in(t.path, args), "has no training state");
  test::TfmRun h = test::run_tfm_in(t.path, {"finetune", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  for (const char* opt : {"--resume", "--save-steps", "--gradient-accumulation-steps", "--tokens-column",
                          "--mlm-probability", "--problem-type"})
    EXPECT_NE(h.out.find(opt), std::string::npos) << opt;
}

// --precision bf16 trains the classifier too (fp32 master weights; the written folder is fp32 as HF writes it).
TEST(FinetuneTasksCli, Bf16ClassifierTrainsAndLoads) {
  if (!ops::bf16_gemm_available()) GTEST_SKIP() << "no bf16 instructions on this CPU";
  test::TempFolder t;
  std::string train = "text,label\n";
  for (const char* s : {"the cat", "the dog", "the man", "people", "london", "the car"})
    train += std::string(s) + " is good,pos\n" + s + " is bad,neg\n";
  test::spit(t.path + "/train.csv", train);
  const std::string out = t.path + "/o";
  test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                             t.path + "/train.csv", "--eval", t.path + "/train.csv", "--out", out,
                                             "--epochs", "6", "--batch-size", "4", "--lr", "3e-3", "--precision",
                                             "bf16", "--threads", "1", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const auto rows = eval_rows_of(out + "/train_log.csv", 8);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_LT(rows.back()[5], rows.front()[5]);  // the eval loss falls
  test::TfmRun c = test::run_tfm_in(t.path, {"classify", "--model", out, "the park is good"});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
}

// --task embed takes the other tasks' run options: accumulation, saved states, bf16 (where the CPU has it); the
// folder it writes loads in tfm embed, and a stopped run's state resumes.
TEST(FinetuneTasksCli, EmbedTakesAccumulationSaveStepsPrecisionAndResume) {
  test::TempFolder t;
  const std::string out = t.path + "/o";
  std::vector<std::string> args = {"finetune", "--task", "embed", "--model", fixture("st_mean"), "--train",
                                   fixture("finetune_embed/e2e_train.csv"), "--eval",
                                   fixture("finetune_embed/e2e_train.csv"), "--out", out, "--epochs", "2",
                                   "--batch-size", "2", "--gradient-accumulation-steps", "2", "--save-steps", "1",
                                   "--threads", "1", "--no-progress"};
  if (ops::bf16_gemm_available()) args.insert(args.end(), {"--precision", "bf16"});
  test::TfmRun r = test::run_tfm_in(t.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("MultipleNegativesRankingLoss; 2 steps on 4 examples"), std::string::npos) << r.err;
  EXPECT_EQ(eval_rows_of(out + "/train_log.csv", 8).size(), 2u);  // step,epoch,loss,lr,grad_norm + 3 eval columns
  EXPECT_TRUE(std::filesystem::exists(out + "/loss.png"));
  EXPECT_FALSE(std::filesystem::exists(out + "/trainer_state.safetensors"));  // removed once the run completed
  test::TfmRun e = test::run_tfm_in(t.path, {"embed", "--model", out, "--input",
                                             fixture("finetune_embed/e2e_sentences.txt"), "--quiet"});
  ASSERT_EQ(e.exit_code, 0) << e.describe();
  args.push_back("--resume");
  test::expect_one_line_error(test::run_tfm_in(t.path, args), "has no training state");
}

TEST(FinetuneTasksCli, BadDataAndOptionsAreOneLineErrors) {
  test::TempFolder t;
  auto run = [&](const std::string& task, const std::string& data, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"finetune", "--task", task, "--model",
                                     fixture(task == "mlm" ? "heads_mlm" : "heads_tokcls"), "--train", data,
                                     "--out", t.path + "/o", "--no-progress"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_tfm_in(t.path, args);
  };
  test::spit(t.path + "/n.jsonl", "{\"tokens\": [\"the\", \"man\"], \"tags\": [\"O\"]}\n");
  test::expect_one_line_error(run("token-classify", t.path + "/n.jsonl"), "line 1: 2 tokens but 1 tags");
  test::spit(t.path + "/j.jsonl", "{\"tokens\": \"[\\\"the\", \"tags\": \"O\"}\n");
  test::expect_one_line_error(run("token-classify", t.path + "/j.jsonl"), "not a valid JSON list");
  test::spit(t.path + "/c.csv", "words,tags\nthe man,O B-PER\n");
  test::expect_one_line_error(run("token-classify", t.path + "/c.csv"), "no column 'tokens'");
  test::spit(t.path + "/u.csv", "tokens,tags\nthe man,O B-ORG\n");
  test::expect_one_line_error(run("token-classify", t.path + "/u.csv", {"--labels", "O,B-PER"}),
                              "label 'B-ORG' is not in the label set");
  test::spit(t.path + "/e.csv", "tokens,tags\n,\n");
  test::expect_one_line_error(run("token-classify", t.path + "/e.csv"), "line 2: no tokens");
  test::spit(t.path + "/m.csv", "sentence\nthe cat\n");
  test::expect_one_line_error(run("mlm", t.path + "/m.csv"), "no column 'text'");
  test::spit(t.path + "/b.csv", "text\n   \n");
  test::expect_one_line_error(run("mlm", t.path + "/b.csv"), "empty text");
  test::spit(t.path + "/ok.csv", "text\nthe cat sat\n");
  test::expect_one_line_error(run("mlm", t.path + "/ok.csv", {"--gradient-accumulation-steps", "0"}),
                              "gradient-accumulation-steps");
  test::expect_one_line_error(run("mlm", t.path + "/ok.csv", {"--precision", "fp16"}), "fp16");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));  // nothing written on failure
}

}  // namespace
}  // namespace tfm
