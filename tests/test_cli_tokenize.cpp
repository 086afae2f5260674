// `tfm tokenize`: several texts and pairs in one call, each equal to tokenizing it alone; --decode of no ids and
// of ids the vocabulary lacks, as Hugging Face tokenizers' decode (tests/fixtures/tokenizer/detail_cases.json).
#include "cli_util.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

// tokenize takes several texts: one JSON line each, equal to tokenizing each alone.
TEST(CliTokenize, SeveralTextsGiveOneLineEach) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir);
  TfmRun a = tfm(dir, {"tokenize", "--model", bert, "the cat"});
  TfmRun b = tfm(dir, {"tokenize", "--model", bert, "a red car", "--pair", "one"});
  TfmRun both = tfm(dir, {"tokenize", "--model", bert, "the cat", "a red car"});
  ASSERT_EQ(both.exit_code, 0) << describe(both);
  TfmRun alone_b = tfm(dir, {"tokenize", "--model", bert, "a red car"});
  EXPECT_EQ(both.out, a.out + alone_b.out);
  TfmRun pairs = tfm(dir, {"tokenize", "--model", bert, "the cat", "--pair", "two", "a red car", "--pair", "one"});
  ASSERT_EQ(pairs.exit_code, 0) << describe(pairs);
  TfmRun a_pair = tfm(dir, {"tokenize", "--model", bert, "the cat", "--pair", "two"});
  EXPECT_EQ(pairs.out, a_pair.out + b.out);
  TfmRun bad = tfm(dir, {"tokenize", "--model", bert, "the cat", "a red car", "--pair", "one"});
  expect_error(bad, "--pair: give one per TEXT");
}

// --decode with no ids prints an empty line (tokenizers' decode([]) is ""); ids without a token are skipped as
// tokenizers' decode skips them; a negative id is not an id.
TEST(CliTokenize, DecodeOfNoIdsAndOfIdsWithoutATokenIsHuggingFaces) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir);
  TfmRun none = tfm(dir, {"tokenize", "--model", bert, "--decode"});
  ASSERT_EQ(none.exit_code, 0) << describe(none);
  EXPECT_EQ(none.out, "\n");
  // vocab.txt has 60 words: 17 is "cat", 5 "the"; 60 and 1000 have no token.
  TfmRun known = tfm(dir, {"tokenize", "--model", bert, "--decode", "5", "17"});
  TfmRun unknown = tfm(dir, {"tokenize", "--model", bert, "--decode", "5", "60", "17", "1000"});
  ASSERT_EQ(known.exit_code, 0) << describe(known);
  EXPECT_EQ(known.out, "the cat\n");
  EXPECT_EQ(unknown.out, known.out) << describe(unknown);
  TfmRun negative = tfm(dir, {"tokenize", "--model", bert, "--decode", "5", "-1"});
  EXPECT_EQ(negative.exit_code, 2) << describe(negative);
  EXPECT_TRUE(has(negative.err, "--decode")) << negative.err;
}

}  // namespace
}  // namespace tfm::test
