// The tokenizer engine (src/text/tokenizer) against Hugging Face `tokenizers`: every expected value comes from
// tests/fixtures/tokenizer/engine_cases.json, written by scripts/make_tokenizer_engine_fixtures.js with the npm
// library itself from the tokenizer.json files it trained (tests/fixtures/tokenizer/<kind>/tokenizer.json).
#include "test_paths.h"
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../fuzz/fuzz_entries.h"
#include "run_tfm.h"
#include "text/bert_tokenizer.h"
#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/unicode.h"
#include "tokenizer_details.h"

namespace {

using nlohmann::json;

std::string fixture_dir() { return std::string(TFM_SOURCE_DIR) + "/tests/fixtures/tokenizer"; }

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  return json::parse(in);
}

const json& engine_cases() {
  static const json doc = read_json(fixture_dir() + "/engine_cases.json");
  return doc;
}

// The base tokenizer.json with the variant's override applied as the generator applies it.
json variant_json(const json& v) {
  json j = read_json(fixture_dir() + "/" + v.at("base").get<std::string>());
  for (auto it = v.at("override").begin(); it != v.at("override").end(); ++it) {
    if (it.key() == "model_patch") {
      for (auto m = it->begin(); m != it->end(); ++m) j["model"][m.key()] = *m;
    } else if (it.key() == "vocab_append") {
      for (const json& e : *it) j["model"]["vocab"].push_back(e);
    } else {
      j[it.key()] = *it;
    }
  }
  return j;
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back((char)c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

tfm::EncodeCall call_of(const json& c) {
  tfm::EncodeCall call;
  call.add_special_tokens = c.at("add_special_tokens").get<bool>();
  if (c.contains("max_length")) {
    call.max_length = c.at("max_length").get<int64_t>();
    std::string s = c.at("strategy").get<std::string>();
    call.strategy = s == "OnlyFirst"    ? tfm::TruncationStrategy::OnlyFirst
                    : s == "OnlySecond" ? tfm::TruncationStrategy::OnlySecond
                                        : tfm::TruncationStrategy::LongestFirst;
    call.direction = c.at("direction").get<std::string>() == "Left" ? tfm::Side::Left : tfm::Side::Right;
  }
  return call;
}

std::vector<std::pair<int64_t, int64_t>> offsets_of(const json& c) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const json& o : c.at("offsets")) out.emplace_back(o.at(0).get<int64_t>(), o.at(1).get<int64_t>());
  return out;
}

// Compares every case of one variant; returns the number of cases compared.
int check_variant(const json& v) {
  const std::string name = v.at("name").get<std::string>();
  tfm::HfTokenizer tok = tfm::HfTokenizer::from_json_text(variant_json(v).dump(), name);
  int n = 0;
  for (const json& c : v.at("cases")) {
    std::string text = c.at("text").get<std::string>(), pair = c.value("pair", std::string());
    std::string_view pv = pair;
    bool has_pair = c.contains("pair");
    SCOPED_TRACE(name + " text='" + printable(text) + "'" + (has_pair ? " pair='" + printable(pair) + "'" : "") +
                 " special=" + c.at("add_special_tokens").dump() +
                 (c.contains("max_length") ? " max_length=" + c.at("max_length").dump() + " " +
                                                 c.at("strategy").get<std::string>() + " " +
                                                 c.at("direction").get<std::string>()
                                           : ""));
    ++n;
    if (c.contains("error")) {
      EXPECT_THROW(tok.encode(text, has_pair ? &pv : nullptr, call_of(c)), std::invalid_argument);
      continue;
    }
    tfm::Encoding e = tok.encode(text, has_pair ? &pv : nullptr, call_of(c));
    EXPECT_EQ(e.tokens, c.at("tokens").get<std::vector<std::string>>());
    EXPECT_EQ(e.input_ids, c.at("input_ids").get<std::vector<int64_t>>());
    EXPECT_EQ(e.offsets, offsets_of(c));
    EXPECT_EQ(e.token_type_ids, c.at("token_type_ids").get<std::vector<int64_t>>());
    EXPECT_EQ(e.special_tokens_mask, c.at("special_tokens_mask").get<std::vector<int64_t>>());
    EXPECT_EQ(e.attention_mask, c.at("attention_mask").get<std::vector<int64_t>>());
    auto ids = c.at("input_ids").get<std::vector<int64_t>>();
    EXPECT_EQ(tok.decode(ids, true), c.at("decoded").get<std::string>());
    EXPECT_EQ(tok.decode(ids, false), c.at("decoded_with_special").get<std::string>());
  }
  return n;
}

