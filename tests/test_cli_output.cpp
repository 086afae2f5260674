// Where the commands write: a stdout that cannot be written (/dev/full, closed) is an error naming why, and output
// file names must match the format written. Expected messages come from the OS (strerror) and the task.
#include "cli_util.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>
#include <cstring>

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

// Every command that prints exits non-zero with a message when stdout cannot be written: /dev/full and a closed
// stdout. The defect it catches: exit 0 and the output silently lost.
TEST(CliOutput, WriteFailureExitsNonZero) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir), s2s = seq2seq_dir(dir);
  spit(dir + "/ref.txt", "a b c d\n");
  spit(dir + "/hyp.txt", "a b c d\n");
  const std::string corpus = fra_corpus(dir + "/corpus.txt", 40, "\n");
  struct Case {
    std::vector<std::string> args;
    std::string stdin_text;
  };
  const Case cases[] = {
      {{"tokenize", "--model", bert, "the cat"}, ""},
      {{"encode", "--model", bert, "--threads", "1", "--text", "the cat"}, ""},
      {{"translate", "--model", s2s, "--threads", "1", "go ."}, ""},
      {{"translate", "--model", s2s, "--threads", "1"}, "go .\ni lost .\n"},
      {{"translate", "--model", s2s, "--threads", "1", "--beam", "2", "go ."}, ""},
      {{"bleu", "a b c", "a b c"}, ""},
      {{"bleu", "--corpus", dir + "/ref.txt", dir + "/hyp.txt"}, ""},
      {{"data", "list"}, ""},
      {{"--help"}, ""},
      {{"translate", "--help"}, ""},
  };
  for (Stdout mode : {Stdout::dev_full, Stdout::closed}) {
    const char* name = mode == Stdout::dev_full ? "/dev/full" : "closed stdout";
    for (const Case& c : cases) {
      TfmRun r = tfm(dir, c.args, c.stdin_text, mode);
      SCOPED_TRACE(std::string(name) + ": tfm " + c.args[0] + (c.args.size() > 1 ? " " + c.args[1] : ""));
      expect_error(r, "cannot write to standard output");
      EXPECT_EQ(r.exit_code, 1) << describe(r);
    }
    // train prints its summary line last: the model is written, the exit status still reports the lost line.
    const std::string out = dir + "/model_" + std::to_string((int)mode);
    TfmRun r = tfm(dir, d2l_train_args(corpus, out, "1"), "", mode);
    SCOPED_TRACE(std::string(name) + ": tfm train");
    expect_error(r, "cannot write to standard output");
  }
  // The same commands with a writable stdout succeed (the failure above is the output, not the command).
  TfmRun ok = tfm(dir, {"bleu", "--corpus", dir + "/ref.txt", dir + "/hyp.txt"});
  EXPECT_EQ(ok.exit_code, 0) << describe(ok);
  EXPECT_TRUE(has(ok.out, "BLEU = 100.00")) << ok.out;
}

// The task-head commands say why stdout failed (before: "cannot write to stdout" and nothing else).
TEST(CliOutput, HeadCommandsNameTheStdoutWriteError) {
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

// encode -o x.txt wrote .npy data into x.txt, --attention-png a.jpg PNG data into a .jpg.
TEST(CliOutput, NamesMatchTheFormatWritten) {
  tfm::test::TempFolder t;
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"encode", "--model", fixture("heads_seqcls"), "--text", "a", "-o", t.path + "/x.txt"}),
      "must end in .npy");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"),
                                                       "--attention-png", t.path + "/a.jpg", "go ."}),
                                   "must end in .png or .svg");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/x.txt"));
  EXPECT_FALSE(std::filesystem::exists(t.path + "/a.jpg"));
  TfmRun ok = run_tfm_in(t.path, {"encode", "--model", fixture("heads_seqcls"), "--text", "a", "-o", "/dev/null"});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();  // a device is taken as it is
}

}  // namespace
}  // namespace tfm::test
