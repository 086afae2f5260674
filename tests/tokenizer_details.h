// The cases of tests/fixtures/tokenizer/detail_cases.json (scripts/make_tokenizer_detail_fixtures.js: Hugging Face
// tokenizers' encodings of hand-written tokenizer.json files, each made so that one detail decides the result).
#pragma once
#include "test_paths.h"
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace tfm::test {

inline const nlohmann::json& detail_cases() {
  static const nlohmann::json doc = [] {
    const std::string p = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/tokenizer/detail_cases.json";
    std::ifstream in(p);
    if (!in) throw std::runtime_error("cannot open fixture " + p);
    return nlohmann::json::parse(in);
  }();
  return doc;
}

inline const nlohmann::json& detail_tokenizer(const std::string& name) {
  for (const nlohmann::json& t : detail_cases().at("tokenizers"))
    if (t.at("name") == name) return t;
  throw std::runtime_error("no tokenizer " + name + " in detail_cases.json");
}

inline HfTokenizer detail_hf_tokenizer(const std::string& name) {
  return HfTokenizer::from_json_text(detail_tokenizer(name).at("tokenizer").dump(), name);
}

// Every case of tokenizer `name`: ids, tokens, offsets and the decoded text as Hugging Face gives them. Returns the
// number of cases compared.
inline int check_detail_cases(const std::string& name) {
  const HfTokenizer tok = detail_hf_tokenizer(name);
  int n = 0;
  for (const nlohmann::json& c : detail_tokenizer(name).at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    SCOPED_TRACE(name + ": '" + text + "'");
    const Encoding e = tok.encode(text);
    EXPECT_EQ(e.input_ids, c.at("input_ids").get<std::vector<int64_t>>());
    EXPECT_EQ(e.tokens, c.at("tokens").get<std::vector<std::string>>());
    std::vector<std::pair<int64_t, int64_t>> offsets;
    for (const nlohmann::json& o : c.at("offsets")) offsets.emplace_back(o.at(0).get<int64_t>(), o.at(1).get<int64_t>());
    EXPECT_EQ(e.offsets, offsets);
    EXPECT_EQ(tok.decode(e.input_ids, true), c.at("decoded").get<std::string>());
    ++n;
  }
  return n;
}

}  // namespace tfm::test
