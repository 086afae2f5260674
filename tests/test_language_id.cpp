// The character n-gram language identifier (text/language_id.h, tfm/language_id.h, tfm langid): its n-grams, its
// file, its errors, and its accuracy on held-out sentences of the repository's corpora (Multi30k en / fr / de,
// fra-eng), labelled by the corpus they come from.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/text_file.h"
#include "run_tfm.h"
#include "test_util.h"
#include "text/language_id.h"
#include "tfm/error.h"
#include "tfm/language_id.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("tfm_langid_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

int64_t words(const std::string& s) {
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    const bool sp = c == ' ' || c == '\t';
    if (!sp && !in) ++n;
    in = !sp;
  }
  return n;
}

// Accuracy on the lines of `held` (code -> sentences) of at least `min_words` words.
double accuracy(const LanguageIdentifier& id, const std::vector<LanguageSample>& held, int64_t min_words,
                int64_t* tested = nullptr, std::string* errors = nullptr) {
  int64_t right = 0, all = 0;
  for (const LanguageSample& s : held)
    for (const std::string& line : s.lines) {
      if (words(line) < min_words) continue;
      ++all;
      const std::string got = id.detect(line)[0].language;
      if (got == s.language) {
        ++right;
      } else if (errors && errors->size() < 2000) {
        *errors += s.language + " read as " + got + ": " + line + "\n";
      }
    }
  if (tested) *tested = all;
  return all ? double(right) / all : 0.0;
}

std::vector<std::string> head(std::vector<std::string> v, size_t n) {
  if (v.size() > n) v.resize(n);
  return v;
}

TEST(LanguageId, NgramsOfPaddedLowercasedWords) {
  // "The" -> " the ": orders 1..3 of the padded word (order 1 without the padding spaces).
  EXPECT_EQ(CharNgramLanguageId::ngrams("The", 3),
            (std::vector<std::string>{"t", "h", "e", " t", "th", "he", "e ", " th", "the", "he "}));
  // Digits and punctuation separate words; an apostrophe inside a word stays, a trailing one goes; the typographic
  // apostrophe is the ASCII one.
  EXPECT_EQ(CharNgramLanguageId::ngrams("l’a, 42 b'", 2),
            (std::vector<std::string>{"l", "'", "a", " l", "l'", "'a", "a ", "b", " b", "b "}));
  // Case folding after NFC composition: É (U+00C9) and E + U+0301 are both é.
  EXPECT_EQ(CharNgramLanguageId::ngrams("\xC3\x89", 1), (std::vector<std::string>{"\xC3\xA9"}));
  EXPECT_EQ(CharNgramLanguageId::ngrams("E\xCC\x81", 1), (std::vector<std::string>{"\xC3\xA9"}));
  // Invalid UTF-8 separates words instead of throwing.
  EXPECT_EQ(CharNgramLanguageId::ngrams("a\xFF" "b", 1), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(CharNgramLanguageId::ngrams("12 -- ?!", 4).empty());
}

TEST(LanguageId, TinyCorporaConfidencesAndAmong) {
  const LanguageIdentifier id = LanguageIdentifier::train(
      {{"en", {"the cat is on the table", "the man and the woman"}},
       {"fr", {"le chat est sur la table", "l'homme et la femme"}}});
  EXPECT_EQ(id.languages(), (std::vector<std::string>{"en", "fr"}));
  int64_t evidence = -1;
  const auto g = id.detect("the woman and the cat", {}, &evidence);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].language, "en");
  EXPECT_GT(g[0].confidence, g[1].confidence);
  EXPECT_NEAR(g[0].confidence + g[1].confidence, 1.0, 1e-9);
  EXPECT_GT(evidence, 10);
  EXPECT_EQ(id.detect("la femme et le chat")[0].language, "fr");
  // Restricted to one language: that one, certain. Unknown codes are left out.
  const auto only = id.detect("the woman", {"fr", "xx"});
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(only[0].language, "fr");
  EXPECT_DOUBLE_EQ(only[0].confidence, 1.0);
  EXPECT_TRUE(id.detect("the woman", {"xx"}).empty());
  // Nothing known: equal confidences, no evidence.
  const auto none = id.detect("123 ???", {}, &evidence);
  EXPECT_EQ(evidence, 0);
  ASSERT_EQ(none.size(), 2u);
  EXPECT_DOUBLE_EQ(none[0].confidence, 0.5);
}

