// The pipeline components of the tokenizer engine (internal to src/text/tokenizer).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "text/tokenizer/normalized.h"
#include "text/tokenizer/tokenizer.h"

namespace tfm::tok {

struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int64_t, StrHash, std::equal_to<>>;

// A model token: id, string, and [start, end) in bytes of the piece's UTF-8.
struct Token {
  int64_t id;
  std::string value;
  uint32_t start, end;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormStr& n) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits (empty pieces dropped), as PreTokenizedString::split does.
  virtual void pre_tokenize(std::vector<NormStr>& pieces) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(std::string_view piece, std::vector<Token>& out) const = 0;
  virtual std::string type() const = 0;
  // The model's continuing_subword_prefix (WordPiece "##", a BPE's when it sets one), "" when it has none.
  virtual std::string continuing_subword_prefix() const { return ""; }
  const Vocab& vocab() const { return vocab_; }
  int64_t token_to_id(std::string_view t) const {
    auto it = vocab_.find(t);
    return it == vocab_.end() ? -1 : it->second;
  }
  const std::string* id_to_token(int64_t id) const {
    return id >= 0 && id < (int64_t)id_to_token_.size() && has_id_[(size_t)id] ? &id_to_token_[(size_t)id] : nullptr;
  }
  int64_t size() const { return (int64_t)id_to_token_.size(); }

 protected:
  void build_reverse(const std::string& source);  // id_to_token_ from vocab_; throws on duplicate ids
  Vocab vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual size_t added_tokens(bool pair) const = 0;
  // tokenizers' process_encodings: encodings holds 1 or 2 sequences on input; the output list is merged.
  virtual void process(std::vector<Encoding>& encodings, bool add_special_tokens) const = 0;
  // Ids the processor adds before / after a single sequence (for cls/sep-like queries).
  virtual std::vector<int64_t> single_prefix_ids() const { return {}; }
  virtual std::vector<int64_t> single_suffix_ids() const { return {}; }
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builders from tokenizer.json values; throw std::runtime_error "<source>: <component>: <what>".
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& source);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& source);
// vocab: model.vocab already read (HfTokenizer::from_json_text reads it while parsing, and leaves an empty object in
// j), moved from; null: read from j["vocab"].
std::unique_ptr<Model> make_model(const nlohmann::json& j, const std::string& source, Vocab* vocab = nullptr);
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const std::string& source);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& source);

// BERT pieces for vocab.txt folders.
std::unique_ptr<Normalizer> make_bert_normalizer(bool clean_text, bool handle_chinese_chars,
                                                 std::optional<bool> strip_accents, bool lowercase);
std::unique_ptr<PreTokenizer> make_bert_pre_tokenizer();
std::unique_ptr<Model> make_wordpiece(Vocab vocab, const std::string& unk, const std::string& prefix,
                                      int64_t max_chars, const std::string& source);
std::unique_ptr<PostProcessor> make_bert_processing(std::string cls, int64_t cls_id, std::string sep, int64_t sep_id);
std::unique_ptr<Decoder> make_wordpiece_decoder(std::string prefix, bool cleanup);

// ByteLevel offsets trimming (processors/byte_level.rs process_offsets).
void trim_byte_level_offsets(Encoding& e, bool add_prefix_space);
// Rust String::from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);

// tokenizer.json's pattern object: {"String": s} (a literal) or {"Regex": r} (Oniguruma); throws
// std::runtime_error for anything else.
std::unique_ptr<Pattern> make_pattern(const nlohmann::json& p);

// Runs `build` (the constructor of one tokenizer.json component of `kind`, "normalizer", "decoder", ..., whose
// "type" is `type`) and turns its errors into one std::runtime_error "SOURCE: KIND TYPE: what"; an error that
// already names SOURCE (a nested component's) passes through unchanged. Returns what build returns.
template <class F>
auto build_component(const std::string& source, const std::string& kind, const std::string& type, F&& build)
    -> decltype(build()) {
  const std::string where = source + ": " + kind + " " + type + ": ";
  try {
    return build();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(where + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(where + e.what());
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    if (m.rfind(source + ":", 0) == 0) throw;
    throw std::runtime_error(where + m);
  }
}

}  // namespace tfm::tok
