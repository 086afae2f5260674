// Normalizers and pre-tokenizers of the tokenizer engine (tokenizers' normalizers/ and pre_tokenizers/).
#include <algorithm>
#include <stdexcept>

#include "text/tokenizer/components.h"
#include "text/tokenizer/unicode.h"

namespace tfm::tok {

using nlohmann::json;

namespace {

std::runtime_error bad(const std::string& source, const std::string& what) {
  return std::runtime_error(source + ": " + what);
}

std::string type_of(const json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"].get<std::string>();
  return "";
}

bool get_bool(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw std::runtime_error(std::string("'") + key + "' must be true or false");
  return j[key].get<bool>();
}

std::string get_str(const json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) throw std::runtime_error(std::string("'") + key + "' must be a string");
  return j[key].get<std::string>();
}

// ---------------------------------------------------------------------------------------------------------
// Normalizers.

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, std::optional<bool> strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip.value_or(lower)), lower_(lower) {}
  void normalize(NormStr& n) const override {
    if (clean_) {
      n.filter([](char32_t c) { return !is_clean_text_removed(c); });
      for (char32_t& c : n.s)
        if (is_whitespace(c)) c = U' ';
    }
    if (chinese_) {
      bool any = false;
      for (char32_t c : n.s)
        if (is_chinese_char(c)) {
          any = true;
          break;
        }
      if (any) {
        std::u32string s;
        std::vector<std::pair<uint32_t, uint32_t>> al;
        for (size_t i = 0; i < n.s.size(); ++i) {
          char32_t c = n.s[i];
          if (is_chinese_char(c)) {
            s += U' ';
            s += c;
            s += U' ';
            al.insert(al.end(), 3, n.al[i]);
          } else {
            s += c;
            al.push_back(n.al[i]);
          }
        }
        n.s.swap(s);
        n.al.swap(al);
      }
    }
    if (strip_) {
      std::vector<std::pair<char32_t, int>> d;
      normalize_with_changes(n.s, NormForm::NFD, d);
      n.transform(0, n.s.size(), d, 0);
      n.filter([](char32_t c) { return !is_nonspacing_mark(c); });
    }
    if (lower_) n.lowercase();
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormForm f) : f_(f) {}
  void normalize(NormStr& n) const override {
    std::vector<std::pair<char32_t, int>> d;
    normalize_with_changes(n.s, f_, d);
    n.transform(0, n.s.size(), d, 0);
  }

 private:
  NormForm f_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(NormStr& n) const override { n.lowercase(); }
};

// Hugging Face's Nmt normalizer (sentencepiece's nmt_nfkc rules without the NFKC step, which conversions add as a
// separate Precompiled / NFKC normalizer): ASCII / C1 control characters removed, other whitespace-like code points
// (tab, line breaks, zero-width spaces, U+2581, BOM, U+FFFD) turned into ' ' one for one.
class NmtNormalizer : public Normalizer {
 public:
  void normalize(NormStr& n) const override {
    n.filter([](char32_t c) {
      return !((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F);
    });
    for (char32_t& c : n.s)
      if (c == 0x9 || c == 0xA || c == 0xC || c == 0xD || c == 0x1680 || (c >= 0x200B && c <= 0x200F) ||
          c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD)
        c = U' ';
  }
};

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(NormStr& n) const override {
    n.filter([](char32_t c) { return !is_combining_mark(c); });
  }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool l, bool r) : l_(l), r_(r) {}
  void normalize(NormStr& n) const override { n.strip(l_, r_); }

 private:
  bool l_, r_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Pattern> p, std::u32string content) : p_(std::move(p)), content_(std::move(content)) {}
  void normalize(NormStr& n) const override { replace_normalized(n, *p_, content_); }

 private:
  std::unique_ptr<Pattern> p_;
  std::u32string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::u32string p) : p_(std::move(p)) {}
  void normalize(NormStr& n) const override { n.prepend(p_); }

 private:
  std::u32string p_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
  void normalize(NormStr& n) const override {
    for (const auto& x : v_) x->normalize(n);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> v_;
};

