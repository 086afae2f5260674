// `tfm train`, d2l and recipe runs, as a user starts, stops and resumes them: CRLF corpora, resumed logs equal to
// uninterrupted ones, stops before the first epoch, failed starts, Ctrl-C / SIGTERM, --set epochs on resume.
// Expected values come from the same run done another way (LF vs CRLF, interrupted vs uninterrupted), from the
// README and from the messages the commands are meant to give; none is copied from the output under test.
#include <signal.h>

#include "cli_util.h"

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "io/safetensors.h"
#include "text/nmt_data.h"
#include "train/recipe.h"

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

// A CRLF copy of a corpus trains the same model as the LF original (d2l reads it in Python text mode). The defect it
// catches: tgt_vocab.txt held ".\r", "!\r", "?\r" and translations ended in "\r".
TEST(CliTrainData, CrlfCorpusTrainsTheSameModelAsLf) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string lf = fra_corpus(dir + "/lf.txt", 40, "\n"), crlf = fra_corpus(dir + "/crlf.txt", 40, "\r\n");
  TfmRun a = tfm(dir, d2l_train_args(lf, dir + "/lf", "2"));
  ASSERT_EQ(a.exit_code, 0) << describe(a);
  TfmRun b = tfm(dir, d2l_train_args(crlf, dir + "/crlf", "2"));
  ASSERT_EQ(b.exit_code, 0) << describe(b);
  for (const char* f : {"src_vocab.txt", "tgt_vocab.txt", "config.json", "model.safetensors"})
    EXPECT_EQ(slurp(dir + "/lf/" + f), slurp(dir + "/crlf/" + f)) << f << " differs between LF and CRLF corpora";
  EXPECT_FALSE(has(slurp(dir + "/crlf/tgt_vocab.txt"), "\r"));
  TfmRun t = tfm(dir, {"translate", "--model", dir + "/crlf", "--threads", "1", "go ."});
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  EXPECT_FALSE(has(t.out, "\r")) << t.out;
  // The library reader, directly.
  ParallelCorpus x = tokenize_nmt("go .\tva !\r\nhi .\tsalut !\r\n", 0), y = tokenize_nmt("go .\tva !\nhi .\tsalut !\n", 0);
  EXPECT_EQ(x.source, y.source);
  EXPECT_EQ(x.target, y.target);
}

// train_log.csv (and loss.png) after a resume mid-epoch equal an uninterrupted run's: the resumed epoch's
// train_loss covers the batches before the resume too. The defect it catches: 4.914 instead of 5.330 (only the batches after).
TEST(TrainResume, TrainLogEqualsUninterruptedRun) {
  TempDir tmp;
  const std::string& root = tmp.path;
  RecipeConfig c = RecipeConfig::from_json(
      nlohmann::json::parse(slurp(recipe_json(root, {{"epochs", 2}, {"train_limit", 150}, {"valid_limit", 8}}))), "t");
  RecipeResult full = train_recipe(c, root + "/full", false, false);
  ASSERT_GE(full.steps, 8);
  RecipeConfig stop = c;
  stop.stop_after_steps = 3;  // mid epoch 1
  train_recipe(stop, root + "/split", false, false);
  RecipeConfig again;
  again.stop_after_steps = full.steps - 2;  // mid epoch 2
  train_recipe(again, root + "/split", true, false);
  RecipeResult rest = train_recipe(RecipeConfig{}, root + "/split", true, false);
  ASSERT_EQ(rest.steps, full.steps);
  // Columns that do not depend on the clock: epoch, step, train_loss, valid_loss, valid_bleu, lr.
  auto stable = [](const std::string& csv) {
    std::string s;
    for (const std::string& l : lines(csv)) {
      std::stringstream ss(l);
      std::string cell;
      for (int i = 0; i < 6 && std::getline(ss, cell, ','); ++i) s += cell + ",";
      s += "\n";
    }
    return s;
  };
  const std::string a = stable(slurp(root + "/full/train_log.csv")), b = stable(slurp(root + "/split/train_log.csv"));
  EXPECT_EQ(lines(a).size(), 3u) << a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(slurp(root + "/full/loss.png"), slurp(root + "/split/loss.png")) << "loss.png differs after resume";
}

