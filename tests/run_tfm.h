// Running the tfm binary from tests (test_cli*.cpp, test_first_hour.cpp, test_embed.cpp, test_heads.cpp, ...): a subprocess with stdin from a string,
// stdout/stderr captured through files, OMP_NUM_THREADS=1.
#pragma once
#include "test_paths.h"
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace tfm::test {

struct TfmRun {
  int exit_code = -1;
  int signal = 0;
  std::string out, err;
  std::string describe() const {
    return "exit " + std::to_string(exit_code) + ", signal " + std::to_string(signal) + "\n--- stdout:\n" +
           out.substr(0, 4000) + "--- stderr:\n" + err;
  }
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
inline void spit(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
  if (!f.good()) ADD_FAILURE() << "cannot write " << path;
}

// A fresh folder for the current test, removed at the end unless the test failed.
struct TempFolder {
  std::string path;
  TempFolder() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::filesystem::path d = std::filesystem::path(::testing::TempDir()) /
                              ("tfm_" + std::to_string(getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    path = d.string();
  }
  ~TempFolder() {
    std::error_code ec;
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(path, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
};

// Where the child's stdout goes: a file (read back into TfmRun::out), /dev/full (every write fails with ENOSPC) or
// closed (EBADF).
enum class Stdout { file, dev_full, closed };

struct RunOptions {
  Stdout stdout_to = Stdout::file;
  std::vector<std::string> env;  // extra "K=V" variables, replacing those of the test's environment
  std::string binary;            // the program to run; empty = TFM_BINARY
  // Called once the child runs, before waiting for it (e.g. to send it a signal): its pid and stderr file.
  std::function<void(pid_t pid, const std::string& stderr_path)> while_running;
};

// Runs the tfm binary with `args` (no shell: any bytes can be passed), `stdin_text` on stdin, OMP_NUM_THREADS=1,
// stdout and stderr captured through files in `dir` (no pipe deadlock on long outputs).
inline TfmRun run_tfm_with(const std::string& dir, const std::vector<std::string>& args, const std::string& stdin_text,
                           const RunOptions& opt) {
  TfmRun r;
  const std::string in_path = dir + "/.stdin", out_path = dir + "/.stdout", err_path = dir + "/.stderr";
  spit(in_path, stdin_text);
  std::vector<std::string> argv_s = {opt.binary.empty() ? std::string(TFM_BINARY) : opt.binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    bool replaced = std::strncmp(*e, "OMP_NUM_THREADS=", 16) == 0;
    for (const auto& kv : opt.env) replaced |= std::strncmp(*e, kv.c_str(), kv.find('=') + 1) == 0;
    if (!replaced) env_s.push_back(*e);
  }
  env_s.push_back("OMP_NUM_THREADS=1");
  env_s.insert(env_s.end(), opt.env.begin(), opt.env.end());
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in_path.c_str(), O_RDONLY, 0);
  if (opt.stdout_to == Stdout::file)
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  else if (opt.stdout_to == Stdout::dev_full)
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/full", O_WRONLY, 0);
  else
    posix_spawn_file_actions_addclose(&fa, 1);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << std::strerror(rc);
    return r;
  }
  if (opt.while_running) opt.while_running(pid, err_path);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = opt.stdout_to == Stdout::file ? slurp(out_path) : "";
  r.err = slurp(err_path);
  return r;
}

inline TfmRun run_tfm_in(const std::string& dir, const std::vector<std::string>& args, const std::string& stdin_text = "") {
  return run_tfm_with(dir, args, stdin_text, {});
}

// Failed cleanly: exit status > 0, no signal, one stderr line "tfm: error: ..." containing `needle`.
inline void expect_one_line_error(const TfmRun& r, const std::string& needle) {
  EXPECT_EQ(r.signal, 0) << r.describe();
  EXPECT_GT(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err.rfind("tfm: error: ", 0), 0u) << r.describe();
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.describe();
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

// A copy of fixture folder `src` in `dst` made of symlinks, with `replace` (name -> target path) swapped in.
inline void link_folder(const std::string& src, const std::string& dst,
                        const std::vector<std::pair<std::string, std::string>>& replace = {}) {
  namespace fs = std::filesystem;
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    std::string name = e.path().filename().string();
    bool skip = false;
    for (auto& [n, t] : replace) skip |= n == name;
    if (!skip) fs::create_symlink(fs::absolute(e.path()), fs::path(dst) / name);
  }
  for (auto& [n, t] : replace)
    if (!t.empty()) fs::create_symlink(fs::absolute(t), fs::path(dst) / n);
}

}  // namespace tfm::test
