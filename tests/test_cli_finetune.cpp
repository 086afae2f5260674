// tfm finetune as a command: Ctrl-C / SIGTERM stop at a step boundary with the training state saved, the resume
// command printed and exit 130 / 143 (as tfm train), no temp file left in --out; an --out that cannot be created
// and a missing text column are refused before any training, each named as what it is.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "run_tfm.h"
#include "test_util.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;
using test::fixture;

// Eight rows of the heads_seqcls vocabulary: one optimizer step an epoch with --batch-size 8.
void write_train(const std::string& path) {
  test::spit(path, "text,label\nthe cat is good,pos\nthe dog is bad,neg\nthe man is good,pos\nthe car is bad,neg\n"
                   "the park is good,pos\nthe house is bad,neg\npeople is good,pos\nlondon is bad,neg\n");
}

std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().find(".tmp") != std::string::npos) v.push_back(e.path().string());
  return v;
}

// Runs finetune for many steps and sends `sig` (`count` times) once the first training state is saved.
test::TfmRun run_and_signal(const std::string& dir, const std::vector<std::string>& args, int sig, int count) {
  test::RunOptions ro;
  const std::string state = args[std::find(args.begin(), args.end(), "--out") - args.begin() + 1] +
                             "/trainer_state.safetensors";
  ro.while_running = [&](pid_t pid, const std::string&) {
    const auto t0 = std::chrono::steady_clock::now();
    while (!fs::exists(state) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int i = 0; i < count; ++i) ::kill(pid, sig);
  };
  return test::run_tfm_with(dir, args, "", ro);
}

TEST(CliFinetune, SigintStopsAtAStepSavesAndPrintsTheResumeCommand) {
  test::TempFolder t;
  write_train(t.path + "/train.csv");
  const std::string out = t.path + "/out";
  std::vector<std::string> args = {"finetune", "--model", fixture("heads_seqcls"), "--train", t.path + "/train.csv",
                                   "--out", out, "--epochs", "100", "--batch-size", "8", "--save-steps", "1",
                                   "--threads", "1", "--no-progress"};
  test::TfmRun r = run_and_signal(t.path, args, SIGINT, 1);
  EXPECT_EQ(r.signal, 0) << r.describe();
  ASSERT_EQ(r.exit_code, 130) << r.describe();
  EXPECT_NE(r.err.find("stopped at step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" --resume"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--epochs 100"), std::string::npos) << r.err;  // the whole command, to paste
  EXPECT_TRUE(fs::exists(out + "/trainer_state.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/train_log.csv"));
  EXPECT_EQ(temp_files(out), std::vector<std::string>{});

  // The command it prints continues the run to its end.
  args.push_back("--resume");
  r = test::run_tfm_in(t.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("100 steps"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("resumed from step"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out + "/trainer_state.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_EQ(temp_files(out), std::vector<std::string>{});
}

TEST(CliFinetune, SigtermExits143AndASecondSignalEndsAtOnceWithoutTempFiles) {
  test::TempFolder t;
  write_train(t.path + "/train.csv");
  std::vector<std::string> args = {"finetune", "--model", fixture("heads_seqcls"), "--train", t.path + "/train.csv",
                                   "--out", t.path + "/a", "--epochs", "100", "--batch-size", "8", "--save-steps",
                                   "1", "--threads", "1", "--no-progress"};
  test::TfmRun r = run_and_signal(t.path, args, SIGTERM, 1);
  EXPECT_EQ(r.signal, 0) << r.describe();
  EXPECT_EQ(r.exit_code, 143) << r.describe();
  EXPECT_TRUE(fs::exists(t.path + "/a/trainer_state.safetensors"));
  EXPECT_EQ(temp_files(t.path + "/a"), std::vector<std::string>{});
  // Two at once: the second may land during a save; either way exit 130 and no temp file.
  args[6] = t.path + "/b";
  r = run_and_signal(t.path, args, SIGINT, 2);
  EXPECT_EQ(r.signal, 0) << r.describe();
  EXPECT_EQ(r.exit_code, 130) << r.describe();
  EXPECT_EQ(temp_files(t.path + "/b"), std::vector<std::string>{});
}

TEST(CliFinetune, OutThatCannotBeCreatedIsRefusedBeforeTraining) {
  test::TempFolder t;
  write_train(t.path + "/train.csv");
  test::spit(t.path + "/afile", "x");
  test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                             t.path + "/train.csv", "--out", t.path + "/afile/sub/out", "--epochs",
                                             "1", "--threads", "1"});
  test::expect_one_line_error(r, "--out '" + t.path + "/afile/sub/out' cannot be created: '" + t.path +
                                     "/afile' is not a folder");
  EXPECT_EQ(r.err.find("filesystem error"), std::string::npos) << r.err;
}

TEST(CliFinetune, MissingTextColumnIsNamedAsSuch) {
  test::TempFolder t;
  // One label and no 'text' column: the column is the problem to report.
  test::spit(t.path + "/train.csv", "sentence,label\nthe cat is good,pos\nthe dog is good,pos\n");
  test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                             t.path + "/train.csv", "--out", t.path + "/out", "--threads", "1"});
  test::expect_one_line_error(r, "no column 'text' (columns: sentence, label)");
  // mlm reads only the text column.
  r = test::run_tfm_in(t.path, {"finetune", "--model", fixture("heads_mlm"), "--task", "mlm", "--train",
                                t.path + "/train.csv", "--out", t.path + "/out2", "--threads", "1"});
  test::expect_one_line_error(r, "no column 'text'");
}

}  // namespace
}  // namespace tfm
