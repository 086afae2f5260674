// `tfm finetune` end to end: trains a classifier on a small task, writes a folder that `tfm classify`
// loads with the labels it was trained on, and refuses bad data with one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_tfm.h"
#include "test_util.h"

namespace tfm {
namespace {

using test::fixture;
using test::run_tfm_in;
using test::TfmRun;

// A task the tiny fixture model can learn: the sentiment word decides the label. Words of heads_seqcls/vocab.txt.
void write_task(const std::string& dir) {
  const char* subjects[] = {"the cat", "the dog", "the man", "the house", "the park", "the car", "people", "london"};
  const char* fillers[] = {"is", "is very", "has a", "and the"};
  std::ostringstream train, eval;
  train << "text,label\n";
  eval << "{\"text\": \"the red car is good\", \"label\": \"pos\"}\n";
  int i = 0;
  for (const char* s : subjects)
    for (const char* f : fillers) {
      const bool pos = (i++ % 2) == 0;
      train << '"' << s << ' ' << f << ' ' << (pos ? "good" : "bad") << "\"," << (pos ? "pos" : "neg") << "\n";
      train << s << ' ' << f << ' ' << (pos ? "bad" : "good") << ',' << (pos ? "neg" : "pos") << "\n";
    }
  const char* held[] = {"football", "paris", "england", "the blue car", "friends"};
  for (const char* s : held) {
    eval << "{\"text\": \"" << s << " is good\", \"label\": \"pos\"}\n";
    eval << "{\"text\": \"" << s << " is bad\", \"label\": \"neg\"}\n";
  }
  test::spit(dir + "/train.csv", train.str());
  test::spit(dir + "/eval.jsonl", eval.str());
}

TEST(FinetuneCli, TrainsAClassifierThatTfmClassifyLoads) {
  test::TempFolder t;
  write_task(t.path);
  const std::string out = t.path + "/sentiment";
  test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                             t.path + "/train.csv", "--eval", t.path + "/eval.jsonl", "--out", out,
                                             "--epochs", "8", "--batch-size", "8", "--lr", "2e-3", "--seed", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("labels neg, pos"), std::string::npos) << r.err;  // sorted: the data's labels
  EXPECT_NE(r.err.find(" s a step after the first (median)"), std::string::npos) << r.err;
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "train_log.csv"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  EXPECT_TRUE(std::filesystem::exists(out + "/loss.png"));
  // train_log.csv: a row per optimizer step, the eval metrics on each epoch's last step; the loss falling.
  std::ifstream log(out + "/train_log.csv");
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line, "step,epoch,loss,lr,grad_norm,eval_loss,eval_accuracy,eval_macro_f1");
  std::vector<std::vector<double>> rows, evals;
  while (std::getline(log, line)) {
    std::vector<double> v;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) v.push_back(cell.empty() ? NAN : std::stod(cell));
    if (v.size() == 8) evals.push_back(v);
    rows.push_back(v);
  }
  ASSERT_EQ(rows.size(), 64u);  // 64 examples / batch 8 = 8 steps an epoch, 8 epochs
  ASSERT_EQ(evals.size(), 8u);
  EXPECT_EQ(evals.back()[0], 8 * 8);
  EXPECT_DOUBLE_EQ(evals.back()[1], 8.0);  // epoch
  double first = 0, last = 0;
  for (int s = 0; s < 8; ++s) first += rows[s][2] / 8, last += rows[56 + s][2] / 8;
  EXPECT_LT(last, 0.5 * first);
  double best = 0;
  for (const auto& row : evals) best = std::max(best, row[6]);
  EXPECT_GE(best, 0.9);  // the held-out subjects are classified by their sentiment word
  // The folder classifies as the trainer evaluated it: tfm classify's accuracy on eval equals the best epoch's.
  std::string texts, labels;
  std::ifstream ev(t.path + "/eval.jsonl");
  std::vector<std::string> gold;
  while (std::getline(ev, line)) {
    const size_t a = line.find("\"text\": \"") + 9, b = line.find('"', a);
    texts += line.substr(a, b - a) + "\n";
    gold.push_back(line.find("\"pos\"") != std::string::npos ? "pos" : "neg");
  }
  test::spit(t.path + "/eval.txt", texts);
  test::TfmRun c = test::run_tfm_in(t.path, {"classify", "--model", out, "--input", t.path + "/eval.txt"});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  std::stringstream cs(c.out);
  int correct = 0, n = 0;
  while (std::getline(cs, line)) {
    const size_t a = line.find("\"label\":\"") + 9;
    ASSERT_NE(a, std::string::npos + 9) << line;
    correct += line.substr(a, 3) == gold[n++];
  }
  ASSERT_EQ(n, (int)gold.size());
  EXPECT_DOUBLE_EQ((double)correct / n, best) << c.out;
}

