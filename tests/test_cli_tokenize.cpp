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

// tfm tokenize on translation folders: the source ids Hugging Face's tokenizers give (the fixtures' source_ids,
// from transformers' MarianTokenizer / M2M100Tokenizer / NllbTokenizer), each with its token (vocab.json's for
// Marian and M2M100), and --decode of target ids; our own d2l folders give the words translate reads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "run_tfm.h"
#include "test_util.h"
#include "tfm/translator.h"

namespace tfm {
namespace {

using test::fixture;

nlohmann::json one_line(const test::TfmRun& r) {
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  return nlohmann::json::parse(r.out);
}

TEST(CliTokenize, TranslationFoldersGiveHuggingFacesSourceIds) {
  test::TempFolder t;
  for (const char* name : {"marian", "m2m100", "nllb"}) {
    const nlohmann::json ex = nlohmann::json::parse(test::slurp(fixture(std::string(name) + "/expected.json")));
    // vocab.json maps the pieces (Marian: every token; M2M100: all but the language codes, added tokens); NLLB's
    // ids are fairseq's, not a vocab.json's.
    std::map<int64_t, std::string> inv;
    const nlohmann::json vocab = std::string(name) == "nllb"
                                     ? nlohmann::json::object()
                                     : nlohmann::json::parse(test::slurp(fixture(std::string(name) + "/vocab.json")));
    for (auto& [k, v] : vocab.items())
      if (v.is_number_integer()) inv[v.get<int64_t>()] = k;
    int checked = 0;
    for (const auto& c : ex["cases"]) {
      if (!c.contains("source_ids")) continue;
      const nlohmann::json j =
          one_line(test::run_tfm_in(t.path, {"tokenize", "--model", fixture(name), c["source"].get<std::string>()}));
      ASSERT_EQ(j["input_ids"], c["source_ids"]) << name << ": " << c["source"];
      ASSERT_EQ(j["tokens"].size(), j["input_ids"].size());
      EXPECT_EQ(j["attention_mask"], std::vector<int>(j["input_ids"].size(), 1));
      EXPECT_EQ(j["tokens"].back(), "</s>") << name;
      for (size_t i = 0; i < j["input_ids"].size(); ++i) {
        auto it = inv.find(j["input_ids"][i].get<int64_t>());
        if (it != inv.end()) { EXPECT_EQ(j["tokens"][i], it->second) << name << " token " << i; }
      }
      if (std::string(name) == "m2m100") { EXPECT_EQ(j["tokens"][0], "__en__"); }  // M2M100Tokenizer's src_lang token
      if (std::string(name) == "nllb") { EXPECT_EQ(j["tokens"][0], "eng_Latn"); }
      ++checked;
    }
    EXPECT_GT(checked, 0) << name;
  }
  // M2M100: the source language code first (its tokenizer_config.json's src_lang, or --source-lang).
  const nlohmann::json m = one_line(
      test::run_tfm_in(t.path, {"tokenize", "--model", fixture("m2m100"), "--source-lang", "fr", "Bonjour."}));
  EXPECT_EQ(m["tokens"][0], "__fr__");
  // Marian takes no source language.
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"tokenize", "--model", fixture("marian"), "--source-lang", "en", "Hello."}),
      "a Marian folder translates from the one source language");
}

TEST(CliTokenize, D2lFolderGivesTheWordsTranslateReads) {
  test::TempFolder t;
  const nlohmann::json j =
      one_line(test::run_tfm_in(t.path, {"tokenize", "--model", fixture("d2l_trained"), "I lost zzzq!"}));
  // d2l's preprocess_nmt: lowercase, a space before punctuation; <unk> for a word the vocabulary lacks.
  EXPECT_EQ(j["tokens"], nlohmann::json::array({"i", "lost", "<unk>", "!", "<eos>"}));
  const Translator tr(fixture("d2l_trained"));
  EXPECT_EQ(j["input_ids"].get<std::vector<int64_t>>(), tr.encode_source("I lost zzzq!").ids);
  // --decode: target ids to text, <eos> and padding skipped.
  const std::vector<int64_t> ids = tr.translate_batch({"i lost ."})[0].ids;
  std::vector<std::string> args = {"tokenize", "--model", fixture("d2l_trained"), "--decode"};
  for (int64_t id : ids) args.push_back(std::to_string(id));
  auto r = test::run_tfm_in(t.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, tr.translate_batch({"i lost ."})[0].text + "\n");
  // --input: a line each.
  test::spit(t.path + "/in.txt", "go .\nhi .\n");
  r = test::run_tfm_in(t.path, {"tokenize", "--model", fixture("d2l_trained"), "--input", t.path + "/in.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

}  // namespace
}  // namespace tfm