const json& variant(const std::string& name) {
  for (const json& v : engine_cases().at("tokenizers"))
    if (v.at("name") == name) return v;
  throw std::runtime_error("no fixture variant " + name);
}

class EngineFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineFixture, MatchesHuggingFace) { EXPECT_GE(check_variant(variant(GetParam())), 70); }

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, EngineFixture,
    ::testing::Values("bpe_bytelevel", "bpe_bytelevel_prefix_space", "bpe_split_gpt4_regex", "bpe_nfkc_lowercase",
                      "bpe_ignore_merges", "bpe_end_of_word_suffix", "bpe_continuing_subword_prefix", "unigram", "unigram_byte_fallback", "unigram_t5",
                      "unigram_metaspace_first_nosplit", "wordpiece", "wordpiece_uncased_template",
                      "wordpiece_pretok_sequence", "wordpiece_split_behaviours", "wordpiece_whitespace_digits",
                      "wordpiece_added_token_options", "wordlevel", "wordlevel_split_invert"),
    [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(EngineFixture, EveryVariantIsTested) { EXPECT_EQ(engine_cases().at("tokenizers").size(), 19u); }

TEST(EngineFixture, BatchPaddingMatchesHuggingFace) {
  int n = 0;
  for (const json& v : engine_cases().at("tokenizers")) {
    json j = variant_json(v);
    const json& b = v.at("batch");
    j["padding"] = {{"strategy", "BatchLongest"}, {"direction", b.at("direction")}, {"pad_to_multiple_of", nullptr},
                    {"pad_id", b.at("pad_id")}, {"pad_type_id", 0}, {"pad_token", b.at("pad_token")}};
    tfm::HfTokenizer tok = tfm::HfTokenizer::from_json_text(j.dump(), v.at("name").get<std::string>());
    std::vector<tfm::Encoding> enc;
    for (const json& t : b.at("texts")) enc.push_back(tok.encode(t.get<std::string>()));
    tok.pad(enc);
    SCOPED_TRACE(v.at("name").get<std::string>());
    for (size_t i = 0; i < enc.size(); ++i) {
      EXPECT_EQ(enc[i].input_ids, b.at("input_ids")[i].get<std::vector<int64_t>>());
      EXPECT_EQ(enc[i].attention_mask, b.at("attention_mask")[i].get<std::vector<int64_t>>());
      EXPECT_EQ(enc[i].tokens, b.at("tokens")[i].get<std::vector<std::string>>());
    }
    ++n;
  }
  EXPECT_EQ(n, 19);
}

TEST(EngineFixture, ModelFoldersLoadThroughFromDir) {
  // Each trained kind loads as a model folder; the family decides token_type_ids (RoBERTa-style: none).
  std::map<std::string, std::string> type{{"bpe_bytelevel", "BPE"}, {"unigram", "Unigram"},
                                          {"wordpiece", "WordPiece"}, {"wordlevel", "WordLevel"}};
  for (const auto& [dir, t] : type) {
    tfm::BertTokenizer tok = tfm::BertTokenizer::from_dir(fixture_dir() + "/" + dir);
    EXPECT_EQ(tok.engine().model_type(), t) << dir;
  }
  EXPECT_FALSE(tfm::BertTokenizer::from_dir(fixture_dir() + "/bpe_bytelevel").has_token_type_ids());
  EXPECT_TRUE(tfm::BertTokenizer::from_dir(fixture_dir() + "/wordpiece").has_token_type_ids());
}

// A SentencePiece folder without tokenizer.json (sentencepiece.bpe.model) is converted as transformers'
// XLMRobertaConverter does; the `unigram` fixture was built that way from the same model and encoded by HF.
TEST(EngineFixture, SentencePieceFolderMatchesItsConvertedTokenizer) {
  tfm::BertTokenizer tok = tfm::BertTokenizer::from_dir(fixture_dir() + "/unigram_spm");
  EXPECT_FALSE(tok.has_token_type_ids());
  int n = 0;
  for (const json& c : variant("unigram").at("cases")) {
    if (c.contains("error")) continue;
    std::string text = c.at("text").get<std::string>(), pair = c.value("pair", std::string());
    SCOPED_TRACE("text='" + printable(text) + "'");
    tfm::Encoding e = tok.encode(text, c.contains("pair") ? &pair : nullptr, call_of(c));
    EXPECT_EQ(e.input_ids, c.at("input_ids").get<std::vector<int64_t>>());
    EXPECT_EQ(e.tokens, c.at("tokens").get<std::vector<std::string>>());
    EXPECT_EQ(e.offsets, offsets_of(c));
    EXPECT_EQ(tok.decode(e.input_ids), c.at("decoded").get<std::string>());
    ++n;
  }
  EXPECT_GE(n, 70);
}

TEST(EngineErrors, UnsupportedComponentsNameTheFileAndType) {
  json j = read_json(fixture_dir() + "/wordpiece/tokenizer.json");
  auto error_of = [](const json& doc) -> std::string {
    try {
      tfm::HfTokenizer::from_json_text(doc.dump(), "edited.json");
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "<no exception>";
  };
  json a = j;
  a["normalizer"] = {{"type", "NoSuchNormalizer"}};
  std::string msg = error_of(a);
  EXPECT_NE(msg.find("edited.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NoSuchNormalizer"), std::string::npos) << msg;
  json b = j;
  b["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  msg = error_of(b);
  EXPECT_NE(msg.find("regex"), std::string::npos) << msg;
  json c = j;
  c["model"]["type"] = "BPE";
  c["model"]["merges"] = {"no-such-token x"};
  msg = error_of(c);
  EXPECT_NE(msg.find("merge"), std::string::npos) << msg;
  json d = j;
  d["post_processor"] = {{"type", "TemplateProcessing"}, {"single", json::array({{{"SpecialToken", {{"id", "<x>"}, {"type_id", 0}}}}})},
                         {"pair", json::array()}, {"special_tokens", json::object()}};
  msg = error_of(d);
  EXPECT_NE(msg.find("<x>"), std::string::npos) << msg;
  EXPECT_NE(error_of(json::parse("{\"model\": 3}")).find("model"), std::string::npos);
}

// tfm tokenize prints HF's ids, tokens and offsets; token_type_ids only for families that have them.
const json& first_case(const std::string& name, const std::string& text, bool special) {
  for (const json& c : variant(name).at("cases"))
    if (c.at("text") == text && !c.contains("pair") && !c.contains("max_length") && c.at("add_special_tokens") == special)
      return c;
  throw std::runtime_error("no case");
}
// The Nmt normalizer (sentencepiece conversions): control characters removed, other whitespace-like code points
// turned into spaces, offsets kept on the original text.
TEST(EngineDetails, NmtNormalizerMatchesHuggingFace) {
  EXPECT_EQ(tfm::test::check_detail_cases("nmt_normalizer"), 9);
}

// The Whitespace pre-tokenizer's \w: superscripts and fractions (category No: x², m³, ½, ¼) split from the word,
// letter numbers (Ⅻ) and other scripts' decimal digits stay in it.
TEST(EngineDetails, WhitespaceSplitsSuperscriptsAndFractionsFromWords) {
  EXPECT_EQ(tfm::test::check_detail_cases("wordlevel_whitespace_numbers"), 10);
  const tfm::HfTokenizer tok = tfm::test::detail_hf_tokenizer("wordlevel_whitespace_numbers");
  EXPECT_EQ(tok.encode("x²").tokens, (std::vector<std::string>{"x", "²"}));
}

// decode skips the ids the vocabulary does not have, as tokenizers' decode does; no ids decode to "".
TEST(EngineDetails, DecodeSkipsIdsWithoutAToken) {
  const json& doc = tfm::test::detail_cases();
  const tfm::HfTokenizer tok = tfm::test::detail_hf_tokenizer(doc.at("decode_tokenizer").get<std::string>());
  int n = 0;
  for (const json& c : doc.at("decodes")) {
    const auto ids = c.at("ids").get<std::vector<int64_t>>();
    EXPECT_EQ(tok.decode(ids, c.at("skip_special_tokens").get<bool>()), c.at("decoded").get<std::string>())
        << c.dump();
    ++n;
  }
  EXPECT_EQ(n, 10);
}


TEST(EngineCli, TokenizePrintsHuggingFaceEncodings) {
  tfm::test::TempFolder tmp;
  const std::string text = "Une femme v\xC3\xAAtue d'une robe rose fait du v\xC3\xA9lo.";
  for (const char* kind : {"unigram", "bpe_bytelevel", "wordpiece"}) {
    SCOPED_TRACE(kind);
    auto r = tfm::test::run_tfm_in(tmp.path, {"tokenize", "--model", fixture_dir() + "/" + kind, text});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    json j = json::parse(r.out);
    const json& c = first_case(kind, text, true);
    EXPECT_EQ(j.at("input_ids"), c.at("input_ids"));
    EXPECT_EQ(j.at("tokens"), c.at("tokens"));
    EXPECT_EQ(j.at("offsets"), c.at("offsets"));
    EXPECT_EQ(j.at("attention_mask"), c.at("attention_mask"));
    EXPECT_EQ(j.contains("token_type_ids"), std::string(kind) == "wordpiece") << r.out;
  }
}

TEST(EngineCli, TokenizeInputStreamsLinesAndDecodeInverts) {
  tfm::test::TempFolder tmp;
  const std::string dir = fixture_dir() + "/bpe_bytelevel";
  const std::string a = "A man in a blue shirt is standing on a ladder.", b = "I love \xF0\x9F\xA4\x97 and \xF0\x9F\x9A\x80! \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 \xE2\x9D\xA4\xEF\xB8\x8F";
  auto r = tfm::test::run_tfm_in(tmp.path, {"tokenize", "--model", dir, "--input", "-", "--no-special-tokens"},
                                 a + "\n" + b + "\n");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<std::string> lines;
  for (size_t p = 0, q; (q = r.out.find('\n', p)) != std::string::npos; p = q + 1) lines.push_back(r.out.substr(p, q - p));
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(json::parse(lines[0]).at("input_ids"), first_case("bpe_bytelevel", a, false).at("input_ids"));
  const json& cb = first_case("bpe_bytelevel", b, true);
  EXPECT_EQ(json::parse(lines[1]).at("tokens"), first_case("bpe_bytelevel", b, false).at("tokens"));
  std::vector<std::string> args{"tokenize", "--model", dir, "--decode"};
  for (const json& id : cb.at("input_ids")) args.push_back(std::to_string(id.get<int64_t>()));
  auto d = tfm::test::run_tfm_in(tmp.path, args);
  ASSERT_EQ(d.exit_code, 0) << d.describe();
  EXPECT_EQ(d.out, cb.at("decoded").get<std::string>() + "\n");
  args.push_back("--keep-special");
  auto k = tfm::test::run_tfm_in(tmp.path, args);
  EXPECT_EQ(k.out, cb.at("decoded_with_special").get<std::string>() + "\n");
  auto bad = tfm::test::run_tfm_in(tmp.path, {"tokenize", "--model", dir, "--input", tmp.path + "/missing.txt"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("missing.txt"), std::string::npos) << bad.err;
}

// The fuzz target's contract on 3000 pseudo-random inputs (bytes and code points from hard ranges), so a plain
// build checks it too: every encoding consistent, or an exception with a message.
TEST(EngineFuzz, RandomInputsKeepTheContract) {
  ASSERT_EQ(tfm::fuzz::engine_tokenizers().size(), 4u);
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(state >> 33);
  };
  const char32_t pool[][2] = {{0x00, 0x7F}, {0x80, 0x24F}, {0x300, 0x36F}, {0x4E00, 0x4E80}, {0x1F300, 0x1F6FF},
                              {0x200B, 0x200F}, {0x590, 0x6FF}, {0xFB00, 0xFB06}, {0xFF01, 0xFF5E}, {0x2000, 0x206F}};
  for (int iter = 0; iter < 3000; ++iter) {
    std::string in;
    const int n = (int)(next() % 40);
    for (int k = 0; k < n; ++k) {
      if (next() % 10 == 0) {
        in.push_back((char)(next() & 0xFF));  // raw byte, often invalid UTF-8
        continue;
      }
      const auto& r = pool[next() % 10];
      char32_t c = r[0] + next() % (r[1] - r[0] + 1);
      if (c >= 0xD800 && c <= 0xDFFF) c = U'x';
      tfm::tok::append_utf8(c, in);
    }
    try {
      tfm::fuzz::hf_tokenizer_entry(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    } catch (const tfm::fuzz::InvariantViolation& v) {
      ADD_FAILURE() << "input '" << printable(in) << "': " << v.what;
    }
  }
}

}  // namespace

// tokenizer.json's model.vocab is read while parsing, straight into the vocabulary (HfTokenizer::from_json_text's
// SAX reader): the same tokenizer as the tree gave (ids, the last of duplicate keys), the same errors for values that
// are not integers (nested containers included), and a "vocab" object elsewhere left to its component.
TEST(HfTokenizerVocab, ReadWhileParsingAsTheTreeReadsIt) {
  auto load = [](const std::string& vocab_json, const std::string& extra = "") {
    return tfm::HfTokenizer::from_json_text(
        "{\"version\": \"1.0\"," + extra +
            " \"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\","
            " \"max_input_chars_per_word\": 100, \"vocab\": " + vocab_json + "}}",
        "t.json");
  };
  tfm::HfTokenizer t = load(R"({"[UNK]": 0, "a": 1, "b": 2, "b": 3})");
  EXPECT_EQ(t.token_to_id("a"), 1);
  EXPECT_EQ(t.token_to_id("b"), 3);  // the last of duplicate keys, as nlohmann's tree keeps it
  EXPECT_EQ(t.token_to_id("[UNK]"), 0);
  EXPECT_EQ(*t.id_to_token(3), "b");
  auto error_of = [&](const std::string& vocab_json, const std::string& extra = "") {
    try {
      load(vocab_json, extra);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(R"({"[UNK]": 0, "a": 1.5})"), "t.json: model.vocab['a'] must be an integer id");
  EXPECT_EQ(error_of(R"({"[UNK]": 0, "x": "2", "y": null})"), "t.json: model.vocab['x'] must be an integer id");
  EXPECT_EQ(error_of(R"({"[UNK]": 0, "n": {"k": [1, {"z": 2}]}, "c": 3})"),
            "t.json: model.vocab['n'] must be an integer id");
  EXPECT_EQ(error_of(R"({"[UNK]": 0, "a": [1]})"), "t.json: model.vocab['a'] must be an integer id");
  // A JSON syntax error is reported as such, also after a bad vocabulary value.
  EXPECT_NE(error_of(R"({"[UNK]": 0, "a": true, )").find("invalid JSON at byte"), std::string::npos);
  // A second "model" key replaces the first, vocabulary included.
  tfm::HfTokenizer twice = tfm::HfTokenizer::from_json_text(
      R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "old": 1}},)"
      R"( "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "new": 1}}})",
      "t.json");
  EXPECT_EQ(twice.token_to_id("new"), 1);
  EXPECT_EQ(twice.token_to_id("old"), -1);
  // "vocab" keys at other places are the tree's (here an unknown top-level key, ignored) and do not touch the model's.
  tfm::HfTokenizer other = load(R"({"[UNK]": 0, "z": 1})", R"( "extra": {"vocab": {"q": 7}},)");
  EXPECT_EQ(other.token_to_id("z"), 1);
  EXPECT_EQ(other.token_to_id("q"), -1);
}
