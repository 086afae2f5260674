#include "text/translation_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "io/json_util.h"

namespace tfm {

namespace {

// transformers' FAIRSEQ_LANGUAGE_CODES["m2m100"] (tokenization_m2m_100.py), used when a folder lists none.
const char* const kM2M100Languages[] = {
    "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el", "en",
    "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu", "hy", "id",
    "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt", "lv", "mg", "mk",
    "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sd", "si",
    "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr", "uk", "ur", "uz", "vi", "wo",
    "xh", "yi", "yo", "zh", "zu"};

bool exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

std::unique_ptr<sentencepiece::SentencePieceProcessor> load_spm(const std::string& path) {
  if (!exists(path)) throw std::runtime_error(path + ": file not found");
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(path);
  if (!status.ok()) throw std::runtime_error(path + ": not a SentencePiece model (" + status.ToString() + ")");
  return sp;
}

void load_vocab(const std::string& path, std::unordered_map<std::string, int64_t>& vocab,
                std::unordered_map<int64_t, std::string>& inv) {
  if (!exists(path)) throw std::runtime_error(path + ": file not found");
  const nlohmann::json j = load_json_file(path);
  if (!j.is_object()) throw std::runtime_error(path + ": expected an object of token -> id");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      throw std::runtime_error(path + ": id of token '" + it.key() + "' is not a non-negative integer");
    vocab[it.key()] = it.value().get<int64_t>();
    inv[it.value().get<int64_t>()] = it.key();
  }
}

int64_t get_id(const std::unordered_map<std::string, int64_t>& v, const std::string& token, const std::string& file) {
  auto it = v.find(token);
  if (it == v.end()) throw std::runtime_error(file + ": no token '" + token + "'");
  return it->second;
}

bool is_lang_token(const std::string& t, TranslationTokenizer::Kind k) {
  if (k == TranslationTokenizer::Kind::kM2M100) return t.size() > 4 && t.rfind("__", 0) == 0 && t.substr(t.size() - 2) == "__";
  const size_t u = t.find('_');  // NLLB: xxx_Xxxx
  return u != std::string::npos && u >= 2 && t.size() == u + 5 && std::isupper((unsigned char)t[u + 1]);
}

}  // namespace

TranslationTokenizer::~TranslationTokenizer() = default;