// SentencePiece precompiled_charsmap: [u32 trie size in bytes][Darts double array][normalized strings, NUL
// separated]; spm_precompiled's transform takes the first (shortest) prefix match of a chunk and replaces the
// whole chunk by its string. Graphemes under 6 bytes are looked up whole, others char by char.
class PrecompiledNormalizer : public Normalizer {
 public:
  PrecompiledNormalizer(const std::string& bytes, const std::string& source) {
    if (bytes.size() < 4) throw bad(source, "Precompiled: precompiled_charsmap is shorter than 4 bytes");
    uint32_t trie_size = (uint32_t)(unsigned char)bytes[0] | ((uint32_t)(unsigned char)bytes[1] << 8) |
                         ((uint32_t)(unsigned char)bytes[2] << 16) | ((uint32_t)(unsigned char)bytes[3] << 24);
    if (trie_size % 4 != 0 || (size_t)trie_size > bytes.size() - 4)
      throw bad(source, "Precompiled: trie size " + std::to_string(trie_size) + " does not fit the charsmap of " +
                            std::to_string(bytes.size()) + " bytes");
    array_.resize(trie_size / 4);
    for (size_t i = 0; i < array_.size(); ++i) {
      const unsigned char* p = (const unsigned char*)bytes.data() + 4 + 4 * i;
      array_[i] = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    }
    normalized_ = bytes.substr(4 + trie_size);
  }

  void normalize(NormStr& n) const override {
    if (n.s.empty()) return;
    std::vector<std::pair<char32_t, int>> tr;
    tr.reserve(n.s.size());
    bool modified = false;
    std::string chunk;
    std::u32string norm;
    size_t pos = 0;
    for (size_t g : grapheme_sizes(n.s)) {
      std::u32string_view grapheme(n.s.data() + pos, g);
      pos += g;
      chunk = encode_utf8(grapheme);
      if (chunk.size() < 6 && transform(chunk, norm)) {
        modified = true;
        push(norm, (long)g, tr);
        continue;
      }
      for (char32_t c : grapheme) {
        chunk.clear();
        append_utf8(c, chunk);
        if (transform(chunk, norm)) {
          modified = true;
          push(norm, 1, tr);
        } else {
          tr.emplace_back(c, 0);
        }
      }
    }
    if (modified) n.transform(0, n.s.size(), tr, 0);
  }

 private:
  // tokenizers' precompiled.rs replace(): the new chars replace the old ones (change 0); extra new chars are
  // insertions (1); fewer new chars make the last transformation so far remove the difference.
  static void push(const std::u32string& norm, long old_count, std::vector<std::pair<char32_t, int>>& tr) {
    long diff = (long)norm.size() - old_count;
    size_t first = tr.size();
    for (char32_t c : norm) tr.emplace_back(c, 0);
    if (diff > 0) {
      for (size_t k = tr.size(); k > first && (long)(tr.size() - k) < diff; --k) tr[k - 1].second = 1;
    } else if (diff < 0 && !tr.empty()) {
      tr.back().second += (int)diff;
    }
  }

  bool transform(const std::string& chunk, std::u32string& out) const {
    if (array_.empty()) return false;
    size_t node = 0;
    uint32_t unit = array_[0];
    node ^= offset(unit);
    for (unsigned char c : chunk) {
      if (c == 0) break;
      node ^= c;
      if (node >= array_.size()) return false;
      unit = array_[node];
      if ((unit & ((1u << 31) | 0xFFu)) != c) return false;
      node ^= offset(unit);
      if (node >= array_.size()) return false;
      if ((unit >> 8) & 1u) {
        size_t index = array_[node] & ((1u << 31) - 1);
        if (index >= normalized_.size()) return false;
        size_t end = normalized_.find('\0', index);
        if (end == std::string::npos) end = normalized_.size();
        try {
          out = decode_utf8(std::string_view(normalized_).substr(index, end - index));
        } catch (const std::invalid_argument&) {
          return false;
        }
        return true;  // the first result of common_prefix_search
      }
    }
    return false;
  }
  static size_t offset(uint32_t unit) { return (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6)); }

  std::vector<uint32_t> array_;
  std::string normalized_;
};

