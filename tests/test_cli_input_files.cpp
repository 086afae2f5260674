// The input files the commands read: CRLF vocabularies, folders and empty files given as inputs, invalid UTF-8,
// .gz names, the source named in every input error. Expected values come from the LF run of the same input and from
// the messages the commands are meant to give.
#include "cli_util.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "text/vocab.h"

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

// Vocabulary files saved with CRLF (an editor on Windows) load as the LF ones: translate's src/tgt_vocab.txt and
// BERT's vocab.txt. The defect it catches: translate failed with "line 1 is '<unk>\r', expected '<unk>'".
TEST(CliInputFiles, CrlfVocabularyFilesReadAsLf) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string s2s = seq2seq_dir(dir);
  TfmRun lf = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "go .", "i lost ."});
  ASSERT_EQ(lf.exit_code, 0) << describe(lf);
  for (const char* f : {"src_vocab.txt", "tgt_vocab.txt"}) {
    std::string text = slurp(s2s + "/" + f), out;
    for (char c : text) out += c == '\n' ? std::string("\r\n") : std::string(1, c);
    spit(s2s + "/" + f, out);
  }
  TfmRun crlf = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "go .", "i lost ."});
  ASSERT_EQ(crlf.exit_code, 0) << describe(crlf);
  EXPECT_EQ(crlf.out, lf.out);
  EXPECT_EQ(Vocab::load(s2s + "/src_vocab.txt").size(), 189);  // config.json src_vocab_size

  const std::string b_lf = bert_dir(dir + "/lf"), b_crlf = bert_dir(dir + "/crlf", "\r\n");
  TfmRun t1 = tfm(dir, {"tokenize", "--model", b_lf, "the cat sat on the mat"});
  TfmRun t2 = tfm(dir, {"tokenize", "--model", b_crlf, "the cat sat on the mat"});
  ASSERT_EQ(t1.exit_code, 0) << describe(t1);
  EXPECT_EQ(t1.out, t2.out);
}

// a folder given as the input file, and an empty file, gave "X: is a folder" / no rows and exit 0
// in embed but "X: read error: Is a directory" / "X: empty file" in classify, rerank and fill-mask. Now one answer
// in all four: a folder is io/text_file's check_not_folder message; an empty file is an empty output and exit 0
// (embed's documented [0, dim] array, EmbedCli.EmptyLineIsAnErrorNamingItUnlessSkipped; no lines from classify and
// fill-mask, which print one line per input; rerank's empty ranking "[]").
TEST(CliInputFiles, AFolderAndAnEmptyFileGiveTheSameAnswerInEveryCommand) {
  tfm::test::TempFolder t;
  const std::string dir = t.path + "/texts", empty = t.path + "/empty.txt";
  std::filesystem::create_directory(dir);
  tfm::test::spit(empty, "");
  struct Command {
    std::vector<std::string> args;
    std::string empty_stdout;
  };
  const std::vector<Command> commands = {
      {{"embed", "-q", "--model", fixture("st_mean")}, ""},
      {{"classify", "--model", fixture("heads_seqcls")}, ""},
      {{"rerank", "--model", fixture("heads_cross"), "--query", "a cat"}, "[]\n"},
      {{"fill-mask", "--model", fixture("heads_mlm")}, ""}};
  for (const auto& c : commands) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--input", dir});
    tfm::test::expect_one_line_error(run_tfm_in(t.path, args), dir + ": is a folder, expected a file");
    args = c.args;
    args.insert(args.end(), {"--input", empty});
    TfmRun r = run_tfm_in(t.path, args);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out, c.empty_stdout) << c.args[0];
    EXPECT_EQ(r.err.find("error"), std::string::npos) << c.args[0] << ": " << r.err;
  }
  // Without texts or --input the commands still ask for them.
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls")}),
                                   "give texts to classify");
}

// bad UTF-8 was a 1-based column in files read whole (classify --input, the NMT corpus) and a
// 0-based byte offset elsewhere (arguments, embed --input, the library). One unit now: the 0-based byte offset in
// the line or text.
TEST(CliInputFiles, InvalidUtf8IsAByteOffsetInEveryCommand) {
  tfm::test::TempFolder t;
  const std::string bad = t.path + "/bad.txt";
  tfm::test::spit(bad, "the cat\nab\xff" "c\n");
  const std::vector<std::vector<std::string>> runs = {
      {"classify", "--model", fixture("heads_seqcls"), "--input", bad},
      {"classify", "--model", fixture("heads_seqcls"), "ab\xff" "c"},
      {"fill-mask", "--model", fixture("heads_mlm"), "--input", bad},
      {"embed", "-q", "--model", fixture("st_mean"), "--input", bad}};
  for (const auto& args : runs) {
    TfmRun r = run_tfm_in(t.path, args);
    tfm::test::expect_one_line_error(r, "byte offset 2");
    EXPECT_EQ(r.err.find("column"), std::string::npos) << r.err;
  }
}

// Reading a folder gave "basic_filebuf::underflow error reading the file: Is a directory" (score) and
// "adir: read error" (tokenize); every other command says "is a folder, expected a file".
TEST(CliInputFiles, ScoreAndTokenizeNameAFolderGivenAsAFile) {
  tfm::test::TempFolder t;
  std::filesystem::create_directory(t.path + "/adir");
  const std::string d = t.path + "/adir";
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"score", "--model", fixture("d2l_trained"), "--source", d, "--target", d}),
      d + ": is a folder, expected a file");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"tokenize", "--model", fixture("heads_seqcls"), "--input", d}),
                                   d + ": is a folder, expected a file");
}

// A file named .gz that is not gzip was read as plain text (zlib passes it through).
TEST(CliInputFiles, AGzNameThatIsNotGzipIsRefused) {
  tfm::test::TempFolder t;
  tfm::test::spit(t.path + "/fake.gz", "bad gz\n");
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", t.path + "/fake.gz", "-o", t.path + "/v.npy"}),
      "fake.gz: not a gzip file");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/v.npy"));
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "--input", t.path + "/fake.gz"}),
      "fake.gz: not a gzip file");
}

// score folded a third TAB field into the target; invalid UTF-8 did not name where it came from.
TEST(CliInputFiles, ScoreAndTranslateInputErrorsNameTheirSource) {
  tfm::test::TempFolder t;
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"score", "--model", fixture("d2l_trained")}, "go .\tva !\textra\n"),
      "stdin line 1: expected 'source<TAB>target' (more than one TAB)");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"score", "--model", fixture("d2l_trained")}, "go .\tva \xff\n"),
                                   "stdin line 1: target");
  tfm::test::spit(t.path + "/mixed.en", "go .\ncaf\xc3 .\n");
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--input", t.path + "/mixed.en", "-q"}),
      t.path + "/mixed.en: sentence 2: invalid UTF-8");
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"rerank", "--model", fixture("heads_cross"), "--query", "\xff\xfe", "a"}), "--query: invalid UTF-8");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "--prompt", "\xff",
                                                       "-i", "-", "-o", t.path + "/v.npy"},
                                              "hello\n"),
                                   "--prompt: invalid UTF-8");
}

}  // namespace
}  // namespace tfm::test
