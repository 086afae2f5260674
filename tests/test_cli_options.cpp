// Command-line options: ranges of numeric options, options refused where they would do nothing, one value per
// option, texts that look like CLI11 lists passed byte for byte. Expected messages are the ranges and wordings the
// commands are meant to give; texts are compared with the same text read from stdin.
#include "cli_util.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "text/bert_tokenizer.h"

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

// Options that do nothing in the given combination are refused, as train does.
TEST(CliOptions, IgnoredCombinationsAreRefused) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir), s2s = seq2seq_dir(dir);
  TfmRun r = tfm(dir, {"encode", "--model", bert, "--seed", "5", "--text", "the cat"});
  expect_error(r, "--seed seeds --init random only");
  EXPECT_EQ(r.exit_code, 2);
  r = tfm(dir, {"translate", "--model", s2s, "--length-penalty", "1", "go ."});
  expect_error(r, "--length-penalty applies to beam search only");
  EXPECT_EQ(r.exit_code, 2);
  r = tfm(dir, {"encode", "--model", bert, "--text", "a", "--text", "b", "--pair", "c"});
  expect_error(r, "--pair: give one per --text");
  // The combinations that use them still work.
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--beam", "2", "--length-penalty", "1", "go ."});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  r = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--init", "random", "--seed", "5", "--text", "the cat"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

// Options with no effect are refused, as --length-penalty without --beam is.
TEST(CliOptions, WithoutEffectAreRefused) {
  tfm::test::TempFolder t;
  for (const char* f : {"--sampling-topp", "--sampling-temperature"})
    tfm::test::expect_one_line_error(
        run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), f, "0.5", "go ."}), "--sampling-topk");
  TfmRun sampled = run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--sampling-topk", "0",
                                       "--sampling-topp", "0.5", "--seed", "1", "go ."});
  EXPECT_EQ(sampled.exit_code, 0) << sampled.describe();
  tfm::test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe dog is bad,neg\n");
  const std::vector<std::string> base = {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                         t.path + "/train.csv", "--out", t.path + "/o", "--epochs", "1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_tfm_in(t.path, a);
  };
  tfm::test::expect_one_line_error(with({"--mlm-probability", "0.5"}), "--mlm-probability is the masking rate");
  tfm::test::expect_one_line_error(with({"--labels", ""}), "--labels: no label names");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));
}

// --quantize-output-projection without --dtype bf16 / int8 changed nothing and was accepted silently.
TEST(CliOptions, QuantizedOutputProjectionNeedsAReducedDtype) {
  tfm::test::TempFolder t;
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--quantize-output-projection", "go ."}),
      "--quantize-output-projection");
  TfmRun ok = run_tfm_in(t.path, {"translate", "--quiet", "--model", fixture("d2l_trained"), "--dtype", "bf16",
                                  "--quantize-output-projection", "go ."});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

// --bad-words took every following word as another bad word: `--bad-words va "go ." "i lost ."` printed nothing,
// exited 0 and waited on stdin. One value per option, as --help says.
TEST(CliOptions, BadWordsTakesOneValueAndTheSentencesStay) {
  tfm::test::TempFolder t;
  TfmRun r = run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--bad-words", "va", "go .", "i lost ."});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  TfmRun piped = run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--bad-words", "va", "--quiet"},
                            "go .\ni lost .\n");
  ASSERT_EQ(piped.exit_code, 0) << piped.describe();
  EXPECT_EQ(r.out, piped.out);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  EXPECT_EQ(r.out.find("va "), std::string::npos) << r.out;  // the bad word is banned
}