std::string base64_decode(const std::string& in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int buf = 0, bits = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r') continue;
    int v = val(c);
    if (v < 0) throw std::runtime_error("precompiled_charsmap is not base64");
    buf = (buf << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back((char)((buf >> bits) & 0xFF));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Pre-tokenizers.

template <class F>
void split_each(std::vector<NormStr>& pieces, F f) {
  std::vector<NormStr> out;
  out.reserve(pieces.size() * 2);
  for (NormStr& p : pieces) f(p, out);
  pieces.swap(out);
}

class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<NormStr>& pieces) const override {
    // split(is_whitespace, Removed) then split(is_bert_punc, Isolated): each punctuation char alone.
    split_each(pieces, [](NormStr& p, std::vector<NormStr>& out) {
      size_t i = 0, n = p.s.size();
      while (i < n) {
        char32_t c = p.s[i];
        if (is_whitespace(c)) {
          ++i;
          continue;
        }
        if (is_bert_punctuation(c)) {
          out.push_back(p.slice(i, i + 1));
          ++i;
          continue;
        }
        size_t j = i + 1;
        while (j < n && !is_whitespace(p.s[j]) && !is_bert_punctuation(p.s[j])) ++j;
        out.push_back(p.slice(i, j));
        i = j;
      }
    });
  }
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<NormStr>& pieces) const override {
    split_each(pieces, [](NormStr& p, std::vector<NormStr>& out) {
      size_t i = 0, n = p.s.size();
      while (i < n) {
        if (is_whitespace(p.s[i])) {
          ++i;
          continue;
        }
        size_t j = i + 1;
        while (j < n && !is_whitespace(p.s[j])) ++j;
        out.push_back(p.slice(i, j));
        i = j;
      }
    });
  }
};

// Whitespace: the regex \w+|[^\w\s]+ (inverted, Removed): runs of word chars and runs of other non-space chars.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<NormStr>& pieces) const override {
    split_each(pieces, [](NormStr& p, std::vector<NormStr>& out) {
      size_t i = 0, n = p.s.size();
      while (i < n) {
        char32_t c = p.s[i];
        bool word = onig_is_word(c);
        if (!word && onig_is_space(c)) {
          ++i;
          continue;
        }
        size_t j = i + 1;
        if (word)
          while (j < n && onig_is_word(p.s[j])) ++j;
        else
          while (j < n && !onig_is_word(p.s[j]) && !onig_is_space(p.s[j])) ++j;
        out.push_back(p.slice(i, j));
        i = j;
      }
    });
  }
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Pattern> p, SplitBehavior b, bool invert)
      : p_(std::move(p)), b_(b), invert_(invert) {}
  void pre_tokenize(std::vector<NormStr>& pieces) const override {
    split_each(pieces, [&](NormStr& p, std::vector<NormStr>& out) { split_normalized(p, *p_, b_, invert_, out); });
  }

 private:
  std::unique_ptr<Pattern> p_;
  SplitBehavior b_;
  bool invert_;
};

template <class F>
class PredicateSplitPreTokenizer : public PreTokenizer {
 public:
  PredicateSplitPreTokenizer(F f, SplitBehavior b) : p_(f), b_(b) {}
  void pre_tokenize(std::vector<NormStr>& pieces) const override {
    split_each(pieces, [&](NormStr& p, std::vector<NormStr>& out) { split_normalized(p, p_, b_, false, out); });
  }

 private:
  PredicatePattern<F> p_;
  SplitBehavior b_;
};
template <class F>
std::unique_ptr<PreTokenizer> predicate_split(F f, SplitBehavior b) {
  return std::make_unique<PredicateSplitPreTokenizer<F>>(f, b);
}

