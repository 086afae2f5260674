#include "text/bert_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/json_util.h"

namespace tfm {

using nlohmann::json;

void BertTokenizer::finish() {
  const HfTokenizer& e = *engine_;
  id_to_token_.assign((size_t)e.vocab_size(), std::string());
  for (int64_t i = 0; i < e.vocab_size(); ++i)
    if (auto t = e.id_to_token(i)) id_to_token_[(size_t)i] = *t;
  auto first_of = [&](std::initializer_list<const char*> names) -> int64_t {
    for (const char* n : names)
      if (int64_t id = e.token_to_id(n); id >= 0) return id;
    return -1;
  };
  cls_id_ = e.first_special_id();
  if (cls_id_ < 0) cls_id_ = first_of({"[CLS]", "<s>", "<cls>"});
  sep_id_ = e.last_special_id();
  if (sep_id_ < 0) sep_id_ = first_of({"[SEP]", "</s>", "<sep>"});
  pad_id_ = e.padding() ? e.padding()->pad_id : first_of({"[PAD]", "<pad>"});
  if (pad_id_ < 0) pad_id_ = e.pad_id();
  unk_id_ = first_of({"[UNK]", "<unk>"});
  // Without a tokenizer_config.json: a family has token type ids when its post-processor gives a pair type 1.
  try {
    std::string_view b = "b";
    Encoding p = e.encode("a", &b);
    has_token_type_ids_ = std::find(p.token_type_ids.begin(), p.token_type_ids.end(), 1) != p.token_type_ids.end();
  } catch (const std::exception&) {
    has_token_type_ids_ = false;
  }
}

BertTokenizer BertTokenizer::from_vocab_file(const std::string& path, const BertNormalizerOptions& options,
                                             int64_t model_max_length) {
  BertTokenizer t;
  HfTokenizer::BertOptions o;
  o.clean_text = options.clean_text;
  o.handle_chinese_chars = options.handle_chinese_chars;
  o.strip_accents = options.strip_accents;
  o.lowercase = options.lowercase;
  t.engine_ = std::make_shared<HfTokenizer>(HfTokenizer::from_bert_vocab(path, o));
  t.norm_ = options;
  t.model_max_length_ = model_max_length;
  t.finish();
  return t;
}

BertTokenizer BertTokenizer::from_tokenizer_json(const std::string& path) {
  BertTokenizer t;
  t.engine_ = std::make_shared<HfTokenizer>(HfTokenizer::from_file(path));
  t.finish();
  return t;
}

BertTokenizer BertTokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path tok_json = fs::path(dir) / "tokenizer.json";
  fs::path vocab_txt = fs::path(dir) / "vocab.txt";
  fs::path config = fs::path(dir) / "tokenizer_config.json";
  json cfg = json::object();
  if (fs::exists(config)) cfg = load_json_file(config.string());
  if (!cfg.is_object()) throw std::runtime_error(config.string() + ": expected a JSON object");
  std::string cfg_name = config.string();
  int64_t max_len = 512;
  if (cfg.contains("model_max_length") && !cfg["model_max_length"].is_null()) {
    // transformers writes 1e30 for "no limit"; that does not fit int64.
    double v = json_number(cfg, "model_max_length", cfg_name);
    max_len = v >= 9.2e18 ? std::numeric_limits<int64_t>::max() : (int64_t)v;
  }
  BertTokenizer t;
  if (fs::exists(tok_json)) {
    t = from_tokenizer_json(tok_json.string());
    t.model_max_length_ = max_len;
  } else if (!fs::exists(vocab_txt) &&
             (fs::exists(fs::path(dir) / "sentencepiece.bpe.model") || fs::exists(fs::path(dir) / "spiece.model"))) {
    // A SentencePiece folder without tokenizer.json: converted as transformers' fast tokenizer would be.
    const std::string cls = cfg.contains("tokenizer_class") && cfg["tokenizer_class"].is_string()
                                ? cfg["tokenizer_class"].get<std::string>()
                                : "";
    const bool xlmr = fs::exists(fs::path(dir) / "sentencepiece.bpe.model");
    const fs::path model = fs::path(dir) / (xlmr ? "sentencepiece.bpe.model" : "spiece.model");
    if (!cls.empty() && cls.find(xlmr ? "XLMRoberta" : "T5") == std::string::npos)
      throw std::runtime_error(model.string() + ": tokenizer_class '" + cls + "' has no conversion here without a " +
                               "tokenizer.json (" + (xlmr ? "XLMRobertaTokenizer" : "T5Tokenizer") + " only)");
    const int64_t extra = xlmr ? 0 : json_int_or(cfg, "extra_ids", 100, cfg_name);
    t.engine_ = std::make_shared<HfTokenizer>(
        HfTokenizer::from_json_text(sentencepiece_tokenizer_json(model.string(), !xlmr, extra), model.string()));
    t.finish();
    t.has_token_type_ids_ = false;
    t.model_max_length_ = max_len;
  } else {
    if (!fs::exists(vocab_txt))
      throw std::runtime_error(dir + ": no tokenizer.json or vocab.txt (looked for " + tok_json.string() + " and " +
                               vocab_txt.string() + ")");
    BertNormalizerOptions o;
    o.lowercase = json_bool_or(cfg, "do_lower_case", true, cfg_name);
    o.handle_chinese_chars = json_bool_or(cfg, "tokenize_chinese_chars", true, cfg_name);
    if (cfg.contains("strip_accents") && !cfg["strip_accents"].is_null())
      o.strip_accents = json_bool(cfg, "strip_accents", cfg_name);
    t = from_vocab_file(vocab_txt.string(), o, max_len);
  }
  // model_input_names, else the tokenizer class, decides whether the family has token_type_ids.
  if (cfg.contains("model_input_names") && cfg["model_input_names"].is_array()) {
    const json& names = cfg["model_input_names"];
    t.has_token_type_ids_ = std::find(names.begin(), names.end(), json("token_type_ids")) != names.end();
  } else if (cfg.contains("tokenizer_class") && cfg["tokenizer_class"].is_string()) {
    std::string c = cfg["tokenizer_class"].get<std::string>();
    for (const char* no : {"Roberta", "DistilBert", "MPNet", "GPT2", "T5", "Camembert", "Bart", "Longformer",
                           "ModernBert", "Mbart", "Marian", "Bloom", "Llama", "Qwen"})
      if (c.find(no) != std::string::npos) {
        t.has_token_type_ids_ = false;
        break;
      }
    if (c.rfind("Bert", 0) == 0 || c.find("Electra") != std::string::npos) t.has_token_type_ids_ = true;
  }
  return t;
}