std::unique_ptr<TranslationTokenizer> TranslationTokenizer::load(const std::string& dir, const std::string& model_type) {
  std::unique_ptr<TranslationTokenizer> t(new TranslationTokenizer());
  const std::string cfg_path = dir + "/tokenizer_config.json";
  const nlohmann::json cfg = exists(cfg_path) ? load_json_file(cfg_path) : nlohmann::json::object();
  const std::string cls = cfg.is_object() ? json_string_or(cfg, "tokenizer_class", "", cfg_path) : "";
  if (model_type == "marian") {
    t->kind_ = Kind::kMarian;
    t->src_sp_ = load_spm(dir + "/source.spm");
    t->tgt_sp_ = load_spm(dir + "/target.spm");
    load_vocab(dir + "/vocab.json", t->vocab_, t->inv_);
    const bool separate = cfg.is_object() && json_bool_or(cfg, "separate_vocabs", false, cfg_path);
    if (separate) load_vocab(dir + "/target_vocab.json", t->tgt_vocab_, t->tgt_inv_);
    t->eos_ = get_id(t->vocab_, "</s>", dir + "/vocab.json");
    t->unk_ = get_id(t->vocab_, "<unk>", dir + "/vocab.json");
    t->pad_ = get_id(t->vocab_, "<pad>", dir + "/vocab.json");
    int64_t n = 0;
    for (auto& [k, v] : t->vocab_) n = std::max(n, v + 1);
    for (auto& [k, v] : t->tgt_vocab_) n = std::max(n, v + 1);
    t->special_.assign(n, false);
    for (int64_t id : {t->eos_, t->unk_, t->pad_}) t->special_[id] = true;
    if (!t->tgt_vocab_.empty())
      for (const char* s : {"</s>", "<unk>", "<pad>"})
        if (t->tgt_vocab_.count(s)) t->special_[t->tgt_vocab_[s]] = true;
    for (auto& [k, v] : t->vocab_)  // ">>fra<<" tokens: the target languages of a multi-target model
      if (k.size() > 4 && k.rfind(">>", 0) == 0 && k.substr(k.size() - 2) == "<<") t->languages_[k] = v;
    return t;
  }
  if (model_type != "m2m_100") throw std::runtime_error(dir + ": no tokenizer for model_type '" + model_type + "'");
  t->kind_ = cls.rfind("Nllb", 0) == 0 ? Kind::kNllb : Kind::kM2M100;
  t->src_sp_ = load_spm(dir + "/sentencepiece.bpe.model");
  t->eos_ = 2;
  t->unk_ = 3;
  t->pad_ = 1;
  int64_t base = 0;  // the first language id by the formula
  if (t->kind_ == Kind::kM2M100) {
    load_vocab(dir + "/vocab.json", t->vocab_, t->inv_);
    t->unk_ = get_id(t->vocab_, "<unk>", dir + "/vocab.json");
    t->eos_ = get_id(t->vocab_, "</s>", dir + "/vocab.json");
    t->pad_ = get_id(t->vocab_, "<pad>", dir + "/vocab.json");
    base = (int64_t)t->vocab_.size();
  } else {
    base = (int64_t)t->src_sp_->GetPieceSize() + 1;
  }
  // Languages: explicit ids, else the listed order, else fairseq's M2M100 list.
  if (cfg.is_object() && cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object()) {
    for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end(); ++it) {
      const auto& v = it.value();
      if (!v.is_object() || !v.contains("content") || !v["content"].is_string())
        throw std::runtime_error(cfg_path + ": added_tokens_decoder entry '" + it.key() + "' has no content");
      const std::string tok = v["content"].get<std::string>();
      if (is_lang_token(tok, t->kind_)) t->languages_[tok] = std::stoll(it.key());
    }
  }
  if (t->languages_.empty()) {
    nlohmann::json list;
    const std::string stm = dir + "/special_tokens_map.json";
    if (exists(stm)) {
      const nlohmann::json s = load_json_file(stm);
      if (s.is_object() && s.contains("additional_special_tokens")) list = s["additional_special_tokens"];
    }
    if (list.is_null() && cfg.is_object() && cfg.contains("additional_special_tokens"))
      list = cfg["additional_special_tokens"];
    std::vector<std::string> codes;
    if (list.is_array())
      for (const auto& e : list) {
        std::string tok = e.is_string() ? e.get<std::string>()
                          : e.is_object() && e.contains("content") ? e["content"].get<std::string>() : "";
        if (is_lang_token(tok, t->kind_)) codes.push_back(tok);
      }
    if (codes.empty() && t->kind_ == Kind::kM2M100)
      for (const char* c : kM2M100Languages) codes.push_back(std::string("__") + c + "__");
    if (codes.empty())
      throw std::runtime_error(dir + ": no language codes (tokenizer_config.json added_tokens_decoder or "
                               "additional_special_tokens)");
    for (size_t i = 0; i < codes.size(); ++i) t->languages_[codes[i]] = base + (int64_t)i;
  }
  int64_t n = base;
  for (auto& [k, v] : t->languages_) n = std::max(n, v + 1);
  t->special_.assign(n + 16, false);
  for (int64_t id : {0, 1, 2, 3}) t->special_[id] = true;
  for (auto& [k, v] : t->languages_) t->special_[v] = true;
  if (t->kind_ == Kind::kNllb) t->special_[base + t->languages_.size()] = true;  // <mask>
  if (cfg.is_object()) {
    auto norm = [&](std::string s) {
      if (s.empty() || t->kind_ == Kind::kNllb || s.rfind("__", 0) == 0) return s;
      return "__" + s + "__";
    };
    t->src_lang_ = norm(json_string_or(cfg, "src_lang", "", cfg_path));
    t->tgt_lang_ = norm(json_string_or(cfg, "tgt_lang", "", cfg_path));
  }
  return t;
}

int64_t TranslationTokenizer::piece_id(const std::string& piece, bool target) const {
  if (kind_ == Kind::kNllb) {
    const int id = src_sp_->PieceToId(piece);
    return id == 0 ? unk_ : (int64_t)id + 1;
  }
  const auto& v = target && !tgt_vocab_.empty() ? tgt_vocab_ : vocab_;
  auto it = v.find(piece);
  return it == v.end() ? unk_ : it->second;
}

