// BertTokenizer against Hugging Face `tokenizers`: every expected value comes from
// tests/fixtures/tokenizer/bert_base_uncased_cases.json, written by scripts/make_tokenizer_fixtures.js with the
// HF library itself, or from the reference facts in shared/data/README.md.
#include "test_paths.h"
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "text/bert_tokenizer.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string data_dir() {
  const char* env = std::getenv("TFM_DATA_DIR");
  return env && *env ? std::string(env) : std::string(TFM_SOURCE_DIR) + "/../shared/data";
}

std::string bert_dir() { return data_dir() + "/bert-base-uncased"; }

const json& fixtures() {
  static const json doc = [] {
    std::string path = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/tokenizer/bert_base_uncased_cases.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open fixture " + path);
    return json::parse(in);
  }();
  return doc;
}

const tfm::BertTokenizer& hf_json_tokenizer() {
  static const tfm::BertTokenizer t = tfm::BertTokenizer::from_tokenizer_json(bert_dir() + "/tokenizer.json");
  return t;
}

const tfm::BertTokenizer& vocab_txt_tokenizer() {
  static const tfm::BertTokenizer t = [] {
    tfm::BertNormalizerOptions o;
    o.lowercase = true;  // do_lower_case of bert-base-uncased/tokenizer_config.json
    return tfm::BertTokenizer::from_vocab_file(bert_dir() + "/vocab.txt", o);
  }();
  return t;
}

// Escapes control and non-ASCII bytes so a failing case can be read in the log.
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

// Compares every fixture case of `key` ("cases" or "random_cases"); returns the number compared.
int check_cases(const tfm::BertTokenizer& tok, const char* key) {
  int n = 0;
  for (const json& c : fixtures().at(key)) {
    std::string text = c.at("text").get<std::string>();
    std::string pair;
    bool has_pair = c.contains("pair");
    if (has_pair) pair = c.at("pair").get<std::string>();
    bool add_special = c.at("add_special_tokens").get<bool>();
    int64_t max_length = c.value("max_length", (int64_t)0);
    SCOPED_TRACE("text='" + printable(text) + "'" + (has_pair ? " pair='" + printable(pair) + "'" : "") +
                 " add_special_tokens=" + (add_special ? "true" : "false") +
                 " max_length=" + std::to_string(max_length));
    tfm::Encoding e = tok.encode(text, has_pair ? &pair : nullptr, add_special, max_length);
    EXPECT_EQ(e.tokens, c.at("tokens").get<std::vector<std::string>>());
    EXPECT_EQ(e.input_ids, c.at("input_ids").get<std::vector<int64_t>>());
    EXPECT_EQ(e.token_type_ids, c.at("token_type_ids").get<std::vector<int64_t>>());
    EXPECT_EQ(e.attention_mask, std::vector<int64_t>(e.input_ids.size(), 1));
    ++n;
  }
  return n;
}

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("tfm_tok_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return (path / name).string();
  }
};

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

TEST(TokenizerReference, DataReadmeFacts) {
  // shared/data/README.md, "Reference facts to test against".
  const tfm::BertTokenizer& tok = hf_json_tokenizer();
  std::vector<int64_t> a{2051, 10029, 2066, 2019, 8612};
  std::vector<int64_t> b{1045, 2031, 1037, 3959, 1012};
  EXPECT_EQ(tok.encode("time flies like an arrow", nullptr, false).input_ids, a);
  EXPECT_EQ(tok.encode("I have a dream.", nullptr, false).input_ids, b);
  std::vector<int64_t> single{101};
  single.insert(single.end(), a.begin(), a.end());
  single.push_back(102);
  EXPECT_EQ(tok.encode("time flies like an arrow").input_ids, single);
  std::string second = "I have a dream.";
  tfm::Encoding p = tok.encode("time flies like an arrow", &second);
  std::vector<int64_t> pair_ids = single;
  pair_ids.insert(pair_ids.end(), b.begin(), b.end());
  pair_ids.push_back(102);
  EXPECT_EQ(p.input_ids, pair_ids);
  std::vector<int64_t> types(7, 0);
  types.resize(13, 1);
  EXPECT_EQ(p.token_type_ids, types);
}

