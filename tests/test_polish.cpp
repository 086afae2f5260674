// Leftovers found after the first release (polish): option ranges, write errors, attention plots, serve routes.
// Expected values come from the task (ranges written below), from the OS (strerror), or from the Hugging Face
// fixtures; none is copied from tfm's output.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/heads.h"
#include "run_tfm.h"
#include "text/bert_tokenizer.h"
#include "test_util.h"

namespace tfm::test {
namespace {

RunOptions to(Stdout where) {
  RunOptions o;
  o.stdout_to = where;
  return o;
}

// Absurdly large, negative and non-integer values of numeric options fail before any work, with one line naming
// the allowed range, exit 2.
TEST(Polish, NumericOptionsNameTheirRange) {
  TempFolder tmp;
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<std::string> train = {"train", "--data", "x", "--out", tmp.path + "/o"};
  auto t = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = train;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const Case cases[] = {
      {t({"--epochs", "99999999999"}), "--epochs: must be a whole number from 1 to 1000000, got '99999999999'"},
      {t({"--epochs", "1e9"}), "--epochs: must be a whole number from 1 to 1000000, got '1e9'"},
      {t({"--epochs", "-1"}), "--epochs: must be a whole number from 1 to 1000000"},
      {t({"--epochs", "2.5"}), "--epochs: must be a whole number from 1 to 1000000"},
      {t({"--batch-size", "-5"}), "--batch-size: must be a whole number from 1 to 1048576"},
      {t({"--batch-size", "1e30"}), "--batch-size: must be a whole number from 1 to 1048576"},
      {t({"--num-steps", "99999999999999999999999"}), "--num-steps: must be a whole number from 1 to 65536"},
      {t({"--num-layers", "100000"}), "--num-layers: must be a whole number from 1 to 1024"},
      {t({"--num-hiddens", "1e12"}), "--num-hiddens: must be a whole number from 1 to 65536"},
      {t({"--num-heads", "0"}), "--num-heads: must be a whole number from 1 to 1024"},
      {t({"--ffn-num-hiddens", "-64"}), "--ffn-num-hiddens: must be a whole number from 1 to 262144"},
      {t({"--num-examples", "1e30"}), "--num-examples: must be a whole number from 0 to 1099511627776"},
      {t({"--lr", "1e300"}), "--lr: must be a number > 0 and <= 10, got '1e300'"},
      {t({"--threads", "-3"}), "--threads: must be a whole number from 1 to 1024, got '-3'"},
      {t({"--threads", "100000"}), "--threads: must be a whole number from 1 to 1024"},
      {{"train", "--config", "c.json", "--max-tokens", "1e30"}, "--max-tokens: must be a whole number from 1 to 16777216"},
      {{"translate", "--model", "m", "--beam", "1000", "go ."}, "--beam: must be a whole number from 1 to 64"},
      {{"translate", "--model", "m", "--beam", "-2", "go ."}, "--beam: must be a whole number from 1 to 64"},
      {{"embed", "--model", "m", "-i", "-", "--batch-size", "1e3"}, "--batch-size: must be a whole number from 1 to"},
      {{"classify", "--model", "m", "--batch-size", "-1", "x"}, "--batch-size: must be a whole number from 1 to 65536"},
      {{"rerank", "--model", "m", "--query", "q", "--top-k", "99999999999", "x"}, "--top-k: must be a whole number"},
      {{"fill-mask", "--model", "m", "--top-k", "0", "x"}, "--top-k: must be a whole number from 1 to 1048576"},
      {{"encode", "--model", "m", "--text", "x", "--max-length", "-1"}, "--max-length: must be a whole number from 0"},
      {{"tokenize", "--model", "m", "x", "--max-length", "1e40"}, "--max-length: must be a whole number from 0"},
      {{"serve", "--model", "m", "--port", "70000"}, "--port: must be a whole number from 0 to 65535"},
      {{"serve", "--model", "m", "--max-beam-size", "-1"}, "--max-beam-size: must be a whole number from 1 to 64"},
      {{"bleu", "a", "b", "--k", "100"}, "--k: must be a whole number from 1 to 16"},
  };
  for (const Case& c : cases) {
    TfmRun r = run_tfm_in(tmp.path, c.args);
    expect_one_line_error(r, c.needle);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
  }
}

// The task-head commands say why stdout failed (before: "cannot write to stdout" and nothing else).
TEST(Polish, HeadCommandsNameTheStdoutWriteError) {
  TempFolder tmp;
  const std::vector<std::vector<std::string>> cmds = {
      {"classify", "--model", fixture("heads_seqcls"), "the cat sat"},
      {"classify", "--model", fixture("heads_tokcls"), "the cat sat"},
      {"fill-mask", "--model", fixture("heads_mlm"), "the [MASK] sat"},
      {"rerank", "--model", fixture("heads_cross"), "--query", "a cat", "the cat sat", "a dog ran"},
  };
  for (const auto& args : cmds) {
    TfmRun ok = run_tfm_in(tmp.path, args);
    ASSERT_EQ(ok.exit_code, 0) << ok.describe();
    TfmRun full = run_tfm_with(tmp.path, args, "", to(Stdout::dev_full));
    expect_one_line_error(full, std::string("cannot write to standard output: ") + std::strerror(ENOSPC));
    TfmRun closed = run_tfm_with(tmp.path, args, "", to(Stdout::closed));
    expect_one_line_error(closed, std::string("cannot write to standard output: ") + std::strerror(EBADF));
  }
}

// PNG height in pixels (IHDR, bytes 20..23, big-endian).
int64_t png_height(const std::string& png) {
  if (png.size() < 24 || png.compare(1, 3, "PNG") != 0) return -1;
  int64_t h = 0;
  for (int i = 20; i < 24; ++i) h = h * 256 + (unsigned char)png[i];
  return h;
}

// --attention-png with --beam plots the printed (beam) translation: the cross-attention panels have one row per
// generated token (+ <eos>), so a beam translation with fewer tokens than greedy's gives a shorter figure, one with
// more a taller one. Sentences from the PyTorch beam fixture where the beam's length differs from greedy's.
TEST(Polish, AttentionPngWithBeamPlotsTheBeamTranslation) {
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

// The character offsets /tokenize returns (token_offsets) equal Hugging Face tokenizers' offset_mapping on texts
// with accents, punctuation and extra spaces (tests/fixtures/tokenizer/bert_base_uncased_offsets.json, from the
// npm tokenizers library: scripts/make_tokenizer_fixtures.js --offsets).
TEST(Polish, TokenOffsetsMatchHuggingFaceOnAccentsAndPunctuation) {
  const auto fx = nlohmann::json::parse(slurp(fixture("tokenizer/bert_base_uncased_offsets.json")));
  BertTokenizer tok = BertTokenizer::from_dir(data_dir() + "/bert-base-uncased");
  ASSERT_GE(fx["cases"].size(), 5u);
  for (const auto& c : fx["cases"]) {
    const std::string text = c["text"];
    Encoding e = tok.encode(text, nullptr, true, 0);
    ASSERT_EQ(e.input_ids, c["ids"].get<std::vector<int64_t>>()) << text;
    auto got = token_offsets(tok, text, e);
    ASSERT_EQ(got.size(), c["offsets"].size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, c["offsets"][i][0].get<int64_t>()) << text << " token " << i;
      EXPECT_EQ(got[i].second, c["offsets"][i][1].get<int64_t>()) << text << " token " << i;
    }
  }
}

// An empty --text fails with one line before any weights are made (it came after "initialising ... randomly").
TEST(Polish, EncodeEmptyTextIsOneErrorLineBeforeInit) {
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", data_dir() + "/bert-base-uncased", "--init", "random",
                                   "--text", "time flies", "--text", ""});
  expect_one_line_error(r, "--text 2 of 2 is empty");
}

// Binary garbage as config.json: the error quotes the bytes escaped (\\xff), never raw, so the terminal shows text.
TEST(Polish, BinaryConfigErrorHasNoRawBytes) {
  TempFolder tmp;
  const std::string m = tmp.path + "/garbage";
  std::filesystem::create_directories(m);
  spit(m + "/config.json", std::string("\xff\xfe\x01\x1b[31mgarbage", 14));
  for (const char* cmd : {"encode", "embed", "translate", "serve", "classify"}) {
    std::vector<std::string> args = {cmd, "--model", m};
    if (std::string(cmd) == "encode") args.insert(args.end(), {"--text", "hi"});
    if (std::string(cmd) == "embed") args.insert(args.end(), {"-i", "-"});
    if (std::string(cmd) == "translate" || std::string(cmd) == "classify") args.push_back("hi");
    TfmRun r = run_tfm_in(tmp.path, args, "hi\n");
    expect_one_line_error(r, "config.json: invalid JSON at byte 1");
    EXPECT_NE(r.err.find("\\xff"), std::string::npos) << r.err;
    for (unsigned char c : r.err) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << cmd << ": byte " << (int)c;
  }
}

}  // namespace
}  // namespace tfm::test
