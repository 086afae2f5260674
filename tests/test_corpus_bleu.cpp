// corpus_bleu / tokenize_13a against sacreBLEU's default corpus BLEU. Expected values are worked out by hand in the
// comments (from the rules in sacrebleu/metrics/bleu.py and tokenizers/tokenizer_13a.py), or come from
// tests/fixtures/bleu/sacrebleu_cases.json (scripts/make_bleu_fixtures.py; see its "sacrebleu_version" field).
#include "test_paths.h"
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "eval/corpus_bleu.h"

namespace {

using tfm::corpus_bleu;
using tfm::tokenize_13a;

// Runs `fn` and returns the std::invalid_argument message it throws ("" + a test failure if it does not throw).
template <typename Fn>
std::string invalid_argument_message(Fn fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return "";
}

// ------------------------------------------------------------------------------------------------ tokenizer

TEST(CorpusBleuTokenize13a, FrenchPunctuation) {
  // Padded: " Il a dit : « bonjour », n'est-ce pas ? ". Rule 1 pads ':' and '?' (in the class :-@); « » are not
  // ASCII and ' and - are not in the class. Rule 2 ([^0-9])([.,]): "»," -> "» , ". Rule 3 then sees ", " (already
  // split). Rule 4 needs a digit before '-': none. Whitespace collapsed.
  EXPECT_EQ(tokenize_13a("Il a dit : « bonjour », n'est-ce pas ?"), "Il a dit : « bonjour » , n'est-ce pas ?");
  // "3,50": ',' is preceded by a digit (rule 2 no) and followed by one (rule 3 no) -> kept; "s." -> "s . ".
  EXPECT_EQ(tokenize_13a("Le prix est 3,50 euros."), "Le prix est 3,50 euros .");
  // Every '.' inside 1.000.000 has digits on both sides; the final "s." is split by rule 2.
  EXPECT_EQ(tokenize_13a("1.000.000 de personnes."), "1.000.000 de personnes .");
  // The apostrophe (0x27) lies between '&' (0x26) and '(' (0x28): not in the class.
  EXPECT_EQ(tokenize_13a("l'homme"), "l'homme");
}

TEST(CorpusBleuTokenize13a, EntitiesAndSkipped) {
  // &quot; -> '"', which rule 1 pads; '.' after '"' is split by rule 2.
  EXPECT_EQ(tokenize_13a("Il a dit &quot;oui&quot;."), "Il a dit \" oui \" .");
  // Order of replacements: &quot; runs before &amp;, so "&amp;quot;" ends as "&quot;" -> '&' and ';' padded.
  EXPECT_EQ(tokenize_13a("A &amp;quot;"), "A & quot ;");
  // "<skipped>" is removed before &lt;/&gt; are unescaped, so the escaped form survives as "< skipped >".
  EXPECT_EQ(tokenize_13a("&lt;skipped&gt; <skipped>rien"), "< skipped > rien");
  // "-\n" joins, other '\n' become spaces.
  EXPECT_EQ(tokenize_13a("inter-\nnational\nsuite"), "international suite");
}

TEST(CorpusBleuTokenize13a, PeriodCommaDashRules) {
  // "n." -> rule 2; ".D" (D not a digit) already split. "12.Mars": '2' before '.' blocks rule 2, 'M' after lets
  // rule 3 split " . M". "a.5": rule 2 ("a." -> "a . ").
  EXPECT_EQ(tokenize_13a("fin.Début 12.Mars a.5"), "fin . Début 12 . Mars a . 5");
  // Non-overlapping left-to-right matching: in "x.,5" rule 2 consumes "x." and resumes at ",5", where ',' is not
  // followed by [.,]; rule 3 then needs a non-digit after ',' but sees '5' -> ",5" stays one token.
  EXPECT_EQ(tokenize_13a("x.,5"), "x . ,5");
  // Rule 4 splits '-' after a digit ("1990-" and "5-"), not "-5" nor "a-b".
  EXPECT_EQ(tokenize_13a("1990-2000 3.5-4 -5 a-b"), "1990 - 2000 3.5 - 4 -5 a-b");
}

TEST(CorpusBleuTokenize13a, PythonWhitespace) {
  // str.split() separates on U+00A0 and U+202F (French typography) and U+3000, but not on U+200B (category Cf).
  EXPECT_EQ(tokenize_13a("dit\u00a0: «\u00a0oui\u00a0»\u202f!"), "dit : « oui » !");
  EXPECT_EQ(tokenize_13a("a\u200bb c\u3000d"), "a\u200bb c d");
  EXPECT_EQ(tokenize_13a(" \t tab\there  "), "tab here");
  EXPECT_EQ(tokenize_13a(""), "");
  // rstrip happens before "-\n" is removed: the trailing newline goes, the hyphen stays.
  EXPECT_EQ(tokenize_13a("fin-\n"), "fin-");
}

TEST(CorpusBleuTokenize13a, InvalidUtf8Throws) {
  std::string msg = invalid_argument_message([] { tokenize_13a("abc\xff"); });
  EXPECT_NE(msg.find("invalid UTF-8 at byte offset 3"), std::string::npos) << msg;
}

// ------------------------------------------------------------------------------------------------ scores

TEST(CorpusBleu, IdenticalCorpusIs100) {
  // Every n-gram matches: p_n = 100, BP = 1. "Le chat dort." -> "Le chat dort ." (4 tokens);
  // "Il pleut, vraiment beaucoup." -> "Il pleut , vraiment beaucoup ." (6 tokens).
  std::vector<std::string> c = {"Le chat dort.", "Il pleut, vraiment beaucoup."};
  auto r = corpus_bleu(c, c);
  // Tokens: 4 + 6 = 10; n-grams per order: (4-n+1) + (6-n+1): 10, 8, 6, 4.
  EXPECT_EQ(r.hyp_len, 10);
  EXPECT_EQ(r.ref_len, 10);
  EXPECT_EQ(r.totals, (std::array<int64_t, 4>{10, 8, 6, 4}));
  EXPECT_EQ(r.counts, r.totals);
  EXPECT_DOUBLE_EQ(r.score, 100.0);
  EXPECT_EQ(r.bp, 1.0);
  EXPECT_EQ(r.format(), "BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 10 ref_len = 10)");
}

TEST(CorpusBleuSmoothing, ZeroThreeAndFourGramMatchesUseExpSmoothing) {
  // hyp "a b c d e" / ref "a b x c y"; hyp "f g h" / ref "f z h".
  // Unigrams: a b c d e -> a, b, c match (3/5); f g h -> f, h match (2/3): 5/8 = 62.5 %.
  // Bigrams: "a b" matches, "b c" "c d" "d e" do not; "f g" "g h" do not: 1/6 = 16.666... %.
  // Trigrams: 0 of 3 + 1 = 4 -> first zero order: smooth = 2, p3 = 100 / (2 * 4) = 12.5 %.
  // 4-grams: 0 of 2 + 0 = 2 -> second zero order: smooth = 4, p4 = 100 / (4 * 2) = 12.5 %.
  // BP = 1 (8 vs 8). BLEU = (62.5 * 16.666... * 12.5 * 12.5)^(1/4) = 162760.4166...^(1/4)
  //                       = sqrt(403.4358...) = 20.0857...
  auto r = corpus_bleu({"a b c d e", "f g h"}, {"a b x c y", "f z h"});
  EXPECT_EQ(r.counts, (std::array<int64_t, 4>{5, 1, 0, 0}));
  EXPECT_EQ(r.totals, (std::array<int64_t, 4>{8, 6, 4, 2}));
  EXPECT_DOUBLE_EQ(r.precisions[0], 62.5);
  EXPECT_DOUBLE_EQ(r.precisions[1], 100.0 / 6.0);
  EXPECT_DOUBLE_EQ(r.precisions[2], 12.5);
  EXPECT_DOUBLE_EQ(r.precisions[3], 12.5);
  EXPECT_NEAR(r.score, std::pow(62.5 * (100.0 / 6.0) * 12.5 * 12.5, 0.25), 1e-12);
  EXPECT_NEAR(r.score, 20.0857, 1e-4);
  EXPECT_EQ(r.format(), "BLEU = 20.09 62.5/16.7/12.5/12.5 (BP = 1.000 ratio = 1.000 hyp_len = 8 ref_len = 8)");
}

TEST(CorpusBleuSmoothing, ClippedRepeats) {
  // hyp "the the the the the" vs ref "the cat the mat": 'the' clipped to 2 -> p1 = 2/5 = 40 %.
  // Bigrams "the the" x4, none in ref -> p2 = 100 / (2 * 4) = 12.5; trigrams 0/3 -> 100 / (4 * 3) = 8.333...;
  // 4-grams 0/2 -> 100 / (8 * 2) = 6.25. hyp_len 5 > ref_len 4 -> BP 1, ratio 1.25.
  // BLEU = (40 * 12.5 * 8.333... * 6.25)^(1/4) = 26041.666...^(1/4) = 12.7033...
  auto r = corpus_bleu({"the the the the the"}, {"the cat the mat"});
  EXPECT_EQ(r.counts, (std::array<int64_t, 4>{2, 0, 0, 0}));
  EXPECT_NEAR(r.score, std::pow(40.0 * 12.5 * (100.0 / 12.0) * 6.25, 0.25), 1e-12);
  EXPECT_NEAR(r.score, 12.7033, 1e-4);
  EXPECT_EQ(r.format(), "BLEU = 12.70 40.0/12.5/8.3/6.2 (BP = 1.000 ratio = 1.250 hyp_len = 5 ref_len = 4)");
  // 6.25 prints as "6.2": Python's format and printf both round the exact binary value half to even.
}

TEST(CorpusBleu, AllHypothesesEmptyScoreZero) {
  // No matches at all: sacreBLEU returns score 0 with all precisions 0; BP = 0 because hyp_len == 0.
  // ref_len = 2 + 3 = 5 ("une phrase", "deux phrases ici").
  auto r = corpus_bleu({"", ""}, {"une phrase", "deux phrases ici"});
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(r.bp, 0.0);
  EXPECT_EQ(r.hyp_len, 0);
  EXPECT_EQ(r.ref_len, 5);
  EXPECT_EQ(r.format(), "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 0.000 ratio = 0.000 hyp_len = 0 ref_len = 5)");
}

TEST(CorpusBleu, ShortHypothesesBrevityPenalty) {
  // hyp "le chat est sur le" (5 tokens) is a prefix of ref "le chat est sur le tapis rouge" (7 tokens):
  // all n-grams match (p_n = 100), BP = exp(1 - 7/5) = exp(-0.4) = 0.670320046..., BLEU = 67.0320...
  auto r = corpus_bleu({"le chat est sur le"}, {"le chat est sur le tapis rouge"});
  EXPECT_DOUBLE_EQ(r.bp, std::exp(-0.4));
  EXPECT_NEAR(r.bp, 0.670320046, 1e-9);
  EXPECT_DOUBLE_EQ(r.score, 100.0 * std::exp(-0.4));
  EXPECT_DOUBLE_EQ(r.ratio, 5.0 / 7.0);
  EXPECT_EQ(r.format(), "BLEU = 67.03 100.0/100.0/100.0/100.0 (BP = 0.670 ratio = 0.714 hyp_len = 5 ref_len = 7)");
}

TEST(CorpusBleu, NoFourGramsScoresZero) {
  // Segments of 2 and 3 tokens have no 4-grams: the loop stops at totals[3] == 0, p4 stays 0 and my_log(0) =
  // -9999999999 drives the score to 0 although p1..p3 = 100.
  auto r = corpus_bleu({"a b", "c d e"}, {"a b", "c d e"});
  EXPECT_EQ(r.totals, (std::array<int64_t, 4>{5, 3, 1, 0}));
  EXPECT_EQ(r.score, 0.0);
  EXPECT_EQ(r.format(), "BLEU = 0.00 100.0/100.0/100.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 5 ref_len = 5)");
}

TEST(CorpusBleu, CaseSensitive) {
  // "The Cat" vs "the cat": no unigram matches -> score 0 (early return, precisions all 0).
  auto r = corpus_bleu({"The Cat"}, {"the cat"});
  EXPECT_EQ(r.counts, (std::array<int64_t, 4>{0, 0, 0, 0}));
  EXPECT_EQ(r.score, 0.0);
}

TEST(CorpusBleu, FormatRounding) {
  tfm::CorpusBleu b;
  b.score = 41.234;
  b.precisions = {72.14, 49.26, 35.0, 25.24};
  b.bp = 0.98704;
  b.ratio = 0.9872;
  b.hyp_len = 1234;
  b.ref_len = 1250;
  EXPECT_EQ(b.format(), "BLEU = 41.23 72.1/49.3/35.0/25.2 (BP = 0.987 ratio = 0.987 hyp_len = 1234 ref_len = 1250)");
}

TEST(CorpusBleu, BadInputThrows) {
  std::string msg = invalid_argument_message([] { corpus_bleu({"a", "b", "c"}, {"a", "b"}); });
  EXPECT_NE(msg.find("3 hypotheses but 2 references"), std::string::npos) << msg;
  msg = invalid_argument_message([] { corpus_bleu({}, {}); });
  EXPECT_NE(msg.find("empty corpus"), std::string::npos) << msg;
  msg = invalid_argument_message([] { corpus_bleu({"a", "b"}, {"a", ""}); });
  EXPECT_NE(msg.find("reference 2 is empty"), std::string::npos) << msg;
  msg = invalid_argument_message([] { corpus_bleu({"a", "b\xc3"}, {"a", "b"}); });
  EXPECT_NE(msg.find("hypothesis 2: tokenize_13a: invalid UTF-8 at byte offset 1"), std::string::npos) << msg;
}

// ------------------------------------------------------------------------------------------------ sacreBLEU fixture

nlohmann::json load_fixture() {
  const std::string path = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/bleu/sacrebleu_cases.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": missing (run python3 scripts/make_bleu_fixtures.py)");
  return nlohmann::json::parse(in);
}

