// Post-processors and decoders of the tokenizer engine (tokenizers' processors/ and decoders/).
#include <algorithm>
#include <map>
#include <stdexcept>

#include "text/tokenizer/components.h"
#include "text/tokenizer/unicode.h"

namespace tfm::tok {

using nlohmann::json;

void trim_byte_level_offsets(Encoding& e, bool add_prefix_space) {
  const char32_t space = 0x120;  // 'Ġ'
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    std::u32string t;
    try {
      t = decode_utf8(e.tokens[i]);
    } catch (const std::invalid_argument&) {
      continue;
    }
    size_t lead = 0, trail = 0;
    while (lead < t.size() && (t[lead] == space || is_whitespace(t[lead]))) ++lead;
    while (trail < t.size() && (t[t.size() - 1 - trail] == space || is_whitespace(t[t.size() - 1 - trail]))) ++trail;
    if (lead == 0 && trail == 0) continue;
    auto& off = e.offsets[i];
    if (lead > 0) {
      bool is_first = i == 0 || off.first == 0;
      if (is_first && add_prefix_space && lead == 1) lead = 0;
      off.first = std::min<int64_t>(off.first + (int64_t)lead, off.second);
    }
    if (trail > 0 && off.second >= (int64_t)trail) off.second = std::max<int64_t>(off.second - (int64_t)trail, off.first);
  }
}

