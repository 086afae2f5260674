// Helpers of the command-line tests (test_cli_*.cpp): the tfm run with its TFM_TEST_BINARY override and stdout
// modes, checks of the one-line error, small model folders and corpora made from the fixtures and the shared data.
// TFM_TEST_BINARY, when set, replaces the tfm binary under test (to run these tests against another build).
#pragma once
#include "test_paths.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_tfm.h"
#include "test_util.h"

namespace tfm::test {

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) v.push_back(l);
  return v;
}

// One JSON value per non-empty line.
inline std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

inline std::string tfm_binary() {
  const char* b = std::getenv("TFM_TEST_BINARY");
  return b && *b ? b : TFM_BINARY;
}

// A fresh folder per test, removed unless the test failed.
using TempDir = TempFolder;

inline RunOptions to(Stdout where) {
  RunOptions o;
  o.stdout_to = where;
  return o;
}

// Runs tfm (tests/run_tfm.h) with `args`, `stdin_text` on stdin, stdout to a file, /dev/full or closed, extra
// environment variables `env` ("K=V"), with OMP_NUM_THREADS=1.
inline TfmRun tfm(const std::string& dir, const std::vector<std::string>& args, const std::string& stdin_text = "",
                  Stdout mode = Stdout::file, const std::vector<std::string>& env = {}) {
  RunOptions opt;
  opt.stdout_to = mode;
  opt.env = env;
  opt.binary = tfm_binary();
  return run_tfm_with(dir, args, stdin_text, opt);
}

inline std::string describe(const TfmRun& r) { return r.describe(); }

inline bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Exited non-zero without a signal, with one stderr line "tfm: error: ..." containing `needle`.
inline void expect_error(const TfmRun& r, const std::string& needle) {
  EXPECT_EQ(r.signal, 0) << describe(r);
  EXPECT_GT(r.exit_code, 0) << describe(r);
  std::vector<std::string> l = lines(r.err);
  ASSERT_EQ(l.size(), 1u) << describe(r);
  EXPECT_EQ(l[0].rfind("tfm: error: ", 0), 0u) << describe(r);
  EXPECT_TRUE(has(l[0], needle)) << "expected '" << needle << "' in: " << l[0];
}

// As expect_error, for commands that print progress on stderr first: the last line is the error.
inline void expect_last_error(const TfmRun& r, const std::string& needle) {
  EXPECT_EQ(r.signal, 0) << describe(r);
  EXPECT_GT(r.exit_code, 0) << describe(r);
  std::vector<std::string> l = lines(r.err);
  ASSERT_FALSE(l.empty()) << describe(r);
  EXPECT_EQ(l.back().rfind("tfm: error: ", 0), 0u) << describe(r);
  EXPECT_TRUE(has(l.back(), needle)) << "expected '" << needle << "' in: " << l.back();
}

// The exit status and stdout + stderr together of `tfm ARGS` run through the shell.
struct ShellRun {
  int code = -1;
  std::string out;
};
inline ShellRun tfm_run(const std::string& args) {
  ShellRun r;
  const std::string cmd = std::string(TFM_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

// An empty folder `name` under the test temp folder.
inline std::filesystem::path fresh_tmp(const std::string& name) {
  std::filesystem::path p =
      std::filesystem::path(::testing::TempDir()) / ("tfm_cli_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// tests/fixtures/bert (vocab 60, hidden 32, 20 positions) with a 60-line vocab.txt, as in test_cli.cpp.
inline std::string bert_dir(const std::string& dir, const std::string& eol = "\n") {
  std::string m = dir + "/bert";
  std::filesystem::create_directories(m);
  std::filesystem::copy_file(fixture("bert/config.json"), m + "/config.json");
  std::filesystem::copy_file(fixture("bert/model.safetensors"), m + "/model.safetensors");
  std::string vocab;
  for (const char* w : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",  "a",     "an",    "time",  "flies",
                        "like",  "arrow", "fruit", "banana", "i",    "have", "dream", "cat",   "dog",   "sat",
                        "on",    "mat",   "is",    "was",   "and",   "or",   "to",    "of",    "in",    "it",
                        "he",    "she",   "we",    "they",  "you",   "red",  "blue",  "green", "big",   "small",
                        "run",   "walk",  "eat",   "drink", "sleep", "house", "car",  "tree",  "bird",  "fish",
                        "sun",   "moon",  "star",  "water", "fire",  "one",  "two",   "three", "four",  "five"})
    vocab += std::string(w) + eol;
  spit(m + "/vocab.txt", vocab);
  return m;
}

// A copy of tests/fixtures/d2l_trained (transformer_seq2seq, src/tgt vocab 189/201).
inline std::string seq2seq_dir(const std::string& dir) {
  std::string m = dir + "/seq2seq";
  std::filesystem::copy(fixture("d2l_trained"), m, std::filesystem::copy_options::recursive);
  return m;
}

// The first `n` lines of fra.txt with the given line end.
inline std::string fra_corpus(const std::string& path, int n, const std::string& eol) {
  std::ifstream in(data_dir() + "/fra-eng/fra.txt", std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << data_dir() << "/fra-eng/fra.txt";
  std::string text, line;
  for (int i = 0; i < n && std::getline(in, line); ++i) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    text += line + eol;
  }
  spit(path, text);
  return path;
}

inline std::vector<std::string> d2l_train_args(const std::string& data, const std::string& out,
                                               const std::string& epochs) {
  return {"train", "--data", data, "--out", out, "--num-examples", "40", "--epochs", epochs, "--threads", "1",
          "--seed", "0", "--no-progress"};
}

// A small subword recipe config (as test_recipe.cpp's tiny_config) written to dir/recipe.json; data_dir is the
// shared data unless `with_data_dir` is false.
inline std::string recipe_json(const std::string& dir, nlohmann::json extra = nlohmann::json::object(),
                               bool with_data_dir = true) {
  nlohmann::json j = {{"train_limit", 300}, {"valid_limit", 16}, {"vocab_size", 500},  {"num_hiddens", 16},
                      {"num_layers", 1},    {"num_heads", 2},    {"ffn_num_hiddens", 32}, {"max_len", 40},
                      {"num_steps", 12},    {"max_tokens", 800}, {"epochs", 1},      {"warmup_steps", 5},
                      {"checkpoint_every", 4}};
  if (with_data_dir) j["data_dir"] = data_dir();
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  std::string p = dir + "/recipe.json";
  spit(p, j.dump(2));
  return p;
}

}  // namespace tfm::test
