// `tfm translate` and `tfm bleu` outputs against reference values written by the PyTorch / sacreBLEU scripts:
//   tests/fixtures/d2l_trained/predictions.json       greedy translations (d2l predict_seq2seq, make_fixtures.py)
//   tests/fixtures/d2l_trained/beam_predictions.json  beam-search translations (make_beam_fixtures.py)
//   tests/fixtures/nmt/d2l_600.json "bleu"           d2l sentence BLEU (make_nmt_fixtures.py)
//   tests/fixtures/bleu/sacrebleu_cases.json          sacreBLEU corpus BLEU (make_bleu_fixtures.py)
// The tool runs as a subprocess (TFM_BINARY) with OMP_NUM_THREADS=1.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using tfm::test::fixture;

struct RunOutput {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": missing");
  return nlohmann::json::parse(f);
}

// A fresh folder for the current test, removed unless the test failed.
struct TempDir {
  std::string path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    fs::path d = fs::path(::testing::TempDir()) /
                 ("tfm_ref_" + std::to_string(getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(d);
    fs::create_directories(d);
    path = d.string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!::testing::Test::HasFailure()) fs::remove_all(path, ec);
  }
};

// Runs TFM_BINARY with args (no shell), stdout/stderr through files in dir.
RunOutput run_tfm(const std::string& dir, const std::vector<std::string>& args) {
  RunOutput r;
  const std::string in = dir + "/.stdin", out = dir + "/.stdout", err = dir + "/.stderr";
  spit(in, "");
  std::vector<std::string> argv_s = {TFM_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env_s.push_back(*e);
  env_s.push_back("OMP_NUM_THREADS=1");
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << argv[0] << ": " << std::strerror(rc);
    return r;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> lines;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST(CliReference, TranslateGreedyReproducesTheReferencePredictions) {
  TempDir dir;
  const auto fx = load_json(fixture("d2l_trained/predictions.json"));
  std::vector<std::string> args = {"translate", "--model", fixture("d2l_trained")}, want;
  for (const auto& p : fx["predictions"]) {
    args.push_back(p["src"]);
    want.push_back(p["pred"]);
  }
  ASSERT_GE(want.size(), 6u);
  RunOutput r = run_tfm(dir.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out), want) << r.err;
}

// Per (beam_size, length_penalty) of the fixture, one run with all its sentences. The fixture's sentences were
// chosen where the beam differs from greedy, from a search stopping at the first K finished, or between length
// penalties, so each of those mistakes changes some line.
TEST(CliReference, TranslateBeamReproducesThePyTorchReferenceBeamSearch) {
  TempDir dir;
  const auto fx = load_json(fixture("d2l_trained/beam_predictions.json"));
  int sentences = 0, differ_from_greedy = 0;
  for (const auto& c : fx["cases"]) {
    const int K = c["beam_size"];
    const double alpha = c["length_penalty"];
    std::vector<std::string> args = {"translate", "--model", fixture("d2l_trained"), "--beam", std::to_string(K)},
                             want;
    if (alpha != 0) {
      args.push_back("--length-penalty");
      args.push_back(std::to_string(alpha));
    }
    for (const auto& s : c["sentences"]) {
      args.push_back(s["src"]);
      want.push_back(s["pred"]);
      differ_from_greedy += s["pred"] != s["greedy_pred"];
    }
    sentences += (int)want.size();
    RunOutput r = run_tfm(dir.path, args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto got = lines_of(r.out);
    ASSERT_EQ(got.size(), want.size()) << r.out << r.err;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i]) << "beam " << K << " length penalty " << alpha << ": '"
                                 << c["sentences"][i]["src"].get<std::string>() << "'";
  }
  EXPECT_GE(sentences, 40);
  EXPECT_GE(differ_from_greedy, 8);
}

TEST(CliReference, BleuSentenceModePrintsTheD2lReferenceScores) {
  TempDir dir;
  const auto fx = load_json(fixture("nmt/d2l_600.json"));
  int checked = 0;
  for (const auto& c : fx["bleu"]) {
    const std::string pred = c["pred"], label = c["label"];
    const int k = c["k"];
    RunOutput r = run_tfm(dir.path, {"bleu", pred, label, "--k", std::to_string(k)});
    ASSERT_EQ(r.exit_code, 0) << pred << " | " << label << ": " << r.err;
    char want[32];
    std::snprintf(want, sizeof want, "%.3f\n", c["bleu"].get<double>());  // tfm prints 3 decimals
    EXPECT_EQ(r.out, want) << "pred '" << pred << "' label '" << label << "' k " << k;
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

TEST(CliReference, BleuCorpusModePrintsTheSacrebleuScoreLines) {
  TempDir dir;
  const auto fx = load_json(fixture("bleu/sacrebleu_cases.json"));
  int checked = 0;
  for (const auto& c : fx["corpora"]) {
    std::string refs, hyps;
    for (const auto& l : c["refs"]) refs += l.get<std::string>() + "\n";
    for (const auto& l : c["hyps"]) hyps += l.get<std::string>() + "\n";
    const std::string ref_path = dir.path + "/ref.txt", hyp_path = dir.path + "/hyp.txt";
    spit(ref_path, refs);
    spit(hyp_path, hyps);
    RunOutput r = run_tfm(dir.path, {"bleu", "--corpus", ref_path, hyp_path});
    ASSERT_EQ(r.exit_code, 0) << c["name"] << ": " << r.err;
    EXPECT_EQ(r.out, c["format"].get<std::string>() + "\n") << c["name"];
    ++checked;
  }
  EXPECT_GE(checked, 10);
}