TEST(CorpusBleuSacrebleu, Tokenize13aMatchesReference) {
  const auto fx = load_fixture();
  ASSERT_GE(fx["tokenize_13a"].size(), 15u);
  for (const auto& c : fx["tokenize_13a"]) {
    const std::string in = c["input"], expected = c["tokenized"];
    EXPECT_EQ(tokenize_13a(in), expected) << "input: '" << in << "'";
  }
}

TEST(CorpusBleuSacrebleu, CorpusScoresMatchReference) {
  const auto fx = load_fixture();
  ASSERT_GE(fx["corpora"].size(), 10u);
  for (const auto& c : fx["corpora"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const auto r = corpus_bleu(c["hyps"].get<std::vector<std::string>>(), c["refs"].get<std::vector<std::string>>());
    EXPECT_EQ(r.format(), c["format"].get<std::string>());
    EXPECT_NEAR(r.score, c["score"].get<double>(), 1e-12);
    EXPECT_NEAR(r.bp, c["bp"].get<double>(), 1e-15);
    EXPECT_NEAR(r.ratio, c["ratio"].get<double>(), 1e-15);
    EXPECT_EQ(r.hyp_len, c["hyp_len"].get<int64_t>());
    EXPECT_EQ(r.ref_len, c["ref_len"].get<int64_t>());
    for (int n = 0; n < 4; ++n) {
      EXPECT_EQ(r.counts[n], c["counts"][n].get<int64_t>()) << "order " << n + 1;
      EXPECT_EQ(r.totals[n], c["totals"][n].get<int64_t>()) << "order " << n + 1;
      EXPECT_NEAR(r.precisions[n], c["precisions"][n].get<double>(), 1e-12) << "order " << n + 1;
    }
  }
}

// ------------------------------------------------------------------------------------------------ tfm bleu --corpus

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class CorpusBleuCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("corpus_bleu_cli_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  std::string write(const std::string& name, const std::string& content) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  CliRun run(const std::vector<std::string>& args) {
    std::string cmd = std::string("'") + TFM_BINARY + "'";
    for (const auto& a : args) cmd += " '" + a + "'";
    cmd += " >'" + dir_ + "/stdout' 2>'" + dir_ + "/stderr' </dev/null";
    int status = std::system(cmd.c_str());
    CliRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(dir_ + "/stdout");
    r.err = slurp(dir_ + "/stderr");
    return r;
  }
  std::string dir_;
};