std::string TranslationTokenizer::id_token(int64_t id, bool target) const {
  if (kind_ == Kind::kNllb) {
    static const char* const kFairseq[] = {"<s>", "<pad>", "</s>", "<unk>"};
    if (id >= 0 && id < 4) return kFairseq[id];
    for (auto& [k, v] : languages_)
      if (v == id) return k;
    if (id - 1 < src_sp_->GetPieceSize()) return src_sp_->IdToPiece((int)(id - 1));
    return "<unk>";
  }
  const auto& inv = target && !tgt_inv_.empty() ? tgt_inv_ : inv_;
  auto it = inv.find(id);
  if (it != inv.end()) return it->second;
  for (auto& [k, v] : languages_)
    if (v == id) return k;
  return "<unk>";
}

std::string TranslationTokenizer::target_token(int64_t id) const { return id_token(id, true); }
std::string TranslationTokenizer::source_token(int64_t id) const { return id_token(id, false); }

std::vector<int64_t> TranslationTokenizer::encode_source(const std::string& text0, const std::string& src_lang,
                                                        const std::string& target_lang) const {
  std::string text = text0;
  std::vector<int64_t> ids;
  if (kind_ == Kind::kMarian) {
    // language_code_re = ">>.+?<<": a leading code is kept as one token, every code is removed from the text.
    std::string code;
    for (size_t p = text.find(">>"); p != std::string::npos; p = text.find(">>", p)) {
      const size_t q = text.find("<<", p + 3);
      if (q == std::string::npos || q == p + 2) break;
      if (p == 0 && code.empty()) code = text.substr(0, q + 2);
      text.erase(p, q + 2 - p);
    }
    if (code.empty() && !target_lang.empty()) {
      code = target_lang.rfind(">>", 0) == 0 ? target_lang : ">>" + target_lang + "<<";
      if (!vocab_.count(code))
        throw std::invalid_argument("target language '" + target_lang + "': vocab.json has no token " + code);
    }
    if (!code.empty()) ids.push_back(piece_id(code, false));
  } else {
    const std::string lang = src_lang.empty() ? src_lang_ : src_lang;
    if (lang.empty()) throw std::invalid_argument("no source language (tokenizer_config.json has no src_lang)");
    ids.push_back(language_id(lang));
  }
  std::vector<std::string> pieces;
  const auto status = src_sp_->Encode(text, &pieces);
  if (!status.ok()) throw std::invalid_argument("SentencePiece: " + status.ToString());
  for (const std::string& p : pieces) ids.push_back(piece_id(p, false));
  ids.push_back(eos_);
  return ids;
}

std::vector<int64_t> TranslationTokenizer::encode_target(const std::string& text) const {
  std::vector<std::string> pieces;
  const auto status = (tgt_sp_ ? *tgt_sp_ : *src_sp_).Encode(text, &pieces);
  if (!status.ok()) throw std::invalid_argument("SentencePiece: " + status.ToString());
  std::vector<int64_t> ids;
  for (const std::string& p : pieces) ids.push_back(piece_id(p, true));
  return ids;
}

std::string TranslationTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<std::string> pieces;
  for (int64_t id : ids) {
    if (id >= 0 && id < (int64_t)special_.size() && special_[id]) continue;
    pieces.push_back(id_token(id, true));
  }
  const auto& sp = tgt_sp_ ? *tgt_sp_ : *src_sp_;
  std::string out;
  sp.Decode(pieces, &out);
  // convert_tokens_to_string: "▁" of unknown pieces becomes a space, the ends are stripped.
  std::string r;
  for (size_t i = 0; i < out.size();) {
    if (out.compare(i, 3, "\xE2\x96\x81") == 0) {
      r += ' ';
      i += 3;
    } else {
      r += out[i++];
    }
  }
  const size_t b = r.find_first_not_of(' '), e = r.find_last_not_of(' ');
  return b == std::string::npos ? "" : r.substr(b, e - b + 1);
}

