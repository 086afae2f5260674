// Crash safety: `tfm train` killed with SIGKILL at random moments (including during checkpoint writes) always
// leaves a newest complete checkpoint that loads and resumes.
#include "test_paths.h"
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/safetensors.h"
#include "test_util.h"

extern char** environ;

namespace {
pid_t spawn_tfm(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all = {TFM_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, TFM_BINARY, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}
int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
}  // namespace

TEST(CrashSafety, SigkillDuringTrainingAlwaysLeavesALoadableResumableCheckpoint) {
  namespace fs = std::filesystem;
  const std::string root = ::testing::TempDir() + "/crash_" + std::to_string(::getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  // A tiny recipe that checkpoints every step, so kills often land inside a checkpoint write.
  const std::string cfg = root + "/tiny.json";
  std::ofstream(cfg) << R"({"train_limit": 400, "valid_limit": 8, "vocab_size": 500, "num_hiddens": 16,
    "num_layers": 1, "num_heads": 2, "ffn_num_hiddens": 32, "max_len": 40, "num_steps": 10, "max_tokens": 600,
    "epochs": 1000, "patience": 1000, "warmup_steps": 5, "checkpoint_every": 1, "data_dir": ")"
                     << tfm::test::data_dir() << "\"}";
  const std::string out = root + "/run";
  // A first checkpoint from an uninterrupted start, so every kill below lands in a resumed run (loading, training
  // or writing a checkpoint), however slow this build is to start (sanitizers).
  pid_t first = spawn_tfm({"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress", "--set",
                           "stop_after_steps=2"},
                          root + "/first.txt");
  ASSERT_EQ(wait_exit(first), 0) << std::ifstream(root + "/first.txt").rdbuf();
  tfm::Rng rng(2024);
  int64_t last_step = 2, kills = 0;
  for (int round = 0; round < 20; ++round) {
    pid_t pid = spawn_tfm({"train", "--resume", out, "--threads", "1", "--no-progress"}, root + "/log.txt");
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + (int)rng.below(1000)));
    kill(pid, SIGKILL);
    int code = wait_exit(pid);
    kills += code == 128 + SIGKILL;
    // The checkpoint must always be complete: it opens, holds the state, and never goes backwards.
    ASSERT_TRUE(fs::exists(out + "/checkpoint.safetensors")) << "round " << round;
    tfm::SafeTensors ck = tfm::SafeTensors::open(out + "/checkpoint.safetensors");
    ASSERT_TRUE(ck.metadata().contains("state")) << "round " << round;
    auto st = nlohmann::json::parse(ck.metadata()["state"].get<std::string>());
    int64_t step = st["step"].get<int64_t>();
    EXPECT_GE(step, last_step) << "checkpoint went backwards in round " << round;
    last_step = step;
  }
  EXPECT_GE(kills, 15);  // most rounds were really killed mid-run
  // The newest checkpoint resumes and trains on.
  pid_t pid = spawn_tfm({"train", "--resume", out, "--threads", "1", "--no-progress", "--set", "stop_after_steps=" +
                                                                                    std::to_string(last_step + 2)},
                        root + "/final.txt");
  EXPECT_EQ(wait_exit(pid), 0) << std::ifstream(root + "/final.txt").rdbuf();
  auto st = nlohmann::json::parse(
      tfm::SafeTensors::open(out + "/checkpoint.safetensors").metadata()["state"].get<std::string>());
  EXPECT_EQ(st["step"].get<int64_t>(), last_step + 2);
  fs::remove_all(root);
}
