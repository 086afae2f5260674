// bleu_d2l against d2lnmt.bleu values dumped by scripts/make_nmt_fixtures.py, plus the cases where d2l divides by
// zero.
#include "test_paths.h"
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "eval/bleu.h"

namespace {

nlohmann::json load_fixture() {
  const std::string path = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/nmt/d2l_600.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": missing (run /usr/bin/python3 scripts/make_nmt_fixtures.py)");
  return nlohmann::json::parse(in);
}

TEST(BleuD2l, MatchesReference) {
  const auto fx = load_fixture();
  ASSERT_GE(fx["bleu"].size(), 15u);
  for (const auto& c : fx["bleu"]) {
    const std::string pred = c["pred"], label = c["label"];
    const int k = c["k"];
    EXPECT_NEAR(tfm::bleu_d2l(pred, label, k), c["bleu"].get<double>(), 1e-9)
        << "pred='" << pred << "' label='" << label << "' k=" << k;
  }
}

TEST(BleuD2l, HandComputed) {
  // pred 'a b' vs label 'a b c d', k=1: brevity exp(1 - 4/2) = e^-1, p1 = 2/2.
  EXPECT_NEAR(tfm::bleu_d2l("a b", "a b c d", 1), std::exp(-1.0), 1e-12);
  // Clipping: 'x x x' vs 'x y': only one 'x' in the label, p1 = 1/3, no brevity penalty (3 >= 2).
  EXPECT_NEAR(tfm::bleu_d2l("x x x", "x y", 1), std::sqrt(1.0 / 3.0), 1e-12);
}

TEST(BleuD2l, EmptyPredictionScoresZero) {
  // d2l: ''.split(' ') == [''] and bleu('', '', 1) == 1, bleu('', 'a', 2) divides by zero; we define 0.
  EXPECT_EQ(tfm::bleu_d2l("", "", 1), 0.0);
  EXPECT_EQ(tfm::bleu_d2l("", "va !", 2), 0.0);
}

TEST(BleuD2l, PredictionShorterThanKScoresZero) {
  // d2l divides by len_pred - n + 1 == 0 for n = 2 here (ZeroDivisionError).
  EXPECT_EQ(tfm::bleu_d2l("va", "va", 2), 0.0);
  EXPECT_EQ(tfm::bleu_d2l("va !", "va !", 3), 0.0);
  // Exactly k tokens is defined in d2l and must not be caught by the rule above.
  EXPECT_EQ(tfm::bleu_d2l("va !", "va !", 2), 1.0);
}

TEST(BleuD2l, RejectsNonPositiveK) {
  try {
    tfm::bleu_d2l("a", "a", 0);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("k = 0"), std::string::npos) << e.what();
  }
}

}  // namespace
