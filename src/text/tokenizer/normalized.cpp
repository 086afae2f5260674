#include "text/tokenizer/normalized.h"

#include <oniguruma.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "text/tokenizer/unicode.h"

namespace tfm::tok {

NormStr NormStr::from_original(std::u32string_view text, uint32_t shift) {
  NormStr n;
  n.s.assign(text);
  n.al.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) n.al[i] = {shift + (uint32_t)i, shift + (uint32_t)i + 1};
  n.orig_begin = shift;
  n.orig_end = shift + (uint32_t)text.size();
  return n;
}

void NormStr::transform(size_t a, size_t b, const std::vector<std::pair<char32_t, int>>& dest,
                        size_t initial_offset) {
  std::u32string ns;
  std::vector<std::pair<uint32_t, uint32_t>> nal;
  ns.reserve(dest.size());
  nal.reserve(dest.size());
  size_t r = std::min(a + initial_offset, b);  // next char of the range to be consumed
  auto align_at = [&](size_t i) -> std::pair<uint32_t, uint32_t> {
    if (i < al.size()) return al[i];
    return al.empty() ? std::pair<uint32_t, uint32_t>{orig_begin, orig_begin} : al.back();
  };
  for (const auto& [c, change] : dest) {
    std::pair<uint32_t, uint32_t> align;
    if (change > 0) {
      align = r < 1 ? std::pair<uint32_t, uint32_t>{orig_begin, orig_begin} : align_at(r - 1);
    } else {
      align = align_at(r);
      if (r < b) ++r;
      if (change < 0) r = std::min(b, r + (size_t)(-change));
    }
    ns.push_back(c);
    nal.push_back(align);
  }
  s.replace(a, b - a, ns);
  al.erase(al.begin() + a, al.begin() + b);
  al.insert(al.begin() + a, nal.begin(), nal.end());
}

void NormStr::prepend(std::u32string_view p) {
  if (s.empty() || p.empty()) return;
  auto first = al[0];
  s.insert(0, p);
  al.insert(al.begin(), p.size(), first);
}

void NormStr::lowercase() {
  bool simple = true;
  for (char32_t c : s)
    if (c >= 0x80) {
      simple = false;
      break;
    }
  if (simple) {
    for (char32_t& c : s)
      if (c >= 'A' && c <= 'Z') c += 32;
    return;
  }
  std::u32string ns;
  std::vector<std::pair<uint32_t, uint32_t>> nal;
  ns.reserve(s.size());
  nal.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    size_t before = ns.size();
    append_lower(s[i], ns);
    nal.insert(nal.end(), ns.size() - before, al[i]);
  }
  s.swap(ns);
  al.swap(nal);
}

void NormStr::strip(bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && is_whitespace(s[b])) ++b;
  if (right)
    while (e > b && is_whitespace(s[e - 1])) --e;
  if (b == 0 && e == s.size()) return;
  s = s.substr(b, e - b);
  al = std::vector<std::pair<uint32_t, uint32_t>>(al.begin() + b, al.begin() + e);
}

NormStr NormStr::slice(size_t a, size_t b) const {
  NormStr n;
  n.s = s.substr(a, b - a);
  n.al.assign(al.begin() + a, al.begin() + b);
  if (a < b) {
    n.orig_begin = al[a].first;
    n.orig_end = al[b - 1].second;
  } else {
    n.orig_begin = n.orig_end = a < al.size() ? al[a].first : orig_end;
  }
  return n;
}

// ---------------------------------------------------------------------------------------------------------
// Patterns.

namespace {

class LiteralPattern : public Pattern {
 public:
  explicit LiteralPattern(std::u32string lit) : lit_(std::move(lit)) {}
  void find_matches(std::u32string_view s, std::vector<PatternSplit>& out) const override {
    out.clear();
    if (s.empty()) {
      out.push_back({0, 0, false});
      return;
    }
    if (lit_.empty()) {
      out.push_back({0, s.size(), false});
      return;
    }
    size_t prev = 0, pos = 0;
    while ((pos = s.find(lit_, pos)) != std::u32string_view::npos) {
      if (prev != pos) out.push_back({prev, pos, false});
      out.push_back({pos, pos + lit_.size(), true});
      pos += lit_.size();
      prev = pos;
    }
    if (prev != s.size()) out.push_back({prev, s.size(), false});
  }

 private:
  std::u32string lit_;
};

void onig_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding use[] = {ONIG_ENCODING_UTF8};
    onig_initialize(use, 1);
  });
}

