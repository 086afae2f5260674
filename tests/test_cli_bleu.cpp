// `tfm bleu` outputs against reference values written by the PyTorch / sacreBLEU scripts:
//   tests/fixtures/nmt/d2l_600.json "bleu"           d2l sentence BLEU (make_nmt_fixtures.py)
//   tests/fixtures/bleu/sacrebleu_cases.json          sacreBLEU corpus BLEU (make_bleu_fixtures.py)
// The tool runs as a subprocess (TFM_BINARY) with OMP_NUM_THREADS=1.
#include "cli_util.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tfm::test {
namespace {

namespace fs = std::filesystem;
using RunOutput = TfmRun;

nlohmann::json load_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": missing");
  return nlohmann::json::parse(f);
}

// Runs TFM_BINARY with args (no shell), stdout/stderr through files in dir.
RunOutput run_tfm(const std::string& dir, const std::vector<std::string>& args) { return run_tfm_in(dir, args); }


TEST(CliBleuReference, SentenceModePrintsTheD2lReferenceScores) {
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

TEST(CliBleuReference, CorpusModePrintsTheSacrebleuScoreLines) {
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

}  // namespace
}  // namespace tfm::test