// --resume could not extend a run (--set epochs=N refused) and train_config.json kept the old run controls.
// Now a finished 1-epoch run resumed with --set epochs=2 trains a second epoch, train_config.json records
// epochs 2 and the step limit of the invocation, and fewer epochs than trained is refused. --help lists the keys.
TEST(TrainResume, SetEpochsExtendsAFinishedRunAndTheConfigRecordsIt) {
  tfm::test::TempFolder t;
  const std::string cfg = t.path + "/tiny.json", out = t.path + "/run";
  tfm::test::spit(cfg, std::string(R"({"train_limit": 100, "valid_limit": 8, "vocab_size": 300, "num_hiddens": 16,
    "num_layers": 1, "num_heads": 2, "ffn_num_hiddens": 32, "max_len": 40, "num_steps": 10, "max_tokens": 600,
    "epochs": 1, "patience": 5, "warmup_steps": 5, "data_dir": ")") + tfm::test::data_dir() + "\"}");
  TfmRun first = run_tfm_in(t.path, {"train", "--config", cfg, "--out", out, "--no-progress", "--threads", "1"});
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  auto log_rows = [&] {
    std::istringstream in(tfm::test::slurp(out + "/train_log.csv"));
    std::string line;
    int n = -1;  // header
    while (std::getline(in, line)) n += !line.empty();
    return n;
  };
  ASSERT_EQ(log_rows(), 1);
  TfmRun more = run_tfm_in(t.path, {"train", "--resume", out, "--set", "epochs=2", "--no-progress", "--threads", "1"});
  ASSERT_EQ(more.exit_code, 0) << more.describe();
  EXPECT_EQ(log_rows(), 2);
  // The summary's time spans the whole run; a resumed invocation also says its own.
  EXPECT_EQ(first.out.find("this invocation"), std::string::npos) << first.out;
  EXPECT_NE(more.out.find("(times over the whole run; this invocation "), std::string::npos) << more.out;
  EXPECT_NE(more.out.find("trained 2 epochs"), std::string::npos) << more.out;
  nlohmann::json saved = nlohmann::json::parse(tfm::test::slurp(out + "/train_config.json"));
  EXPECT_EQ(saved["epochs"], 2);
  // A step limit given on resume counts the run's steps from its start and is recorded too.
  const int64_t steps = tfm::SafeTensors::open(out + "/checkpoint.safetensors").metadata().contains("state")
                            ? nlohmann::json::parse(tfm::SafeTensors::open(out + "/checkpoint.safetensors")
                                                        .metadata()["state"].get<std::string>())["step"].get<int64_t>()
                            : 0;
  TfmRun limited = run_tfm_in(t.path, {"train", "--resume", out, "--set", "epochs=3", "--set",
                                       "stop_after_steps=" + std::to_string(steps + 1), "--no-progress"});
  ASSERT_EQ(limited.exit_code, 0) << limited.describe();
  saved = nlohmann::json::parse(tfm::test::slurp(out + "/train_config.json"));
  EXPECT_EQ(saved["stop_after_steps"], steps + 1);
  EXPECT_EQ(saved["epochs"], 3);
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"train", "--resume", out, "--set", "epochs=1"}),
                                   "has already trained 2 epochs");
  TfmRun help = run_tfm_in(t.path, {"train", "--help"});
  for (const char* key : {"label_smoothing", "stop_after_steps", "max_tokens", "warmup_steps"})
    EXPECT_NE(help.out.find(key), std::string::npos) << key << "\n" << help.out;
}