namespace {
// NLLB-200's codes (FLORES-200: ISO 639-3 + script) of languages with an ISO 639-1 code, for LibreTranslate
// clients that send "fr".
const std::map<std::string, std::string>& nllb_iso639_1() {
  static const std::map<std::string, std::string> m = {
      {"af", "afr_Latn"}, {"am", "amh_Ethi"}, {"ar", "arb_Arab"}, {"az", "azj_Latn"}, {"be", "bel_Cyrl"},
      {"bg", "bul_Cyrl"}, {"bn", "ben_Beng"}, {"bs", "bos_Latn"}, {"ca", "cat_Latn"}, {"cs", "ces_Latn"},
      {"cy", "cym_Latn"}, {"da", "dan_Latn"}, {"de", "deu_Latn"}, {"el", "ell_Grek"}, {"en", "eng_Latn"},
      {"eo", "epo_Latn"}, {"es", "spa_Latn"}, {"et", "est_Latn"}, {"eu", "eus_Latn"}, {"fa", "pes_Arab"},
      {"fi", "fin_Latn"}, {"fr", "fra_Latn"}, {"ga", "gle_Latn"}, {"gl", "glg_Latn"}, {"gu", "guj_Gujr"},
      {"he", "heb_Hebr"}, {"hi", "hin_Deva"}, {"hr", "hrv_Latn"}, {"hu", "hun_Latn"}, {"hy", "hye_Armn"},
      {"id", "ind_Latn"}, {"is", "isl_Latn"}, {"it", "ita_Latn"}, {"ja", "jpn_Jpan"}, {"ka", "kat_Geor"},
      {"kk", "kaz_Cyrl"}, {"ko", "kor_Hang"}, {"lt", "lit_Latn"}, {"lv", "lvs_Latn"}, {"mk", "mkd_Cyrl"},
      {"ml", "mal_Mlym"}, {"mr", "mar_Deva"}, {"ms", "zsm_Latn"}, {"nl", "nld_Latn"}, {"no", "nob_Latn"},
      {"pl", "pol_Latn"}, {"pt", "por_Latn"}, {"ro", "ron_Latn"}, {"ru", "rus_Cyrl"}, {"sk", "slk_Latn"},
      {"sl", "slv_Latn"}, {"sq", "als_Latn"}, {"sr", "srp_Cyrl"}, {"sv", "swe_Latn"}, {"sw", "swh_Latn"},
      {"ta", "tam_Taml"}, {"te", "tel_Telu"}, {"th", "tha_Thai"}, {"tr", "tur_Latn"}, {"uk", "ukr_Cyrl"},
      {"ur", "urd_Arab"}, {"vi", "vie_Latn"}, {"zh", "zho_Hans"}};
  return m;
}
}  // namespace

std::vector<std::string> TranslationTokenizer::language_codes() const {
  std::vector<std::string> out;
  for (const auto& [token, id] : languages_) {
    std::string c = token;
    if (kind_ == Kind::kM2M100 && c.size() > 4 && c.rfind("__", 0) == 0) c = c.substr(2, c.size() - 4);
    if (kind_ == Kind::kMarian && c.size() > 4 && c.rfind(">>", 0) == 0) c = c.substr(2, c.size() - 4);
    if (kind_ == Kind::kNllb)
      for (const auto& [iso, nllb] : nllb_iso639_1())
        if (nllb == token) c = iso;
    out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t TranslationTokenizer::language_id(const std::string& code) const {
  std::vector<std::string> tries{code};
  if (kind_ == Kind::kM2M100) tries.push_back("__" + code + "__");
  if (kind_ == Kind::kMarian) tries.push_back(">>" + code + "<<");
  if (kind_ == Kind::kNllb)
    if (auto it = nllb_iso639_1().find(code); it != nllb_iso639_1().end()) tries.push_back(it->second);
  for (const auto& t : tries) {
    auto it = languages_.find(t);
    if (it != languages_.end()) return it->second;
  }
  std::string known;
  int n = 0;
  for (auto& [k, v] : languages_) {
    if (n++ == 8) {
      known += ", ...";
      break;
    }
    known += (known.empty() ? "" : ", ") + k;
  }
  throw std::invalid_argument("unknown language '" + code + "' (this model has " + std::to_string(languages_.size()) +
                              (languages_.empty() ? ")" : ": " + known + ")"));
}

}  // namespace tfm
