// Leftovers found after the first release (polish): option ranges, write errors, attention plots, serve routes.
// Expected values come from the task (ranges written below), from the OS (strerror), or from the Hugging Face
// fixtures; none is copied from tfm's output.
#include <cstring>
#include <string>
#include <vector>

#include "run_tfm.h"
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
      {{"rerank", "--model", "m", "-q", "q", "--top-k", "99999999999", "x"}, "--top-k: must be a whole number"},
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
      {"rerank", "--model", fixture("heads_cross"), "-q", "a cat", "the cat sat", "a dog ran"},
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

}  // namespace
}  // namespace tfm::test
