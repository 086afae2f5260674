// `tfm translate`: outputs against reference values written by the PyTorch scripts
//   tests/fixtures/d2l_trained/predictions.json       greedy translations (d2l predict_seq2seq, make_fixtures.py)
//   tests/fixtures/d2l_trained/beam_predictions.json  beam-search translations (make_beam_fixtures.py)
// then its input handling (warnings, empty input, --suppress-unk) and --attention-png. The tool runs as a subprocess
// (TFM_BINARY) with OMP_NUM_THREADS=1.
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

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> lines;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

// PNG height in pixels (IHDR, bytes 20..23, big-endian).
int64_t png_height(const std::string& png) {
  if (png.size() < 24 || png.compare(1, 3, "PNG") != 0) return -1;
  int64_t h = 0;
  for (int i = 20; i < 24; ++i) h = h * 256 + (unsigned char)png[i];
  return h;
}

TEST(CliTranslateReference, GreedyReproducesTheReferencePredictions) {
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
TEST(CliTranslateReference, BeamReproducesThePyTorchReferenceBeamSearch) {
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

// translate: a source longer than num_steps is reported; warnings are capped (one summary line) or hidden with
// --quiet; empty stdin is empty output; --attention-png never plots another sentence than sentence 1.
TEST(CliTranslateInput, WarningsEmptyInputAndAttentionPng) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string s2s = seq2seq_dir(dir);
  // num_steps is 10 (fixture config.json): 12 words + <eos> are cut.
  TfmRun r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "go go go go go go go go go go go ."});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(has(r.err, "sentence 1: 12 tokens + <eos> are more than the model's num_steps (10)")) << r.err;
  // 30 sentences with an unknown word: 10 warnings and a count, not 30 lines.
  std::string input;
  for (int i = 0; i < 30; ++i) input += "zzqx" + std::to_string(i) + " .\n";
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1"}, input);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(lines(r.out).size(), 30u);
  std::vector<std::string> err = lines(r.err);
  ASSERT_EQ(err.size(), 11u) << r.err;
  EXPECT_EQ(err.back(), "warning: 20 more warnings not shown (--quiet hides all)");
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--quiet"}, input);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(lines(r.out).size(), 30u);
  EXPECT_EQ(r.err, "");
  // Empty stdin: empty output, exit 0.
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1"}, "");
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, "");
  // --attention-png: sentence 1 empty -> error, nothing written; no input at all -> error.
  const std::string png = dir + "/att.png";
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--attention-png", png, "", "go ."});
  expect_error(r, "--attention-png plots sentence 1, which is empty");
  EXPECT_FALSE(fs::exists(png));
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--attention-png", png}, "\ngo .\n");
  expect_error(r, "--attention-png plots sentence 1, which is empty");
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--attention-png", png}, "");
  expect_error(r, "--attention-png: no sentence to plot");
  EXPECT_FALSE(fs::exists(png));
}

// --attention-png with --beam plots the printed (beam) translation: the cross-attention panels have one row per
// generated token (+ <eos>), so a beam translation with fewer tokens than greedy's gives a shorter figure, one with
// more a taller one. Sentences from the PyTorch beam fixture where the beam's length differs from greedy's.
TEST(CliTranslateAttention, PngWithBeamPlotsTheBeamTranslation) {
  TempFolder tmp;
  const auto fx = nlohmann::json::parse(slurp(fixture("d2l_trained/beam_predictions.json")));
  auto words = [](const std::string& s) { return std::count(s.begin(), s.end(), ' ') + 1; };
  int checked = 0;
  for (const auto& c : fx["cases"]) {
    if (c["length_penalty"] != 0.0) continue;
    for (const auto& sent : c["sentences"]) {
      const std::string src = sent["src"], pred = sent["pred"], greedy = sent["greedy_pred"];
      if (words(pred) == words(greedy) || checked >= 3) continue;
      const std::string beam_png = tmp.path + "/beam.png", greedy_png = tmp.path + "/greedy.png";
      TfmRun b = run_tfm_in(tmp.path, {"translate", "--model", fixture("d2l_trained"), "--beam",
                                       std::to_string(c["beam_size"].get<int>()), "--attention-png", beam_png, src});
      ASSERT_EQ(b.exit_code, 0) << b.describe();
      ASSERT_EQ(b.out, pred + "\n");
      TfmRun g = run_tfm_in(tmp.path, {"translate", "--model", fixture("d2l_trained"), "--attention-png", greedy_png, src});
      ASSERT_EQ(g.exit_code, 0) << g.describe();
      ASSERT_EQ(g.out, greedy + "\n");
      const int64_t hb = png_height(slurp(beam_png)), hg = png_height(slurp(greedy_png));
      ASSERT_GT(hb, 0);
      ASSERT_GT(hg, 0);
      if (words(pred) < words(greedy))
        EXPECT_LT(hb, hg) << "'" << src << "': beam '" << pred << "', greedy '" << greedy << "'";
      else
        EXPECT_GT(hb, hg) << "'" << src << "': beam '" << pred << "', greedy '" << greedy << "'";
      ++checked;
    }
  }
  EXPECT_GE(checked, 2);
}

// Beam search (and greedy decoding) emitted <unk> with no way to suppress it (CTranslate2's disable_unk).
// Greedy: removing <unk> from each step's choice leaves every translation that had no <unk> unchanged (its argmax
// was never <unk>), and changes every one that had.
TEST(TranslateSuppressUnk, NoUnkIsGeneratedAndOtherwiseGreedyIsUnchanged) {
  tfm::test::TempFolder t;
  const std::string d2l = fixture("d2l_trained");
  const std::vector<std::string> sentences = {"go .", "i lost .", "who are you ?", "help !", "jump .", "i'm 19 ."};
  std::vector<std::string> args = {"translate", "--quiet", "--model", d2l};
  args.insert(args.end(), sentences.begin(), sentences.end());
  TfmRun plain = run_tfm_in(t.path, args);
  args.push_back("--suppress-unk");
  TfmRun sup = run_tfm_in(t.path, args);
  ASSERT_EQ(plain.exit_code, 0) << plain.describe();
  ASSERT_EQ(sup.exit_code, 0) << sup.describe();
  std::istringstream a(plain.out), b(sup.out);
  std::string x, y;
  int with_unk = 0;
  for (size_t i = 0; i < sentences.size(); ++i) {
    ASSERT_TRUE(std::getline(a, x) && std::getline(b, y));
    EXPECT_EQ(y.find("<unk>"), std::string::npos) << sentences[i] << " -> " << y;
    if (x.find("<unk>") == std::string::npos) {
      EXPECT_EQ(x, y) << sentences[i];
    } else {
      ++with_unk;
      EXPECT_NE(x, y) << sentences[i];
    }
  }
  EXPECT_GE(with_unk, 2) << "the fixture sentences include some translated with <unk>";
  args.insert(args.end() - 1, {"--beam", "4"});
  TfmRun beam = run_tfm_in(t.path, args);
  ASSERT_EQ(beam.exit_code, 0) << beam.describe();
  EXPECT_EQ(beam.out.find("<unk>"), std::string::npos) << beam.out;
}

}  // namespace
}  // namespace tfm::test