Encoding BertTokenizer::encode(std::string_view text, const std::string* pair, const EncodeCall& call) const {
  std::string_view p;
  if (pair) p = *pair;
  return engine_->encode(text, pair ? &p : nullptr, call);
}

Encoding BertTokenizer::encode(std::string_view text, const std::string* pair, bool add_special_tokens,
                               int64_t max_length) const {
  if (max_length < 0) throw std::invalid_argument("encode: max_length must be >= 0, got " + std::to_string(max_length));
  EncodeCall c;
  c.add_special_tokens = add_special_tokens;
  c.max_length = max_length;
  return encode(text, pair, c);
}

std::vector<Encoding> BertTokenizer::encode_batch(const std::vector<std::string>& texts, bool add_special_tokens,
                                                  int64_t max_length) const {
  std::vector<Encoding> out;
  out.reserve(texts.size());
  for (const std::string& t : texts) out.push_back(encode(t, nullptr, add_special_tokens, max_length));
  engine_->pad(out);
  return out;
}

std::vector<std::string> BertTokenizer::tokenize(std::string_view text) const {
  EncodeCall c;
  c.add_special_tokens = false;
  return engine_->encode(text, nullptr, c).tokens;
}

std::string BertTokenizer::normalize(std::string_view text) const { return engine_->normalize(text); }

int64_t BertTokenizer::token_to_id(const std::string& token) const { return engine_->token_to_id(token); }

const std::string& BertTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= (int64_t)id_to_token_.size())
    throw std::out_of_range("id_to_token: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(id_to_token_.size()) + ")");
  return id_to_token_[(size_t)id];
}

}  // namespace tfm