// GPT-2 byte-to-unicode table.
const std::vector<char32_t>& bytes_char() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256, 0);
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) t[b] = direct[b] ? (char32_t)b : (char32_t)(256 + n++);
    return t;
  }();
  return table;
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    if (use_regex_)
      re_ = regex_pattern(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  }
  void pre_tokenize(std::vector<NormStr>& pieces) const override {
    split_each(pieces, [&](NormStr& p, std::vector<NormStr>& out) {
      if (add_prefix_space_ && (p.s.empty() || p.s[0] != U' ')) p.prepend(U" ");
      if (use_regex_)
        split_normalized(p, *re_, SplitBehavior::Isolated, false, out);
      else if (!p.s.empty())
        out.push_back(std::move(p));
    });
    const auto& table = bytes_char();
    std::string u;
    for (NormStr& p : pieces) {
      std::u32string s;
      std::vector<std::pair<uint32_t, uint32_t>> al;
      s.reserve(p.s.size() * 2);
      al.reserve(p.s.size() * 2);
      for (size_t i = 0; i < p.s.size(); ++i) {
        u.clear();
        append_utf8(p.s[i], u);
        for (unsigned char b : u) {
          s.push_back(table[b]);
          al.push_back(p.al[i]);
        }
      }
      p.s.swap(s);
      p.al.swap(al);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::unique_ptr<Pattern> re_;
};

enum class PrependScheme { Always, Never, First };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : rep_(replacement), scheme_(scheme), split_(split), rep_pattern_(literal_pattern(std::u32string(1, replacement))) {}
  void pre_tokenize(std::vector<NormStr>& pieces) const override {
    split_each(pieces, [&](NormStr& p, std::vector<NormStr>& out) {
      for (char32_t& c : p.s)
        if (c == U' ') c = rep_;
      bool prepend = false;
      if (scheme_ == PrependScheme::Always) prepend = p.s.empty() || p.s[0] != rep_;
      if (scheme_ == PrependScheme::First) prepend = (p.s.empty() || p.s[0] != rep_) && p.orig_begin == 0;
      if (prepend) p.prepend(std::u32string(1, rep_));
      if (split_)
        split_normalized(p, *rep_pattern_, SplitBehavior::MergedWithNext, false, out);
      else if (!p.s.empty())
        out.push_back(std::move(p));
    });
  }

 private:
  char32_t rep_;
  PrependScheme scheme_;
  bool split_;
  std::unique_ptr<Pattern> rep_pattern_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
  void pre_tokenize(std::vector<NormStr>& pieces) const override {
    for (const auto& x : v_) x->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> v_;
};

SplitBehavior parse_behavior(const json& j, const char* key, SplitBehavior fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  std::string b = j[key].is_string() ? j[key].get<std::string>() : "";
  std::string l = b;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  if (l == "removed") return SplitBehavior::Removed;
  if (l == "isolated") return SplitBehavior::Isolated;
  if (l == "mergedwithprevious" || l == "merged_with_previous") return SplitBehavior::MergedWithPrevious;
  if (l == "mergedwithnext" || l == "merged_with_next") return SplitBehavior::MergedWithNext;
  if (l == "contiguous") return SplitBehavior::Contiguous;
  throw std::runtime_error(std::string("unknown split behavior ") + j[key].dump());
}

char32_t single_char(const std::string& s, const char* what) {
  std::u32string u = decode_utf8(s);
  if (u.size() != 1) throw std::runtime_error(std::string(what) + " must be one character, found '" + s + "'");
  return u[0];
}

}  // namespace

std::unique_ptr<Pattern> make_pattern(const json& p) {
  if (p.is_object() && p.contains("String") && p["String"].is_string())
    return literal_pattern(decode_utf8(p["String"].get<std::string>()));
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) return regex_pattern(p["Regex"].get<std::string>());
  throw std::runtime_error("pattern must be {\"String\": ...} or {\"Regex\": ...}, found " + p.dump());
}

