// NormalizedString of the tokenizer engine: the normalized chars of a piece of the input with, for each char,
// the range of original chars it comes from (tokenizers' NormalizedString alignments, kept per code point
// instead of per byte, which is equivalent because all bytes of a char share one alignment).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tfm::tok {

struct NormStr {
  std::u32string s;                                 // normalized chars
  std::vector<std::pair<uint32_t, uint32_t>> al;    // per char: [start, end) in original code points (absolute)
  uint32_t orig_begin = 0, orig_end = 0;            // the original range of this piece

  static NormStr from_original(std::u32string_view text, uint32_t shift);
  bool empty() const { return s.empty(); }
  // tokenizers' transform_range on normalized chars [a, b): dest chars with change 0 (replace the next one),
  // > 0 (inserted) or -n (replace, then drop n); initial_offset chars of the range are dropped first.
  void transform(size_t a, size_t b, const std::vector<std::pair<char32_t, int>>& dest, size_t initial_offset);
  // Keeps the chars for which keep(c) is true.
  template <class F>
  void filter(F keep) {
    size_t w = 0;
    for (size_t i = 0; i < s.size(); ++i)
      if (keep(s[i])) s[w] = s[i], al[w] = al[i], ++w;
    s.resize(w), al.resize(w);
  }
  void prepend(std::u32string_view p);
  void lowercase();
  void strip(bool left, bool right);
  // The piece of normalized chars [a, b) (a < b), with its own original range.
  NormStr slice(size_t a, size_t b) const;
};

// A split of a pattern over a string: [start, end) in chars and whether it is a match.
struct PatternSplit {
  size_t start, end;
  bool is_match;
};

// A split pattern: a literal string, a predicate on chars (each matching char is one match), or an Oniguruma
// regex (Ruby syntax, as the onig crate uses).
class Pattern {
 public:
  virtual ~Pattern() = default;
  // tokenizers' Pattern::find_matches over `s` (chars); an empty s gives one non-match [0, 0).
  virtual void find_matches(std::u32string_view s, std::vector<PatternSplit>& out) const = 0;
};
std::unique_ptr<Pattern> literal_pattern(std::u32string lit);
std::unique_ptr<Pattern> regex_pattern(const std::string& regex_utf8);  // throws std::runtime_error
template <class F>
class PredicatePattern : public Pattern {
 public:
  explicit PredicatePattern(F f) : f_(f) {}
  void find_matches(std::u32string_view s, std::vector<PatternSplit>& out) const override {
    out.clear();
    if (s.empty()) {
      out.push_back({0, 0, false});
      return;
    }
    size_t last = 0;
    for (size_t i = 0; i < s.size(); ++i)
      if (f_(s[i])) {
        if (last < i) out.push_back({last, i, false});
        out.push_back({i, i + 1, true});
        last = i + 1;
      }
    if (last < s.size()) out.push_back({last, s.size(), false});
  }

 private:
  F f_;
};

// Oniguruma's \w and \s classes (UTF-8, Unicode), as the Whitespace pre-tokenizer's regex sees them.
bool onig_is_word(char32_t c);
bool onig_is_space(char32_t c);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// tokenizers' NormalizedString::split: appends the non-empty pieces of `n` to `out`.
void split_normalized(const NormStr& n, const Pattern& p, SplitBehavior behavior, bool invert,
                      std::vector<NormStr>& out);
// tokenizers' NormalizedString::replace of every match of `p` by `content`.
void replace_normalized(NormStr& n, const Pattern& p, std::u32string_view content);

}  // namespace tfm::tok