// Ctrl-C or SIGTERM during recipe training killed it at once, losing up to a checkpoint interval. Now the step in
// progress finishes, a checkpoint is saved, stderr says how to resume, and tfm exits 128 + the signal number.
TEST(TrainSignals, CtrlCAndSigtermSaveACheckpointAndSayHowToResume) {
  tfm::test::TempFolder t;
  const std::string cfg = t.path + "/tiny.json";
  tfm::test::spit(cfg, std::string(R"({"train_limit": 300, "valid_limit": 8, "vocab_size": 500, "num_hiddens": 16,
    "num_layers": 1, "num_heads": 2, "ffn_num_hiddens": 32, "max_len": 40, "num_steps": 10, "max_tokens": 600,
    "epochs": 1000, "patience": 1000, "warmup_steps": 5, "checkpoint_every": 100000, "data_dir": ")") +
                           tfm::test::data_dir() + "\"}");
  for (const int sig : {SIGINT, SIGTERM}) {
    const std::string out = t.path + "/run" + std::to_string(sig);
    tfm::test::RunOptions opt;
    // Signal once training steps are running (a progress line is printed), not while SentencePiece trains.
    opt.while_running = [sig](pid_t pid, const std::string& err) {
      for (int i = 0; i < 6000 && tfm::test::slurp(err).find(" batch ") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      kill(pid, sig);
    };
    TfmRun r = tfm::test::run_tfm_with(t.path, {"train", "--config", cfg, "--out", out, "--threads", "1"}, "", opt);
    EXPECT_EQ(r.signal, 0) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + sig) << r.describe();
    EXPECT_NE(r.err.find(sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("checkpoint saved"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tfm train --resume " + out), std::string::npos) << r.err;
    // The checkpoint holds the last finished step (checkpoint_every is far away) and the run resumes from it.
    ASSERT_TRUE(std::filesystem::exists(out + "/checkpoint.safetensors")) << r.describe();
    auto state = [&] {
      tfm::SafeTensors ck = tfm::SafeTensors::open(out + "/checkpoint.safetensors");
      return nlohmann::json::parse(ck.metadata()["state"].get<std::string>());
    };
    const int64_t step = state()["step"].get<int64_t>();
    EXPECT_GE(step, 1);
    TfmRun more = run_tfm_in(t.path, {"train", "--resume", out, "--threads", "1", "--no-progress", "--set",
                                      "stop_after_steps=" + std::to_string(step + 1)});
    ASSERT_EQ(more.exit_code, 0) << more.describe();
    EXPECT_EQ(state()["step"].get<int64_t>(), step + 1);
  }
}

// A recipe run stopped before the end of its first epoch says that no model was written and how to continue.
// The defect it catches: "best validation BLEU -1.00 (epoch 0); model in DIR" with no config.json / model.safetensors in DIR.
TEST(CliTrainRecipe, RunStoppedBeforeFirstEpochSaysNoModelWasWritten) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string cfg = recipe_json(dir), out = dir + "/run";
  TfmRun r = tfm(dir, {"train", "--config", cfg, "--out", out, "--set", "stop_after_steps=2", "--threads", "1",
                    "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_FALSE(fs::exists(out + "/config.json"));
  EXPECT_FALSE(has(r.out, "model in")) << r.out;
  EXPECT_TRUE(has(r.out, "no model written")) << r.out;
  EXPECT_TRUE(has(r.out, "--resume " + out)) << r.out;
  TfmRun done = tfm(dir, {"train", "--resume", out, "--threads", "1", "--no-progress"});
  ASSERT_EQ(done.exit_code, 0) << describe(done);
  EXPECT_TRUE(has(done.out, "model in " + out)) << done.out;
  EXPECT_TRUE(fs::exists(out + "/config.json"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
}

// A failed recipe start leaves nothing that blocks a retry, and a missing data file says where it was looked for.
// The defect it catches: train_config.json stayed; the rerun said "already exists", --resume "no checkpoint".
TEST(CliTrainRecipe, FailedRecipeStartLeavesNothingThatBlocksARetry) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string out = dir + "/run";
  // Missing data file: the message names the absolute path, data_dir and how to change it.
  std::string cfg = recipe_json(dir, {{"train_src", "nosuch/train.en.gz"}});
  TfmRun r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"});
  expect_error(r, "training data not found: " + fs::absolute(data_dir()).lexically_normal().string() + "/nosuch/train.en.gz");
  EXPECT_TRUE(has(r.err, "TFM_DATA_DIR")) << r.err;
  EXPECT_TRUE(has(r.err, "data_dir")) << r.err;
  EXPECT_FALSE(fs::exists(out)) << "a failed start left " << out;
  // Without data_dir in the config: relative to $TFM_DATA_DIR, and the message says so.
  cfg = recipe_json(dir, {{"train_src", "nosuch/train.en.gz"}}, false);
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"}, "", Stdout::file,
          {"TFM_DATA_DIR=" + dir + "/mydata"});
  expect_error(r, dir + "/mydata/nosuch/train.en.gz");
  EXPECT_TRUE(has(r.err, "$TFM_DATA_DIR")) << r.err;
  // SentencePiece cannot build the vocabulary: no train_config.json / spm.model left, no spm_train flag advised.
  cfg = recipe_json(dir, {{"vocab_size", 100000}, {"train_limit", 20}});
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"});
  expect_error(r, "SentencePiece cannot train a 100000-piece subword model on 40 sentences");
  EXPECT_FALSE(fs::exists(out)) << "a failed start left " << out;
  // Too small for the characters: SentencePiece's own advice is an spm_train flag tfm does not have.
  cfg = recipe_json(dir, {{"vocab_size", 10}, {"train_limit", 20}});
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"});
  expect_error(r, "--set vocab_size=N");
  EXPECT_FALSE(has(r.err, "character_coverage")) << r.err;
  EXPECT_FALSE(fs::exists(out)) << "a failed start left " << out;
  // The same --out into an existing empty folder: the folder stays, empty.
  fs::create_directories(out);
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_TRUE(fs::is_directory(out) && fs::is_empty(out)) << "files left in " << out;
  // The retry with a good config succeeds.
  cfg = recipe_json(dir);
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--set", "stop_after_steps=1", "--threads", "1",
                "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

// The README's `tfm data download multi30k --to data/multi30k` puts the files where the recipe looks with
// TFM_DATA_DIR=data (README: "TFM_DATA_DIR=data build/tfm train --config ..."), here from a local mirror.
TEST(CliTrainRecipe, DataDownloadedAsTheReadmeSaysIsFoundByTheRecipe) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  TfmRun d = tfm(dir, {"data", "download", "multi30k", "--base-url", data_dir() + "/multi30k", "--to",
                    dir + "/data/multi30k"});
  ASSERT_EQ(d.exit_code, 0) << describe(d);
  const std::string cfg = recipe_json(dir, nlohmann::json::object(), /*with_data_dir=*/false);
  TfmRun r = tfm(dir, {"train", "--config", cfg, "--out", dir + "/run", "--set", "stop_after_steps=1", "--threads", "1",
                    "--no-progress"},
              "", Stdout::file, {"TFM_DATA_DIR=" + dir + "/data"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  const std::string readme = slurp(source_dir() + "/README.md");
  EXPECT_TRUE(has(readme, "tfm data download multi30k --to data/multi30k")) << "README no longer shows the download";
  EXPECT_TRUE(has(readme, "TFM_DATA_DIR=data build/tfm train --config")) << "README does not say how to point the "
                                                                             "recipe at the downloaded data";
}

}  // namespace
}  // namespace tfm::test