TEST(TokenizerReference, VocabAndSpecialIds) {
  // Ids from bert-base-uncased/tokenizer.json "added_tokens".
  for (const tfm::BertTokenizer* tok : {&hf_json_tokenizer(), &vocab_txt_tokenizer()}) {
    EXPECT_EQ(tok->vocab_size(), 30522);
    EXPECT_EQ(tok->pad_id(), 0);
    EXPECT_EQ(tok->unk_id(), 100);
    EXPECT_EQ(tok->cls_id(), 101);
    EXPECT_EQ(tok->sep_id(), 102);
    EXPECT_EQ(tok->token_to_id("[MASK]"), 103);
    EXPECT_EQ(tok->token_to_id("arrow"), 8612);
    EXPECT_EQ(tok->token_to_id("no-such-token"), -1);
    EXPECT_EQ(tok->id_to_token(8612), "arrow");
    EXPECT_EQ(tok->id_to_token(102), "[SEP]");
    EXPECT_THROW(tok->id_to_token(30522), std::out_of_range);
    EXPECT_THROW(tok->id_to_token(-1), std::out_of_range);
  }
}

TEST(TokenizerFixture, TokenizerJsonMatchesHuggingFace) { EXPECT_GE(check_cases(hf_json_tokenizer(), "cases"), 100); }

TEST(TokenizerFixture, TokenizerJsonMatchesHuggingFaceRandom) {
  EXPECT_EQ(check_cases(hf_json_tokenizer(), "random_cases"), 300);
}

TEST(TokenizerFixture, VocabTxtMatchesHuggingFace) {
  EXPECT_GE(check_cases(vocab_txt_tokenizer(), "cases"), 100);
  EXPECT_EQ(check_cases(vocab_txt_tokenizer(), "random_cases"), 300);
}

TEST(TokenizerFixture, FromDirMatchesHuggingFace) {
  tfm::BertTokenizer tok = tfm::BertTokenizer::from_dir(bert_dir());
  EXPECT_EQ(tok.model_max_length(), 512);  // not in this tokenizer_config.json: the BERT default
  EXPECT_GE(check_cases(tok, "cases"), 100);

  // Without tokenizer.json, from_dir reads vocab.txt + tokenizer_config.json.
  TempDir tmp;
  fs::copy_file(bert_dir() + "/vocab.txt", tmp.path / "vocab.txt");
  tmp.write("tokenizer_config.json", R"({"do_lower_case": true, "model_max_length": 128})");
  tfm::BertTokenizer from_vocab = tfm::BertTokenizer::from_dir(tmp.path.string());
  EXPECT_EQ(from_vocab.model_max_length(), 128);
  EXPECT_FALSE(from_vocab.normalizer_options().strip_accents.has_value());
  EXPECT_GE(check_cases(from_vocab, "cases"), 100);
}