class RegexPattern : public Pattern {
 public:
  explicit RegexPattern(const std::string& re) {
    onig_init_once();
    OnigErrorInfo einfo;
    int r = onig_new(&reg_, (const OnigUChar*)re.data(), (const OnigUChar*)re.data() + re.size(), ONIG_OPTION_NONE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
    if (r != ONIG_NORMAL) {
      OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(msg, r, &einfo);
      throw std::runtime_error("invalid regex '" + re + "': " + std::string((const char*)msg));
    }
  }
  ~RegexPattern() override { onig_free(reg_); }
  RegexPattern(const RegexPattern&) = delete;
  RegexPattern& operator=(const RegexPattern&) = delete;

  void find_matches(std::u32string_view s, std::vector<PatternSplit>& out) const override {
    out.clear();
    if (s.empty()) {
      out.push_back({0, 0, false});
      return;
    }
    // UTF-8 copy and the char index of every byte boundary.
    std::string u;
    u.reserve(s.size());
    std::vector<uint32_t> char_at;  // byte offset -> char index (for char starts and the end)
    char_at.reserve(s.size() * 2 + 1);
    for (size_t i = 0; i < s.size(); ++i) {
      size_t before = u.size();
      append_utf8(s[i], u);
      for (size_t k = before; k < u.size(); ++k) char_at.push_back((uint32_t)i);
    }
    char_at.push_back((uint32_t)s.size());
    const OnigUChar* str = (const OnigUChar*)u.data();
    const OnigUChar* end = str + u.size();
    OnigRegion* region = onig_region_new();
    size_t last_end = 0;
    bool have_last_match = false;
    size_t last_match_end = 0;
    size_t prev = 0;
    while (last_end <= u.size()) {
      onig_region_clear(region);
      int r = onig_search(reg_, str, end, str + last_end, end, region, ONIG_OPTION_NONE);
      if (r < 0) break;
      size_t bs = (size_t)region->beg[0], be = (size_t)region->end[0];
      if (bs == be && have_last_match && last_match_end == be) {
        // An empty match right after the previous match: skip one char (onig crate FindMatches).
        if (last_end >= u.size()) break;
        size_t c = char_at[last_end];
        last_end += utf8_len(s[c]);
        continue;
      }
      last_end = be;
      have_last_match = true;
      last_match_end = be;
      size_t cs = char_at[bs], ce = char_at[be];
      if (prev != cs) out.push_back({prev, cs, false});
      out.push_back({cs, ce, true});
      prev = ce;
      if (bs == be) {
        // onig crate: the next search starts at the match end; an empty match there is skipped above.
      }
    }
    onig_region_free(region, 1);
    if (prev != s.size()) out.push_back({prev, s.size(), false});
  }

 private:
  OnigRegex reg_ = nullptr;
};

}  // namespace

bool onig_is_word(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  // The Oniguruma bundled with the onig crate counts Join_Control (ZWNJ, ZWJ) as word characters.
  if (c == 0x200C || c == 0x200D) return true;
  // Below U+0100 Oniguruma's UTF-8 encoding reads its ISO-8859-1 table, which marks the superscripts and vulgar
  // fractions (category No: ¹ ² ³ ¼ ½ ¾) as word characters; its Unicode tables, and Hugging Face's Whitespace
  // pre-tokenizer, do not (x² splits into x, ²).
  if (c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE)) return false;
  return ONIGENC_IS_CODE_CTYPE(ONIG_ENCODING_UTF8, (OnigCodePoint)c, ONIGENC_CTYPE_WORD);
}

bool onig_is_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return ONIGENC_IS_CODE_CTYPE(ONIG_ENCODING_UTF8, (OnigCodePoint)c, ONIGENC_CTYPE_SPACE);
}

std::unique_ptr<Pattern> literal_pattern(std::u32string lit) { return std::make_unique<LiteralPattern>(std::move(lit)); }
std::unique_ptr<Pattern> regex_pattern(const std::string& re) { return std::make_unique<RegexPattern>(re); }

void split_normalized(const NormStr& n, const Pattern& p, SplitBehavior behavior, bool invert,
                      std::vector<NormStr>& out) {
  std::vector<PatternSplit> m;
  p.find_matches(n.s, m);
  if (invert)
    for (auto& x : m) x.is_match = !x.is_match;
  struct S {
    size_t a, b;
    bool remove;
  };
  std::vector<S> splits;
  splits.reserve(m.size());
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (auto& x : m) splits.push_back({x.start, x.end, false});
      break;
    case SplitBehavior::Removed:
      for (auto& x : m) splits.push_back({x.start, x.end, x.is_match});
      break;
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (auto& x : m) {
        if (x.is_match == prev_match && !splits.empty())
          splits.back().b = x.end;
        else
          splits.push_back({x.start, x.end, false});
        prev_match = x.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& x : m) {
        if (x.is_match && !prev_match && !splits.empty())
          splits.back().b = x.end;
        else
          splits.push_back({x.start, x.end, false});
        prev_match = x.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t k = m.size(); k-- > 0;) {
        auto& x = m[k];
        if (x.is_match && !prev_match && !splits.empty())
          splits.back().a = x.start;
        else
          splits.push_back({x.start, x.end, false});
        prev_match = x.is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  for (const S& sp : splits)
    if (!sp.remove && sp.a < sp.b) out.push_back(n.slice(sp.a, sp.b));
}

void replace_normalized(NormStr& n, const Pattern& p, std::u32string_view content) {
  std::vector<PatternSplit> m;
  p.find_matches(n.s, m);
  long offset = 0;
  std::vector<std::pair<char32_t, int>> dest;
  for (char32_t c : content) dest.emplace_back(c, 1);
  for (const auto& x : m) {
    if (!x.is_match) continue;
    long a = (long)x.start + offset, b = (long)x.end + offset;
    if (a < 0) a = 0;
    if (b < 0) b = 0;
    n.transform((size_t)a, (size_t)b, dest, (size_t)(b - a));
    offset += (long)content.size() - (long)(x.end - x.start);
  }
}

}  // namespace tfm::tok
