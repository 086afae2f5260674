// tfm translate's options refused in the words of the problem: --source-lang on a Marian folder (which reads no
// source language), --min-length beyond the model's decoder positions (no translation could end), and a decoding
// limit above the positions named as max_new_tokens, the name generation_config.json and the server use.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "run_tfm.h"
#include "test_util.h"

namespace tfm {
namespace {

using test::fixture;

TEST(CliTranslateOptions, SourceLangOnAMarianFolderIsRefused) {
  test::TempFolder t;
  auto r = test::run_tfm_in(t.path, {"translate", "--model", fixture("marian"), "--source-lang", "en", "Hello."});
  test::expect_one_line_error(r, "source_lang 'en': a Marian folder translates from the one source language");
  // M2M100 takes it.
  r = test::run_tfm_in(t.path, {"translate", "--model", fixture("m2m100"), "--source-lang", "en", "--target-lang",
                                "fr", "--beam", "1", "--threads", "1", "Hello."});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
}

TEST(CliTranslateOptions, MinLengthAboveThePositionsIsRefused) {
  test::TempFolder t;
  // The marian fixture has max_position_embeddings 64.
  auto r = test::run_tfm_in(t.path, {"translate", "--model", fixture("marian"), "--min-length", "65", "Hello."});
  test::expect_one_line_error(r, "min_length 65 is more than the model's 64 decoder positions");
  r = test::run_tfm_in(t.path, {"translate", "--model", fixture("marian"), "--min-length", "3", "--beam", "1",
                                "--threads", "1", "Hello."});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
}

// d2l folders too: their positional encoding has max_len 1000 positions.
TEST(CliTranslateOptions, MinLengthAboveTheD2lPositionsIsRefused) {
  test::TempFolder t;
  auto r = test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--min-length", "1001", "go ."});
  test::expect_one_line_error(r, "min_length 1001 is more than the model's 1000 decoder positions");
}

// A target prefix word outside a word vocabulary is read as <unk>: warned as the sources' unknown words are
// (--quiet hides it); known words are not.
TEST(CliTranslateOptions, UnknownTargetPrefixWordsAreWarned) {
  test::TempFolder t;
  auto r = test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--target-prefix",
                                     "zzqx je", "go ."});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("warning: --target-prefix: not in the target vocabulary (read as <unk>): zzqx\n"),
            std::string::npos) << r.err;
  r = test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--target-prefix", "je", "go ."});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err.find("--target-prefix"), std::string::npos) << r.err;
  r = test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--quiet", "--target-prefix",
                                "zzqx", "go ."});
  EXPECT_EQ(r.err.find("--target-prefix"), std::string::npos) << r.err;
}

// --num-hypotheses N with sampling: N samples per sentence, one a line; repeated lines draw independently unless
// --seed-per-sentence.
TEST(CliTranslateOptions, SamplingNumHypothesesPrintsNSamples) {
  test::TempFolder t;
  auto r = test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--sampling-topk", "0",
                                     "--sampling-temperature", "3", "--num-hypotheses", "3", "--seed", "4",
                                     "--threads", "1", "--input", "-"},
                            "i am a teacher .\ngo .\n");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 6) << r.out;
  const std::string same = "i am a teacher .\ni am a teacher .\ni am a teacher .\n";
  r = test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--sampling-topk", "0",
                                "--sampling-temperature", "3", "--seed", "4", "--threads", "1",
                                "--seed-per-sentence", "--input", "-"}, same);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::istringstream lines(r.out);
  std::string a, b, c;
  std::getline(lines, a), std::getline(lines, b), std::getline(lines, c);
  EXPECT_TRUE(a == b && b == c) << r.out;
}

TEST(CliTranslateOptions, DecodingLimitIsNamedMaxNewTokens) {
  test::TempFolder t;
  auto r = test::run_tfm_in(t.path, {"translate", "--model", fixture("marian"), "--max-steps", "100000", "Hello."});
  test::expect_one_line_error(r, "max_new_tokens (max_steps, --max-steps) must be from 0");
}

}  // namespace
}  // namespace tfm