TEST(TokenizerFixture, BatchPaddingMatchesHuggingFace) {
  const tfm::BertTokenizer& tok = hf_json_tokenizer();
  int n = 0;
  for (const json& b : fixtures().at("batches")) {
    auto texts = b.at("texts").get<std::vector<std::string>>();
    SCOPED_TRACE("batch " + std::to_string(n));
    std::vector<tfm::Encoding> enc =
        tok.encode_batch(texts, b.at("add_special_tokens").get<bool>(), b.value("max_length", (int64_t)0));
    ASSERT_EQ(enc.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(enc[i].input_ids, b.at("input_ids")[i].get<std::vector<int64_t>>());
      EXPECT_EQ(enc[i].token_type_ids, b.at("token_type_ids")[i].get<std::vector<int64_t>>());
      EXPECT_EQ(enc[i].attention_mask, b.at("attention_mask")[i].get<std::vector<int64_t>>());
      EXPECT_EQ(enc[i].tokens, b.at("tokens")[i].get<std::vector<std::string>>());
    }
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(TokenizerFixture, NormalizerOptionsMatchHuggingFace) {
  // HF BertNormalizer with other options: strip_accents without lowercase, cased, no clean_text, ...
  std::map<std::string, tfm::BertTokenizer> by_options;
  int n = 0;
  for (const json& c : fixtures().at("normalizer_cases")) {
    tfm::BertNormalizerOptions o;
    o.clean_text = c.at("clean_text").get<bool>();
    o.handle_chinese_chars = c.at("handle_chinese_chars").get<bool>();
    o.strip_accents = c.at("strip_accents").get<bool>();
    o.lowercase = c.at("lowercase").get<bool>();
    std::string key = c.at("clean_text").dump() + c.at("handle_chinese_chars").dump() + c.at("strip_accents").dump() +
                      c.at("lowercase").dump();
    auto it = by_options.find(key);
    if (it == by_options.end())
      it = by_options.emplace(key, tfm::BertTokenizer::from_vocab_file(bert_dir() + "/vocab.txt", o)).first;
    std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(it->second.normalize(text), c.at("normalized").get<std::string>())
        << "options " << key << " text '" << printable(text) << "'";
    ++n;
  }
  EXPECT_EQ(by_options.size(), 4u);
  EXPECT_GE(n, 300);
}

TEST(TokenizerFixture, TokenizeIsEncodeWithoutSpecials) {
  const tfm::BertTokenizer& tok = hf_json_tokenizer();
  for (const json& c : fixtures().at("cases")) {
    if (c.contains("pair") || c.contains("max_length") || c.at("add_special_tokens").get<bool>()) continue;
    EXPECT_EQ(tok.tokenize(c.at("text").get<std::string>()), c.at("tokens").get<std::vector<std::string>>());
  }
}

TEST(TokenizerReference, LongTextIsLinear) {
  // 20k repetitions of a README sentence: 100k words, one pass. A quadratic scan would take minutes here.
  const tfm::BertTokenizer& tok = hf_json_tokenizer();
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "time flies like an arrow ";
  tfm::Encoding e = tok.encode(text, nullptr, false);
  ASSERT_EQ(e.input_ids.size(), 100000u);
  const int64_t expect[5] = {2051, 10029, 2066, 2019, 8612};
  for (size_t i = 0; i < e.input_ids.size(); ++i) ASSERT_EQ(e.input_ids[i], expect[i % 5]) << "at " << i;
}

TEST(TokenizerErrors, InvalidUtf8NamesByteOffset) {
  const tfm::BertTokenizer& tok = hf_json_tokenizer();
  struct Bad {
    std::string text;
    size_t offset;
  };
  const std::vector<Bad> bad = {
      {"ab\x80", 2},            // lone continuation byte
      {"abc\xC3", 3},           // truncated 2-byte sequence
      {"\xC0\x80", 0},          // overlong NUL
      {"x\xE0\x80\x80", 1},     // overlong 3-byte
      {"ok \xED\xA0\x80", 3},   // UTF-16 surrogate U+D800
      {"\xF4\x90\x80\x80", 0},  // above U+10FFFF
      {"caf\xC3\xA9 \xFF", 6},  // invalid lead byte after valid 2-byte char
  };
  for (const Bad& b : bad) {
    std::string msg = error_of([&] { tok.encode(b.text); });
    EXPECT_NE(msg.find("UTF-8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte offset " + std::to_string(b.offset)), std::string::npos) << msg;
    EXPECT_THROW(tok.encode(b.text), std::invalid_argument);
  }
  std::string bad_pair = "\x80";
  EXPECT_NE(error_of([&] { tok.encode("fine", &bad_pair); }).find("UTF-8"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.tokenize("\xC3"); }).find("UTF-8"), std::string::npos);
}

TEST(TokenizerErrors, MaxLengthTooSmallForSpecialTokens) {
  const tfm::BertTokenizer& tok = hf_json_tokenizer();
  std::string pair = "b";
  EXPECT_THROW(tok.encode("a", &pair, true, 2), std::invalid_argument);
  EXPECT_THROW(tok.encode("a", nullptr, true, 1), std::invalid_argument);
  EXPECT_THROW(tok.encode("a", nullptr, true, -1), std::invalid_argument);
  // Exactly the special tokens fit: both sequences are emptied.
  EXPECT_EQ(tok.encode("a b", &pair, true, 3).input_ids, (std::vector<int64_t>{101, 102, 102}));
}

TEST(TokenizerErrors, MissingFilesNameThePath) {
  std::string missing = data_dir() + "/no-such-dir/vocab.txt";
  std::string msg = error_of([&] { tfm::BertTokenizer::from_vocab_file(missing, {}); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;

  std::string missing_json = data_dir() + "/no-such-dir/tokenizer.json";
  msg = error_of([&] { tfm::BertTokenizer::from_tokenizer_json(missing_json); });
  EXPECT_NE(msg.find(missing_json), std::string::npos) << msg;

  TempDir tmp;
  msg = error_of([&] { tfm::BertTokenizer::from_dir(tmp.path.string()); });
  EXPECT_NE(msg.find("vocab.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
}

TEST(TokenizerErrors, MalformedJson) {
  TempDir tmp;
  std::string path = tmp.write("tokenizer.json", "{\"model\": {\"vocab\": ");
  std::string msg = error_of([&] { tfm::BertTokenizer::from_tokenizer_json(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("JSON"), std::string::npos) << msg;
}

// Other pipelines than BERT's load too (the engine's own fixtures are in test_hf_tokenizer.cpp); unknown
// component types are refused with the file and the type named.
TEST(TokenizerErrors, UnknownComponentIsNamed) {
  TempDir tmp;
  const std::string wp_model =
      R"("model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3, "a": 4}})";
  std::string nfc = tmp.write("nfc.json", R"({"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": null, )" + wp_model + "}");
  EXPECT_EQ(tfm::BertTokenizer::from_tokenizer_json(nfc).encode("a A").input_ids, (std::vector<int64_t>{4, 3}));
  std::string bad = tmp.write("bad.json", R"({"normalizer": {"type": "Bogus"}, "pre_tokenizer": null,
      "post_processor": null, )" + wp_model + "}");
  std::string msg = error_of([&] { tfm::BertTokenizer::from_tokenizer_json(bad); });
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  EXPECT_NE(msg.find("Bogus"), std::string::npos) << msg;
  const std::string bert_parts =
      R"("added_tokens": [], "normalizer": {"type": "BertNormalizer", "lowercase": true},
         "pre_tokenizer": {"type": "BertPreTokenizer"},
         "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]})";
  // A minimal valid file works, and BertProcessing supplies [CLS]/[SEP].
  std::string ok = tmp.write("ok.json", "{" + bert_parts + ", " + wp_model + "}");
  tfm::BertTokenizer tok = tfm::BertTokenizer::from_tokenizer_json(ok);
  EXPECT_EQ(tok.encode("A a b").input_ids, (std::vector<int64_t>{1, 4, 4, 3, 2}));
}

// A tokenizer.json that sets "truncation" truncates every encode, as HF applies it. The fixtures' max_length
// cases were produced by HF with exactly this setting (tokenizer.setTruncation(max_length)).
TEST(TokenizerFixture, TruncationInTokenizerJsonMatchesHuggingFace) {
  TempDir tmp;
  json base = tfm::load_json_file(bert_dir() + "/tokenizer.json");
  std::map<int64_t, std::vector<json>> by_length;
  for (const json& c : fixtures().at("cases"))
    if (c.contains("max_length")) by_length[c.at("max_length").get<int64_t>()].push_back(c);
  ASSERT_GE(by_length.size(), 5u);
  int n = 0;
  for (const auto& [max_length, cases] : by_length) {
    json j = base;
    j["truncation"] = {{"direction", "Right"}, {"max_length", max_length}, {"strategy", "LongestFirst"}, {"stride", 0}};
    tfm::BertTokenizer tok =
        tfm::BertTokenizer::from_tokenizer_json(tmp.write("t" + std::to_string(max_length) + ".json", j.dump()));
    for (const json& c : cases) {
      std::string text = c.at("text").get<std::string>(), pair = c.value("pair", std::string());
      SCOPED_TRACE("max_length " + std::to_string(max_length) + " text '" + printable(text) + "'");
      tfm::Encoding e = tok.encode(text, c.contains("pair") ? &pair : nullptr, c.at("add_special_tokens").get<bool>());
      EXPECT_EQ(e.input_ids, c.at("input_ids").get<std::vector<int64_t>>());
      EXPECT_EQ(e.token_type_ids, c.at("token_type_ids").get<std::vector<int64_t>>());
      ++n;
    }
  }
  EXPECT_GE(n, 15);
}

// A template that names a special token it does not define, or a malformed truncation, is refused.
TEST(TokenizerErrors, MalformedPostProcessorAndTruncation) {
  TempDir tmp;
  const json base = tfm::load_json_file(bert_dir() + "/tokenizer.json");
  auto error_with = [&](const std::function<void(json&)>& edit) {
    json j = base;
    edit(j);
    std::string path = tmp.write("edited.json", j.dump());
    return error_of([&] { tfm::BertTokenizer::from_tokenizer_json(path); });
  };
  std::string msg = error_with([](json& j) { j["post_processor"]["special_tokens"].erase("[SEP]"); });
  EXPECT_NE(msg.find("'[SEP]'"), std::string::npos) << msg;
  msg = error_with([](json& j) {
    j["truncation"] = {{"direction", "Up"}, {"max_length", 8}, {"strategy", "LongestFirst"}, {"stride", 0}};
  });
  EXPECT_NE(msg.find("truncation"), std::string::npos) << msg;
  msg = error_with([](json& j) {
    j["truncation"] = {{"direction", "Right"}, {"max_length", 0}, {"strategy", "LongestFirst"}, {"stride", 0}};
  });
  EXPECT_NE(msg.find("max_length"), std::string::npos) << msg;
  msg = error_with([](json& j) { j["padding"] = {{"strategy", "Everything"}}; });
  EXPECT_NE(msg.find("padding"), std::string::npos) << msg;
}

}  // namespace
