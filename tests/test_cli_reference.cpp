// `tfm translate` and `tfm bleu` outputs against reference values written by the PyTorch / sacreBLEU scripts:
//   tests/fixtures/d2l_trained/predictions.json       greedy translations (d2l predict_seq2seq, make_fixtures.py)
//   tests/fixtures/d2l_trained/beam_predictions.json  beam-search translations (make_beam_fixtures.py)
//   tests/fixtures/nmt/d2l_600.json "bleu"           d2l sentence BLEU (make_nmt_fixtures.py)
//   tests/fixtures/bleu/sacrebleu_cases.json          sacreBLEU corpus BLEU (make_bleu_fixtures.py)
// The tool runs as a subprocess (TFM_BINARY) with OMP_NUM_THREADS=1.
#include "test_paths.h"
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

#include "run_tfm.h"
#include "test_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using tfm::test::fixture;

using tfm::test::spit;
using TempDir = tfm::test::TempFolder;
using RunOutput = tfm::test::TfmRun;

nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": missing");
  return nlohmann::json::parse(f);
}

// Runs TFM_BINARY with args (no shell), stdout/stderr through files in dir.
RunOutput run_tfm(const std::string& dir, const std::vector<std::string>& args) {
  return tfm::test::run_tfm_in(dir, args);
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