TEST(FinetuneCli, BadDataAndOptionsAreOneLineErrors) {
  test::TempFolder t;
  write_task(t.path);
  const std::string m = fixture("heads_seqcls");
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"finetune", "--model", m, "--out", t.path + "/o", "--no-progress"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_tfm_in(t.path, args);
  };
  test::expect_one_line_error(run({"--train", t.path + "/train.csv", "--label-column", "y"}), "no column 'y'");
  test::expect_one_line_error(run({"--train", t.path + "/train.csv", "--group-texts"}),
                              "--group-texts concatenates the texts of masked-LM training; it is for --task mlm only");
  test::expect_one_line_error(run({"--train", t.path + "/train.csv", "--labels", "neg,neutral"}),
                              "label 'pos' is not in the label set");
  test::spit(t.path + "/bad.csv", "text,label\n\"a cat,pos\n");
  test::expect_one_line_error(run({"--train", t.path + "/bad.csv"}), "unterminated quoted field");
  test::spit(t.path + "/short.csv", "text,label\nthe cat,pos,extra\n");
  test::expect_one_line_error(run({"--train", t.path + "/short.csv"}), "line 2: 3 fields, the header has 2");
  test::spit(t.path + "/data.txt", "x\n");
  test::expect_one_line_error(run({"--train", t.path + "/data.txt"}), "name it .csv, .tsv or .jsonl");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_mlm"), "--train", t.path + "/train.csv", "--out",
                                t.path + "/o2"}),
      "pooler");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));  // nothing written on failure
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o2"));
}

// finetune's default --max-length 128 on a model of 64 positions failed ("sequence of 128 tokens is longer than
// max_position_embeddings (64)"); it is capped at the model's longest input, as run_glue.py caps max_seq_length.
TEST(FinetuneCli, FinetuneCapsMaxLengthAtTheModelsPositions) {
  tfm::test::TempFolder t;
  std::string long_text;
  for (int i = 0; i < 150; ++i) long_text += "the cat ";
  tfm::test::spit(t.path + "/train.csv", "text,label\n" + long_text + ",pos\nthe dog is bad,neg\n");
  for (const char* len : {"", "512"}) {
    std::vector<std::string> a = {"finetune", "--model", fixture("heads_seqcls"), "--train", t.path + "/train.csv",
                                  "--out", t.path + "/o" + len, "--epochs", "1", "--no-progress"};
    if (*len) a.insert(a.end(), {"--max-length", len});
    TfmRun r = run_tfm_in(t.path, a);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
  }
  TfmRun c = run_tfm_in(t.path, {"classify", "--model", t.path + "/o", "--max-length", "64", long_text});
  EXPECT_EQ(c.exit_code, 0) << c.describe();
}

// id2label given as a list was ignored (labels LABEL_0, ...), and an unknown problem_type accepted; transformers
// refuses both.
TEST(FinetuneCli, MalformedId2labelAndProblemTypeAreRefused) {
  tfm::test::TempFolder t;
  const nlohmann::json cfg = nlohmann::json::parse(tfm::test::slurp(fixture("heads_seqcls/config.json")));
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"id2label", nlohmann::json::array({"a", "b", "c"})}, {"problem_type", "foo"}}) {
    SCOPED_TRACE(key);
    nlohmann::json c = cfg;
    c[key] = value;
    const std::string m = t.path + "/m_" + key;
    tfm::test::link_folder(fixture("heads_seqcls"), m, {{"config.json", ""}});
    tfm::test::spit(m + "/config.json", c.dump());
    tfm::test::expect_one_line_error(run_tfm_in(t.path, {"classify", "--model", m, "the cat"}), key);
    tfm::test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe dog is bad,neg\n");
    tfm::test::expect_one_line_error(run_tfm_in(t.path, {"finetune", "--model", m, "--train", t.path + "/train.csv",
                                                         "--out", t.path + "/o"}),
                                     key);
  }
}

// A completed fine-tuning run removes its training state; --resume on it now says so.
TEST(FinetuneCli, ResumeOfAFinishedFinetuneSaysItFinished) {
  tfm::test::TempFolder t;
  tfm::test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe dog is bad,neg\n");
  const std::vector<std::string> a = {"finetune", "--model", fixture("heads_seqcls"), "--train", t.path + "/train.csv",
                                      "--out", t.path + "/o", "--epochs", "1", "--no-progress"};
  TfmRun r = run_tfm_in(t.path, a);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<std::string> again = a;
  again.push_back("--resume");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, again), "finished");
}

}  // namespace
}  // namespace tfm