TEST_F(CorpusBleuCli, PrintsFormatLine) {
  // Same corpus as CorpusBleuSmoothing.ZeroThreeAndFourGramMatchesUseExpSmoothing, as files (CRLF on one line:
  // the trailing '\r' is removed like Python's rstrip does).
  std::string ref = write("ref.txt", "a b x c y\r\nf z h\n");
  std::string hyp = write("hyp.txt", "a b c d e\nf g h");
  CliRun r = run({"bleu", "--corpus", ref, hyp});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "BLEU = 20.09 62.5/16.7/12.5/12.5 (BP = 1.000 ratio = 1.000 hyp_len = 8 ref_len = 8)\n");
}

TEST_F(CorpusBleuCli, SentenceModeStillWorks) {
  // d2l sentence BLEU, k = 2: p1 = 3/4, p2 = 1/3 -> 0.75^(1/2) * (1/3)^(1/4) = 0.8660 * 0.7598 = 0.658.
  CliRun r = run({"bleu", "il est riche .", "il est calme ."});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0.658\n");
}

TEST_F(CorpusBleuCli, LineCountMismatch) {
  std::string ref = write("ref.txt", "a\nb\nc\n");
  std::string hyp = write("hyp.txt", "a\nb\n");
  CliRun r = run({"bleu", "--corpus", ref, hyp});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(ref + " has 3 lines but " + hyp + " has 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CorpusBleuCli, MissingFileNamesPath) {
  std::string ref = write("ref.txt", "a\n");
  std::string missing = dir_ + "/no_such_hyp.txt";
  CliRun r = run({"bleu", "--corpus", ref, missing});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
}

TEST_F(CorpusBleuCli, InvalidUtf8AndEmptyReference) {
  std::string ref = write("ref.txt", "a\nb\n");
  std::string bad = write("bad.txt", "a\nb\xff\n");
  CliRun r = run({"bleu", "--corpus", ref, bad});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(bad + ": line 2: invalid UTF-8"), std::string::npos) << r.err;

  std::string ref_empty_line = write("ref2.txt", "a\n\n");
  std::string hyp = write("hyp.txt", "a\nb\n");
  r = run({"bleu", "--corpus", ref_empty_line, hyp});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(ref_empty_line + ": line 2: empty reference"), std::string::npos) << r.err;
}

TEST_F(CorpusBleuCli, CorpusExcludesPositionals) {
  std::string ref = write("ref.txt", "a\n");
  CliRun r = run({"bleu", "--corpus", ref, ref, "extra"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = run({"bleu"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("--corpus REF HYP"), std::string::npos) << r.err;
}

}  // namespace