std::unique_ptr<Normalizer> make_bert_normalizer(bool clean_text, bool handle_chinese_chars,
                                                 std::optional<bool> strip_accents, bool lowercase) {
  return std::make_unique<BertNormalizer>(clean_text, handle_chinese_chars, strip_accents, lowercase);
}
std::unique_ptr<PreTokenizer> make_bert_pre_tokenizer() { return std::make_unique<BertPreTokenizer>(); }

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& source) {
  if (j.is_null()) return nullptr;
  std::string t = type_of(j);
  auto built = build_component(source, "normalizer", t, [&]() -> std::unique_ptr<Normalizer> {
    if (t == "BertNormalizer") {
      std::optional<bool> strip;
      if (j.contains("strip_accents") && !j["strip_accents"].is_null()) strip = get_bool(j, "strip_accents", false);
      return make_bert_normalizer(get_bool(j, "clean_text", true), get_bool(j, "handle_chinese_chars", true), strip,
                                  get_bool(j, "lowercase", true));
    }
    if (t == "NFC") return std::make_unique<UnicodeNormalizer>(NormForm::NFC);
    if (t == "NFD") return std::make_unique<UnicodeNormalizer>(NormForm::NFD);
    if (t == "NFKC") return std::make_unique<UnicodeNormalizer>(NormForm::NFKC);
    if (t == "NFKD") return std::make_unique<UnicodeNormalizer>(NormForm::NFKD);
    if (t == "Lowercase") return std::make_unique<LowercaseNormalizer>();
    if (t == "Nmt") return std::make_unique<NmtNormalizer>();
    if (t == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
    if (t == "Strip")
      return std::make_unique<StripNormalizer>(get_bool(j, "strip_left", true), get_bool(j, "strip_right", true));
    if (t == "Replace")
      return std::make_unique<ReplaceNormalizer>(make_pattern(j.at("pattern")),
                                                 decode_utf8(get_str(j, "content", "")));
    if (t == "Prepend") return std::make_unique<PrependNormalizer>(decode_utf8(get_str(j, "prepend", "")));
    if (t == "Precompiled") {
      const json& m = j.at("precompiled_charsmap");
      if (m.is_null()) return std::make_unique<SequenceNormalizer>(std::vector<std::unique_ptr<Normalizer>>{});
      if (m.is_string()) return std::make_unique<PrecompiledNormalizer>(base64_decode(m.get<std::string>()), source);
      if (m.is_array()) {
        std::string bytes;
        for (const json& b : m) bytes.push_back((char)b.get<int>());
        return std::make_unique<PrecompiledNormalizer>(bytes, source);
      }
      throw std::runtime_error("precompiled_charsmap must be a base64 string");
    }
    if (t == "Sequence") {
      std::vector<std::unique_ptr<Normalizer>> v;
      for (const json& x : j.at("normalizers"))
        if (auto n = make_normalizer(x, source)) v.push_back(std::move(n));
      return std::make_unique<SequenceNormalizer>(std::move(v));
    }
    return nullptr;  // not a type this function knows
  });
  if (built) return built;
  throw bad(source, "unsupported normalizer " + (t.empty() ? j.dump().substr(0, 80) : "type '" + t + "'"));
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& source) {
  if (j.is_null()) return nullptr;
  std::string t = type_of(j);
  auto built = build_component(source, "pre_tokenizer", t, [&]() -> std::unique_ptr<PreTokenizer> {
    if (t == "BertPreTokenizer") return make_bert_pre_tokenizer();
    if (t == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
    if (t == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
    if (t == "Punctuation")
      return predicate_split([](char32_t c) { return is_bert_punctuation(c); },
                             parse_behavior(j, "behavior", SplitBehavior::Isolated));
    if (t == "Digits") {
      if (get_bool(j, "individual_digits", false))
        return predicate_split([](char32_t c) { return is_numeric(c); }, SplitBehavior::Isolated);
      return predicate_split([](char32_t c) { return is_numeric(c); }, SplitBehavior::Contiguous);
    }
    if (t == "CharDelimiterSplit") {
      char32_t d = single_char(get_str(j, "delimiter", ""), "delimiter");
      return predicate_split([d](char32_t c) { return c == d; }, SplitBehavior::Removed);
    }
    if (t == "Split")
      return std::make_unique<SplitPreTokenizer>(make_pattern(j.at("pattern")),
                                                 parse_behavior(j, "behavior", SplitBehavior::Isolated),
                                                 get_bool(j, "invert", false));
    if (t == "ByteLevel")
      return std::make_unique<ByteLevelPreTokenizer>(get_bool(j, "add_prefix_space", true),
                                                     get_bool(j, "use_regex", true));
    if (t == "Metaspace") {
      char32_t rep = single_char(get_str(j, "replacement", "\xE2\x96\x81"), "replacement");
      PrependScheme scheme = get_bool(j, "add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
      if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
        std::string s = get_str(j, "prepend_scheme", "always");
        if (s == "always") scheme = PrependScheme::Always;
        else if (s == "never") scheme = PrependScheme::Never;
        else if (s == "first") scheme = PrependScheme::First;
        else throw std::runtime_error("unknown prepend_scheme '" + s + "'");
      }
      return std::make_unique<MetaspacePreTokenizer>(rep, scheme, get_bool(j, "split", true));
    }
    if (t == "Sequence") {
      std::vector<std::unique_ptr<PreTokenizer>> v;
      for (const json& x : j.at("pretokenizers"))
        if (auto p = make_pre_tokenizer(x, source)) v.push_back(std::move(p));
      return std::make_unique<SequencePreTokenizer>(std::move(v));
    }
    return nullptr;  // not a type this function knows
  });
  if (built) return built;
  throw bad(source, "unsupported pre_tokenizer " + (t.empty() ? j.dump().substr(0, 80) : "type '" + t + "'"));
}

}  // namespace tfm::tok