TEST(LanguageId, BadTrainingInput) {
  auto msg = [](const std::vector<LanguageSample>& s, LanguageIdOptions o = {}) {
    try {
      LanguageIdentifier::train(s, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg({{"en", {"hello"}}}).find("at least two languages"), std::string::npos);
  EXPECT_NE(msg({{"en", {"hello"}}, {"en", {"world"}}}).find("'en' is given twice"), std::string::npos);
  EXPECT_NE(msg({{"en", {"hello"}}, {"", {"world"}}}).find("empty language code"), std::string::npos);
  EXPECT_NE(msg({{"en", {"hello"}}, {"fr", {"123 !"}}}).find("'fr' has no letters"), std::string::npos);
  LanguageIdOptions o;
  o.max_order = 9;
  EXPECT_NE(msg({{"en", {"hello"}}, {"fr", {"salut"}}}, o).find("max_order must be in 1..8"), std::string::npos);
}

TEST(LanguageId, FileRoundTripAndErrors) {
  const std::string dir = temp_dir("file");
  const LanguageIdentifier id = LanguageIdentifier::train(
      {{"en", {"the cat is on the table"}}, {"fr", {"le chat est sur la table"}}, {"de", {"die Katze ist auf dem Tisch"}}});
  id.save(dir + "/id.json");
  const LanguageIdentifier back = LanguageIdentifier::load(dir + "/id.json");
  EXPECT_EQ(back.languages(), id.languages());
  for (const char* t : {"the table", "la table", "dem Tisch", "xyz"}) {
    const auto a = id.detect(t), b = back.detect(t);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].language, b[i].language) << t;
      EXPECT_DOUBLE_EQ(a[i].confidence, b[i].confidence) << t;
    }
  }
  EXPECT_THROW(LanguageIdentifier::load(dir + "/missing.json"), FileNotFoundError);
  auto load_error = [&](const std::string& body) {
    std::ofstream(dir + "/bad.json") << body;
    try {
      LanguageIdentifier::load(dir + "/bad.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(load_error("{\"model_type\": \"bert\"}").find("not a language identifier"), std::string::npos);
  EXPECT_NE(load_error("{\"format\": \"tfm-language-id\", \"version\": 7}").find("version 7"), std::string::npos);
  const std::string ok_head =
      "{\"format\": \"tfm-language-id\", \"version\": 1, \"max_order\": 2, \"alpha\": 0.5, \"languages\": [\"en\", "
      "\"fr\"], \"totals\": {\"en\": [3, 4], \"fr\": [3, 4]}, \"ngrams\": ";
  EXPECT_EQ(load_error(ok_head + "{\"ab\": [1, 2]}}"), "no error");
  EXPECT_NE(load_error(ok_head + "{\"ab\": [1]}}").find("ngrams['ab'] must be an array of 2 counts"),
            std::string::npos);
  EXPECT_NE(load_error(ok_head + "{\"abc\": [1, 2]}}").find("not of order 1..2"), std::string::npos);
  const std::string e = load_error("{\"format\": \"tfm-language-id\"");
  EXPECT_EQ(e.rfind(dir + "/bad.json", 0), 0u) << e;
  fs::remove_all(dir);
}

// Held-out sentences of Multi30k: trained on train.{en,fr,de}, tested on val and test_2016_flickr (4,028
// sentences of 5 words or more per language).
TEST(LanguageId, Multi30kHeldOutAccuracy) {
  const std::string m30k = test::data_dir() + "/multi30k";
  if (!fs::exists(m30k + "/train.en.gz")) GTEST_SKIP() << m30k << " not found (set TFM_DATA_DIR)";
  std::vector<LanguageSample> train, held;
  for (const char* code : {"en", "fr", "de"}) {
    train.push_back({code, head(read_lines(m30k + "/train." + code + ".gz"), 10000)});
    LanguageSample h{code, read_lines(m30k + "/val." + code + ".gz")};
    for (std::string& l : read_lines(m30k + "/test_2016_flickr." + code + ".gz")) h.lines.push_back(std::move(l));
    held.push_back(std::move(h));
  }
  const LanguageIdentifier id = LanguageIdentifier::train(train);
  int64_t tested = 0;
  std::string errors;
  const double acc = accuracy(id, held, 5, &tested, &errors);
  EXPECT_GT(tested, 5000);
  EXPECT_GE(acc, 0.95) << tested << " sentences\n" << errors;
  std::printf("Multi30k held out: %.4f of %lld sentences of >= 5 words\n", acc, (long long)tested);
}

// fra-eng: trained on the pairs at even line numbers, tested on the others.
TEST(LanguageId, FraEngHeldOutAccuracy) {
  const std::string fra = test::data_dir() + "/fra-eng/fra.txt";
  if (!fs::exists(fra)) GTEST_SKIP() << fra << " not found (set TFM_DATA_DIR)";
  std::vector<LanguageSample> train = {{"en", {}}, {"fr", {}}}, held = {{"en", {}}, {"fr", {}}};
  const std::vector<std::string> lines = read_lines(fra);
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t tab = lines[i].find('\t');
    ASSERT_NE(tab, std::string::npos);
    std::vector<LanguageSample>& to = i % 2 ? held : train;
    to[0].lines.push_back(lines[i].substr(0, tab));
    to[1].lines.push_back(lines[i].substr(tab + 1));
  }
  const LanguageIdentifier id = LanguageIdentifier::train(train);
  int64_t tested = 0;
  std::string errors;
  const double acc = accuracy(id, held, 5, &tested, &errors);
  EXPECT_GT(tested, 20000);
  EXPECT_GE(acc, 0.95) << errors;
  std::printf("fra-eng held out: %.4f of %lld sentences of >= 5 words\n", acc, (long long)tested);
}

