// tfm translate's options refused in the words of the problem: --source-lang on a Marian folder (which reads no
// source language), --min-length beyond the model's decoder positions (no translation could end), and a decoding
// limit above the positions named as max_new_tokens, the name generation_config.json and the server use.
#include <gtest/gtest.h>

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

TEST(CliTranslateOptions, DecodingLimitIsNamedMaxNewTokens) {
  test::TempFolder t;
  auto r = test::run_tfm_in(t.path, {"translate", "--model", fixture("marian"), "--max-steps", "100000", "Hello."});
  test::expect_one_line_error(r, "max_new_tokens (max_steps, --max-steps) must be from 0");
}

}  // namespace
}  // namespace tfm