// Absurdly large, negative and non-integer values of numeric options fail before any work, with one line naming
// the allowed range, exit 2.
TEST(CliOptions, NumericOptionsNameTheirRange) {
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

// Range messages print whole numbers in full: "from 1 to 67108864", not "from 1 to 6.71089e+07".
TEST(CliOptions, RangeMessagesPrintWholeNumbers) {
  ShellRun r = tfm_run("embed --model " + fixture("st_mean") + " --input " + fixture("st_mean/sentences.txt") +
                     " -o /dev/null.npy --batch-tokens 0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("from 1 to 67108864"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("e+"), std::string::npos) << r.out;
}

// download refused --threads, which the README says every command takes.
TEST(CliOptions, DownloadTakesThreadsLikeEveryCommand) {
  tfm::test::TempFolder t;
  TfmRun r = run_tfm_in(t.path, {"download", "--threads", "1", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("--threads"), std::string::npos) << r.out;
}

// The README's sentence on the encoder commands' default --dtype says what --help says: int8 for a folder
// `tfm convert --dtype int8` wrote, else fp32 (a bf16 folder computes in fp32 unless --dtype bf16 is given).
TEST(CliOptions, ReadmeDefaultDtypeMatchesHelp) {
  tfm::test::TempFolder t;
  TfmRun r = run_tfm_in(t.path, {"embed", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::string help = r.out;
  help.erase(std::remove(help.begin(), help.end(), '\n'), help.end());  // CLI11 wraps the description
  help.erase(std::unique(help.begin(), help.end(), [](char a, char b) { return a == ' ' && b == ' '; }), help.end());
  EXPECT_NE(help.find("int8 for a 'tfm convert --dtype int8' folder"), std::string::npos) << r.out;
  EXPECT_NE(help.find("else fp32"), std::string::npos) << r.out;
  std::string readme = slurp(source_dir() + "/README.md");
  std::replace(readme.begin(), readme.end(), '\n', ' ');
  EXPECT_NE(readme.find("default: int8 for a folder `tfm convert --dtype int8` wrote, else fp32"), std::string::npos);
  EXPECT_EQ(readme.find("default: as the folder stores it"), std::string::npos);
}

// CLI11 reads "[a, b]" as a list of values (its vector syntax), also after "--": "[MASK]" reached fill-mask as
// "MASK", "[1, 2, 3]" became three texts and "[CLS]" became "CLS". A text typed on the command line must give what
// the same text read from a file or stdin gives.
TEST(CliTextArguments, BracketedTextReachesTheCommandByteForByte) {
  tfm::test::TempFolder t;
  const std::string mlm = fixture("heads_mlm");
  for (const std::string text : {"[1, 2, 3]", "[CLS]", "[MASK]", "[]", "[a,b]", "\x1f[x]"}) {
    TfmRun arg = run_tfm_in(t.path, {"tokenize", "--model", mlm, text});
    TfmRun after_dashes = run_tfm_in(t.path, {"tokenize", "--model", mlm, "--", text});
    ASSERT_EQ(arg.exit_code, 0) << arg.describe();
    ASSERT_EQ(after_dashes.exit_code, 0) << after_dashes.describe();
    // One line per text, with the tokens the tokenizer gives the text itself.
    const std::vector<std::string> want = tfm::BertTokenizer::from_dir(mlm).encode(text).tokens;
    ASSERT_EQ(json_lines(arg.out).size(), 1u) << text << "\n" << arg.out;
    EXPECT_EQ(json_lines(arg.out)[0]["tokens"].get<std::vector<std::string>>(), want) << text;
    EXPECT_EQ(arg.out, after_dashes.out) << text;
  }
  // fill-mask on a bare "[MASK]": one list of candidates, not "input 1 has no [MASK] token: 'MASK'".
  TfmRun fm = run_tfm_in(t.path, {"fill-mask", "--model", mlm, "[MASK]"});
  ASSERT_EQ(fm.exit_code, 0) << fm.describe();
  ASSERT_EQ(json_lines(fm.out).size(), 1u);
  EXPECT_TRUE(json_lines(fm.out)[0].is_array());
  // translate: the sentence on the command line and the same sentence on stdin translate alike.
  const std::string d2l = fixture("d2l_trained");
  TfmRun on_line = run_tfm_in(t.path, {"translate", "--quiet", "--model", d2l, "[go] ."});
  TfmRun on_stdin = run_tfm_in(t.path, {"translate", "--quiet", "--model", d2l}, "[go] .\n");
  ASSERT_EQ(on_line.exit_code, 0) << on_line.describe();
  ASSERT_EQ(on_stdin.exit_code, 0) << on_stdin.describe();
  EXPECT_EQ(on_line.out, on_stdin.out);
  TfmRun plain = run_tfm_in(t.path, {"translate", "--quiet", "--model", d2l, "go ."});
  EXPECT_NE(on_line.out, plain.out) << "the brackets were dropped";
  // An option's value in the --name=VALUE form is left whole too.
  TfmRun eq = run_tfm_in(t.path, {"tokenize", "--model", mlm, "--pair=[SEP]", "a"});
  ASSERT_EQ(eq.exit_code, 0) << eq.describe();
  TfmRun sep = run_tfm_in(t.path, {"tokenize", "--model", mlm, "--pair", "[SEP]", "a"});
  EXPECT_EQ(eq.out, sep.out);
}

}  // namespace
}  // namespace tfm::test