// tfm langid train / detect, and their messages.
TEST(LanguageId, Command) {
  test::TempFolder tmp;
  const std::string dir = tmp.path;
  test::spit(dir + "/en.txt", "the cat is on the table\nthe man and the woman\n");
  test::spit(dir + "/fr.txt", "le chat est sur la table\nl'homme et la femme\n");
  test::spit(dir + "/pairs.tsv", "the cat\tle chat\nthe woman\tla femme\n");
  auto run = [&](const std::vector<std::string>& args) { return test::run_tfm_in(dir, args); };
  auto r = run({"langid", "train", "--corpus", "en=" + dir + "/en.txt", "--corpus", "fr=" + dir + "/fr.txt", "--out",
                dir + "/id.json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("trained a language identifier of en, fr on 4 sentences"), std::string::npos) << r.out;
  r = run({"langid", "detect", "--model", dir + "/id.json", "the woman and the cat", "la femme"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.substr(0, 3), "en\t") << r.out;
  EXPECT_NE(r.out.find("\nfr\t"), std::string::npos) << r.out;
  // Standard input, a line at a time.
  r = test::run_tfm_in(dir, {"langid", "detect", "--model", dir + "/id.json"}, "la femme\nthe man\n");
  EXPECT_EQ(r.out.substr(0, 3), "fr\t") << r.describe();
  EXPECT_NE(r.out.find("\nen\t"), std::string::npos) << r.out;
  // Columns of a TAB-separated file; a TAB where no column is named is refused.
  r = run({"langid", "train", "--corpus", "en:1=" + dir + "/pairs.tsv", "--corpus", "fr:2=" + dir + "/pairs.tsv",
           "--out", dir + "/pairs.json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = run({"langid", "detect", "--model", dir + "/pairs.json", "--all", "la femme"});
  EXPECT_EQ(r.out.substr(0, 3), "fr\t") << r.out;
  EXPECT_NE(r.out.find("\ten\t"), std::string::npos) << r.out;
  test::expect_one_line_error(run({"langid", "train", "--corpus", "en=" + dir + "/pairs.tsv", "--corpus",
                                   "fr=" + dir + "/fr.txt", "--out", dir + "/x.json"}),
                              "pairs.tsv: its lines have TAB-separated columns: name the column of 'en', e.g. --corpus en:1=");
  test::expect_one_line_error(
      run({"langid", "train", "--corpus", "en", "--corpus", "fr=" + dir + "/fr.txt", "--out", dir + "/x.json"}),
      "--corpus expects CODE=FILE");
  test::expect_one_line_error(run({"langid", "train", "--corpus", "en:3=" + dir + "/pairs.tsv", "--corpus",
                                   "fr=" + dir + "/fr.txt", "--out", dir + "/x.json"}),
                              "pairs.tsv: line 1 has no column 3");
  test::expect_one_line_error(run({"langid", "train", "--corpus", "en=" + dir + "/en.txt", "--out", dir + "/x.json"}),
                              "at least two languages");
  test::expect_one_line_error(run({"langid", "detect", "--model", dir + "/id.json", "--among", "de", "x"}),
                              "knows none of these (it knows en, fr)");
  test::expect_one_line_error(run({"langid", "detect", "--model", dir + "/nope.json", "x"}), "nope.json: no such file");
  EXPECT_FALSE(fs::exists(dir + "/x.json"));
}

}  // namespace
}  // namespace tfm