std::string utf8_lossy(std::string_view b) {
  std::string out;
  out.reserve(b.size());
  size_t i = 0, n = b.size();
  const char* rep = "\xEF\xBF\xBD";
  while (i < n) {
    unsigned char c = (unsigned char)b[i];
    if (c < 0x80) {
      out.push_back((char)c);
      ++i;
      continue;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else {
      out += rep;
      ++i;
      continue;
    }
    // Maximal subpart: stop at the first byte that cannot continue the sequence.
    size_t k = 1;
    bool ok = true;
    for (; k <= need; ++k) {
      if (i + k >= n) {
        ok = false;
        break;
      }
      unsigned char d = (unsigned char)b[i + k];
      unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (d < l || d > h) {
        ok = false;
        break;
      }
    }
    if (ok) {
      out.append(b.substr(i, need + 1));
      i += need + 1;
    } else {
      out += rep;
      i += k;
    }
  }
  return out;
}

namespace {

void append_seq(Encoding& dst, const Encoding& src) {
  auto cat = [](auto& a, const auto& b) { a.insert(a.end(), b.begin(), b.end()); };
  cat(dst.input_ids, src.input_ids);
  cat(dst.token_type_ids, src.token_type_ids);
  cat(dst.attention_mask, src.attention_mask);
  cat(dst.tokens, src.tokens);
  cat(dst.offsets, src.offsets);
  cat(dst.special_tokens_mask, src.special_tokens_mask);
  cat(dst.sequence_ids, src.sequence_ids);
  cat(dst.words, src.words);
}

void push_special(Encoding& e, int64_t id, const std::string& tok, int64_t type_id) {
  e.input_ids.push_back(id);
  e.token_type_ids.push_back(type_id);
  e.attention_mask.push_back(1);
  e.tokens.push_back(tok);
  e.offsets.emplace_back(0, 0);
  e.special_tokens_mask.push_back(1);
  e.sequence_ids.push_back(-1);
  e.words.push_back(-1);
}

class BertProcessing : public PostProcessor {
 public:
  BertProcessing(std::string cls, int64_t cls_id, std::string sep, int64_t sep_id)
      : cls_(std::move(cls)), sep_(std::move(sep)), cls_id_(cls_id), sep_id_(sep_id) {}
  size_t added_tokens(bool pair) const override { return pair ? 3 : 2; }
  void process(std::vector<Encoding>& encs, bool add_special) const override {
    if (!add_special) return;
    for (size_t i = 0; i < encs.size(); ++i) {
      Encoding e;
      if (i == 0) push_special(e, cls_id_, cls_, 0);
      append_seq(e, encs[i]);
      push_special(e, sep_id_, sep_, i == 0 ? 0 : 1);
      encs[i] = std::move(e);
    }
  }
  std::vector<int64_t> single_prefix_ids() const override { return {cls_id_}; }
  std::vector<int64_t> single_suffix_ids() const override { return {sep_id_}; }

 private:
  std::string cls_, sep_;
  int64_t cls_id_, sep_id_;
};

class RobertaProcessing : public PostProcessor {
 public:
  RobertaProcessing(std::string cls, int64_t cls_id, std::string sep, int64_t sep_id, bool trim, bool prefix)
      : cls_(std::move(cls)), sep_(std::move(sep)), cls_id_(cls_id), sep_id_(sep_id), trim_(trim), prefix_(prefix) {}
  size_t added_tokens(bool pair) const override { return pair ? 4 : 2; }
  void process(std::vector<Encoding>& encs, bool add_special) const override {
    for (Encoding& e : encs) {
      if (trim_) trim_byte_level_offsets(e, prefix_);
      std::fill(e.token_type_ids.begin(), e.token_type_ids.end(), 0);
    }
    if (!add_special) return;
    for (size_t i = 0; i < encs.size(); ++i) {
      Encoding e;
      push_special(e, i == 0 ? cls_id_ : sep_id_, i == 0 ? cls_ : sep_, 0);
      append_seq(e, encs[i]);
      push_special(e, sep_id_, sep_, 0);
      encs[i] = std::move(e);
    }
  }
  std::vector<int64_t> single_prefix_ids() const override { return {cls_id_}; }
  std::vector<int64_t> single_suffix_ids() const override { return {sep_id_}; }

 private:
  std::string cls_, sep_;
  int64_t cls_id_, sep_id_;
  bool trim_, prefix_;
};

class ByteLevelProcessing : public PostProcessor {
 public:
  ByteLevelProcessing(bool trim, bool prefix) : trim_(trim), prefix_(prefix) {}
  size_t added_tokens(bool) const override { return 0; }
  void process(std::vector<Encoding>& encs, bool) const override {
    if (trim_)
      for (Encoding& e : encs) trim_byte_level_offsets(e, prefix_);
  }

 private:
  bool trim_, prefix_;
};

class TemplateProcessing : public PostProcessor {
 public:
  struct Piece {
    bool is_sequence;
    int seq;             // 0 = A, 1 = B
    std::string token;   // special token name
    int64_t type_id;
  };
  struct Special {
    std::vector<int64_t> ids;
    std::vector<std::string> tokens;
  };
  TemplateProcessing(std::vector<Piece> single, std::vector<Piece> pair, std::map<std::string, Special> specials)
      : single_(std::move(single)), pair_(std::move(pair)), specials_(std::move(specials)) {}
  size_t added_tokens(bool pair) const override {
    size_t n = 0;
    for (const Piece& p : pair ? pair_ : single_)
      if (!p.is_sequence) n += specials_.at(p.token).ids.size();
    return n;
  }
  void process(std::vector<Encoding>& encs, bool add_special) const override {
    const std::vector<Piece>& tmpl = encs.size() > 1 ? pair_ : single_;
    Encoding out;
    for (const Piece& p : tmpl) {
      if (p.is_sequence) {
        if ((size_t)p.seq >= encs.size()) continue;
        Encoding e = encs[(size_t)p.seq];
        std::fill(e.token_type_ids.begin(), e.token_type_ids.end(), p.type_id);
        std::fill(e.sequence_ids.begin(), e.sequence_ids.end(), p.seq);
        append_seq(out, e);
      } else if (add_special) {
        const Special& s = specials_.at(p.token);
        for (size_t k = 0; k < s.ids.size(); ++k) push_special(out, s.ids[k], s.tokens[k], p.type_id);
      }
    }
    encs.clear();
    encs.push_back(std::move(out));
  }
  std::vector<int64_t> single_prefix_ids() const override { return edge(true); }
  std::vector<int64_t> single_suffix_ids() const override { return edge(false); }

 private:
  std::vector<int64_t> edge(bool before) const {
    std::vector<int64_t> ids;
    bool seen_seq = false;
    for (const Piece& p : single_) {
      if (p.is_sequence) {
        seen_seq = true;
        continue;
      }
      if (seen_seq != before) {
        const Special& s = specials_.at(p.token);
        ids.insert(ids.end(), s.ids.begin(), s.ids.end());
      }
    }
    return ids;
  }
  std::vector<Piece> single_, pair_;
  std::map<std::string, Special> specials_;
};

class SequenceProcessing : public PostProcessor {
 public:
  explicit SequenceProcessing(std::vector<std::unique_ptr<PostProcessor>> v) : v_(std::move(v)) {}
  size_t added_tokens(bool pair) const override {
    size_t n = 0;
    for (const auto& p : v_) n += p->added_tokens(pair);
    return n;
  }
  void process(std::vector<Encoding>& encs, bool add_special) const override {
    for (const auto& p : v_) p->process(encs, add_special);
  }
  std::vector<int64_t> single_prefix_ids() const override {
    for (const auto& p : v_)
      if (auto ids = p->single_prefix_ids(); !ids.empty()) return ids;
    return {};
  }
  std::vector<int64_t> single_suffix_ids() const override {
    for (const auto& p : v_)
      if (auto ids = p->single_suffix_ids(); !ids.empty()) return ids;
    return {};
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> v_;
};

std::pair<std::string, int64_t> token_pair(const json& j, const char* what) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_string() || !j[1].is_number_integer())
    throw std::runtime_error(std::string(what) + " must be [token, id], found " + j.dump());
  return {j[0].get<std::string>(), j[1].get<int64_t>()};
}

std::vector<TemplateProcessing::Piece> template_pieces(const json& t) {
  std::vector<TemplateProcessing::Piece> out;
  if (t.is_string()) {  // "[CLS] $A [SEP] $B:1 [SEP]:1"
    std::string s = t.get<std::string>();
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && s[i] == ' ') ++i;
      size_t j = s.find(' ', i);
      if (j == std::string::npos) j = s.size();
      std::string w = s.substr(i, j - i);
      i = j;
      if (w.empty()) continue;
      int64_t type_id = 0;
      size_t colon = w.rfind(':');
      if (colon != std::string::npos && colon + 1 < w.size() &&
          w.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
        type_id = std::stoll(w.substr(colon + 1));
        w = w.substr(0, colon);
      }
      if (w == "$A" || w == "$a" || w == "$") out.push_back({true, 0, "", type_id});
      else if (w == "$B" || w == "$b") out.push_back({true, 1, "", type_id});
      else if (w.size() > 1 && w[0] == '$' && w.find_first_not_of("0123456789", 1) == std::string::npos)
        out.push_back({true, 0, "", std::stoll(w.substr(1))});
      else out.push_back({false, 0, w, type_id});
    }
    return out;
  }
  if (!t.is_array()) throw std::runtime_error("template must be a list of pieces, found " + t.dump().substr(0, 80));
  for (const json& p : t) {
    if (p.contains("Sequence")) {
      const json& q = p["Sequence"];
      std::string id = q.at("id").get<std::string>();
      if (id != "A" && id != "B") throw std::runtime_error("template sequence id must be A or B, found " + id);
      out.push_back({true, id == "A" ? 0 : 1, "", q.value("type_id", (int64_t)0)});
    } else if (p.contains("SpecialToken")) {
      const json& q = p["SpecialToken"];
      out.push_back({false, 0, q.at("id").get<std::string>(), q.value("type_id", (int64_t)0)});
    } else {
      throw std::runtime_error("unknown template piece " + p.dump().substr(0, 80));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Decoders.

const std::vector<int>& char_bytes() {  // inverse of the GPT-2 byte-to-unicode table, -1 elsewhere (< 0x144)
  static const std::vector<int> table = [] {
    std::vector<int> t(0x144, -1);
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) t[direct[b] ? b : 256 + n++] = b;
    return t;
  }();
  return table;
}

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const auto& cb = char_bytes();
    std::string bytes;
    for (const std::string& t : tokens) {
      std::u32string u;
      try {
        u = decode_utf8(t);
      } catch (const std::invalid_argument&) {
        bytes += t;
        continue;
      }
      std::string mine;
      bool all = true;
      for (char32_t c : u) {
        if (c >= cb.size() || cb[c] < 0) {
          all = false;
          break;
        }
        mine.push_back((char)cb[c]);
      }
      bytes += all ? mine : t;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0, hit;
  while ((hit = s.find(from, pos)) != std::string::npos) {
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && t.rfind(prefix_, 0) == 0) t.erase(0, prefix_.size());
        else t.insert(t.begin(), ' ');
      }
      if (cleanup_) {
        replace_all(t, " .", ".");
        replace_all(t, " ?", "?");
        replace_all(t, " !", "!");
        replace_all(t, " ,", ",");
        replace_all(t, " ' ", "'");
        replace_all(t, " n't", "n't");
        replace_all(t, " 'm", "'m");
        replace_all(t, " do not", " don't");
        replace_all(t, " 's", "'s");
        replace_all(t, " 've", "'ve");
        replace_all(t, " 're", "'re");
      }
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t rep, bool prepend) : rep_(rep), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::u32string u = decode_utf8(tokens[i]);
      std::string out;
      for (char32_t c : u) {
        if (c == rep_) {
          if (!(i == 0 && prepend_)) out.push_back(' ');
        } else {
          append_utf8(c, out);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  char32_t rep_;
  bool prepend_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t nbytes = 0;
    auto flush = [&] {
      if (nbytes == 0) return;
      bool valid = true;
      try {
        decode_utf8(bytes);
      } catch (const std::invalid_argument&) {
        valid = false;
      }
      if (valid) out.push_back(bytes);
      else
        for (size_t k = 0; k < nbytes; ++k) out.push_back("\xEF\xBF\xBD");
      bytes.clear();
      nbytes = 0;
    };
    for (std::string& t : tokens) {
      int v = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
        int h = hex(t[3]), l = hex(t[4]);
        if (h >= 0 && l >= 0) v = h * 16 + l;
      }
      if (v >= 0) {
        bytes.push_back((char)v);
        ++nbytes;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t c, size_t start, size_t stop) : c_(c), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::u32string u = decode_utf8(t);
      size_t a = 0;
      for (size_t i = 0; i < std::min(start_, u.size()); ++i) {
        if (u[i] == c_) a = i + 1;
        else break;
      }
      size_t b = u.size();
      for (size_t i = 0; i < stop_ && i < u.size(); ++i) {
        size_t idx = u.size() - i - 1;
        if (u[idx] == c_) b = idx;
        else break;
      }
      t = a < b ? encode_utf8(std::u32string_view(u).substr(a, b - a)) : std::string();
    }
  }

 private:
  char32_t c_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Pattern> p, std::u32string content) : p_(std::move(p)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      NormStr n = NormStr::from_original(decode_utf8(t), 0);
      replace_normalized(n, *p_, content_);
      t = encode_utf8(n.s);
    }
  }

 private:
  std::unique_ptr<Pattern> p_;
  std::u32string content_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> v) : v_(std::move(v)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : v_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> v_;
};

