// --skip-empty of classify, fill-mask and rerank, as tfm embed takes it: empty (or all-space) input lines are left
// out instead of failing, and each result names the input line it comes from ("line": N, 1-based). The results
// themselves are those of the same texts without the empty lines (whose values the head tests check against
// transformers' pipelines).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "run_tfm.h"
#include "test_util.h"

namespace tfm {
namespace {

using test::fixture;

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

TEST(CliSkipEmpty, ClassifyNamesTheInputLineOfEachResult) {
  test::TempFolder t;
  test::spit(t.path + "/in.txt", "the cat is good\n\nthe dog is bad\n   \nlondon\n");
  test::spit(t.path + "/dense.txt", "the cat is good\nthe dog is bad\nlondon\n");
  // Without the flag an empty line is an error that names it and the flag.
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "-i", t.path + "/in.txt"}),
      "line 2 is empty; pass --skip-empty");
  auto r = test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "--skip-empty", "-i",
                                     t.path + "/in.txt", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto want = test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "-i", t.path + "/dense.txt",
                                        "--threads", "1"});
  ASSERT_EQ(want.exit_code, 0) << want.describe();
  const auto got = json_lines(r.out), base = json_lines(want.out);
  ASSERT_EQ(got.size(), 3u) << r.out;
  ASSERT_EQ(base.size(), 3u);
  const int lines[] = {1, 3, 5};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i]["line"], lines[i]) << got[i];
    EXPECT_EQ(got[i]["label"], base[i]["label"]);
    EXPECT_EQ(got[i]["score"], base[i]["score"]);
  }
  // --all-scores: the list under "scores".
  r = test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "--skip-empty", "--all-scores", "-i",
                                t.path + "/in.txt", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const auto all = json_lines(r.out);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2]["line"], 5);
  ASSERT_TRUE(all[2]["scores"].is_array()) << all[2];
  EXPECT_EQ(all[2]["scores"][0]["label"], base[2]["label"]);
}

TEST(CliSkipEmpty, TokenClassificationAndFillMask) {
  test::TempFolder t;
  test::spit(t.path + "/tok.txt", "\nthe man in london\n");
  auto r = test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_tokcls"), "--skip-empty", "--all-tokens",
                                     "-i", t.path + "/tok.txt", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto want = test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_tokcls"), "--all-tokens",
                                        "the man in london", "--threads", "1"});
  ASSERT_EQ(want.exit_code, 0) << want.describe();
  auto got = json_lines(r.out);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["line"], 2);
  EXPECT_EQ(got[0]["entities"], json_lines(want.out)[0]);

  test::spit(t.path + "/mask.txt", "the cat sat on the [MASK].\n \n");
  r = test::run_tfm_in(t.path, {"fill-mask", "--model", fixture("heads_mlm"), "--skip-empty", "-i",
                                t.path + "/mask.txt", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  want = test::run_tfm_in(t.path, {"fill-mask", "--model", fixture("heads_mlm"), "the cat sat on the [MASK].",
                                   "--threads", "1"});
  ASSERT_EQ(want.exit_code, 0) << want.describe();
  got = json_lines(r.out);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0]["line"], 1);
  EXPECT_EQ(got[0]["predictions"], json_lines(want.out)[0]);
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"fill-mask", "--model", fixture("heads_mlm"), "-i", t.path + "/mask.txt"}),
      "line 2 is empty; pass --skip-empty");
}

TEST(CliSkipEmpty, RerankNamesThePassageLines) {
  test::TempFolder t;
  test::spit(t.path + "/p.txt", "\nparis is in france\n\nthe cat sat\n");
  auto r = test::run_tfm_in(t.path, {"rerank", "--model", fixture("heads_cross"), "--query", "where is paris",
                                     "--skip-empty", "-i", t.path + "/p.txt", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto want = test::run_tfm_in(t.path, {"rerank", "--model", fixture("heads_cross"), "--query", "where is paris",
                                        "paris is in france", "the cat sat", "--threads", "1"});
  ASSERT_EQ(want.exit_code, 0) << want.describe();
  const auto got = json_lines(r.out)[0], base = json_lines(want.out)[0];
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i]["index"], base[i]["index"]);
    EXPECT_EQ(got[i]["score"], base[i]["score"]);
    EXPECT_EQ(got[i]["line"], base[i]["index"].get<int>() == 0 ? 2 : 4) << got[i];
  }
  test::expect_one_line_error(test::run_tfm_in(t.path, {"rerank", "--model", fixture("heads_cross"), "--query",
                                                         "where is paris", "-i", t.path + "/p.txt"}),
                              "line 1 is empty; pass --skip-empty");
}

}  // namespace
}  // namespace tfm