char32_t one_char(const std::string& s, const char* what) {
  std::u32string u = decode_utf8(s);
  if (u.size() != 1) throw std::runtime_error(std::string(what) + " must be one character, found '" + s + "'");
  return u[0];
}

}  // namespace

std::unique_ptr<PostProcessor> make_bert_processing(std::string cls, int64_t cls_id, std::string sep, int64_t sep_id) {
  return std::make_unique<BertProcessing>(std::move(cls), cls_id, std::move(sep), sep_id);
}
std::unique_ptr<Decoder> make_wordpiece_decoder(std::string prefix, bool cleanup) {
  return std::make_unique<WordPieceDecoder>(std::move(prefix), cleanup);
}

std::unique_ptr<PostProcessor> make_post_processor(const json& j, const std::string& source) {
  if (j.is_null()) return nullptr;
  std::string t = j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  auto built = build_component(source, "post_processor", t, [&]() -> std::unique_ptr<PostProcessor> {
    if (t == "BertProcessing") {
      auto cls = token_pair(j.at("cls"), "cls");
      auto sep = token_pair(j.at("sep"), "sep");
      return make_bert_processing(cls.first, cls.second, sep.first, sep.second);
    }
    if (t == "RobertaProcessing") {
      auto cls = token_pair(j.at("cls"), "cls");
      auto sep = token_pair(j.at("sep"), "sep");
      return std::make_unique<RobertaProcessing>(cls.first, cls.second, sep.first, sep.second,
                                                 j.value("trim_offsets", true), j.value("add_prefix_space", true));
    }
    if (t == "ByteLevel")
      return std::make_unique<ByteLevelProcessing>(j.value("trim_offsets", true), j.value("add_prefix_space", true));
    if (t == "TemplateProcessing") {
      std::map<std::string, TemplateProcessing::Special> specials;
      if (j.contains("special_tokens") && j["special_tokens"].is_object())
        for (auto it = j["special_tokens"].begin(); it != j["special_tokens"].end(); ++it) {
          TemplateProcessing::Special s;
          s.ids = it->at("ids").get<std::vector<int64_t>>();
          s.tokens = it->at("tokens").get<std::vector<std::string>>();
          if (s.ids.size() != s.tokens.size())
            throw std::runtime_error("special_tokens['" + it.key() + "'] has " + std::to_string(s.ids.size()) +
                                     " ids but " + std::to_string(s.tokens.size()) + " tokens");
          specials[it->value("id", it.key())] = std::move(s);
        }
      auto single = template_pieces(j.at("single"));
      auto pair = template_pieces(j.at("pair"));
      for (const auto* v : {&single, &pair})
        for (const auto& p : *v)
          if (!p.is_sequence && !specials.count(p.token))
            throw std::runtime_error("template uses '" + p.token + "', which special_tokens does not define");
      return std::make_unique<TemplateProcessing>(std::move(single), std::move(pair), std::move(specials));
    }
    if (t == "Sequence") {
      std::vector<std::unique_ptr<PostProcessor>> v;
      for (const json& x : j.at("processors"))
        if (auto p = make_post_processor(x, source)) v.push_back(std::move(p));
      return std::make_unique<SequenceProcessing>(std::move(v));
    }
    return nullptr;  // not a type this function knows
  });
  if (built) return built;
  throw std::runtime_error(source + ": unsupported post_processor " +
                           (t.empty() ? j.dump().substr(0, 80) : "type '" + t + "'"));
}

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& source) {
  if (j.is_null()) return nullptr;
  std::string t = j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  auto built = build_component(source, "decoder", t, [&]() -> std::unique_ptr<Decoder> {
    if (t == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (t == "WordPiece") return make_wordpiece_decoder(j.value("prefix", std::string("##")), j.value("cleanup", true));
    if (t == "Metaspace") {
      char32_t rep = one_char(j.value("replacement", std::string("\xE2\x96\x81")), "replacement");
      bool prepend = j.value("add_prefix_space", true);
      if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string())
        prepend = j["prepend_scheme"].get<std::string>() != "never";
      return std::make_unique<MetaspaceDecoder>(rep, prepend);
    }
    if (t == "BPEDecoder") return std::make_unique<BpeDecoder>(j.value("suffix", std::string("</w>")));
    if (t == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (t == "Fuse") return std::make_unique<FuseDecoder>();
    if (t == "Strip")
      return std::make_unique<StripDecoder>(one_char(j.at("content").get<std::string>(), "content"),
                                            j.value("start", (size_t)0), j.value("stop", (size_t)0));
    if (t == "Replace")
      return std::make_unique<ReplaceDecoder>(make_pattern(j.at("pattern")),
                                              decode_utf8(j.value("content", std::string())));
    if (t == "Sequence") {
      std::vector<std::unique_ptr<Decoder>> v;
      for (const json& x : j.at("decoders"))
        if (auto d = make_decoder(x, source)) v.push_back(std::move(d));
      return std::make_unique<SequenceDecoder>(std::move(v));
    }
    return nullptr;  // not a type this function knows
  });
  if (built) return built;
  throw std::runtime_error(source + ": unsupported decoder " + (t.empty() ? j.dump().substr(0, 80) : "type '" + t + "'"));
}

}  // namespace tfm::tok
