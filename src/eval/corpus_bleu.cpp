// Corpus BLEU as sacreBLEU 2.x computes it by default (see corpus_bleu.h for the reference files).
#include "eval/corpus_bleu.h"

#include <cassert>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <unordered_map>

#include "io/text_file.h"

namespace tfm {
namespace {

// Decodes the code point starting at s[i] (s is known to be well-formed UTF-8) and returns its byte length.
size_t decode_utf8(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  cp = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return len;
}

// Python's str.isspace() (CPython _PyUnicode_IsWhitespace): what str.split() and str.rstrip() split/strip on.
bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's str.replace(from, to): left-to-right, non-overlapping.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_or_comma(char c) { return c == '.' || c == ','; }

// The character class [\{-\~\[-\` -\&\(-\+\:-\@\/] of the first 13a regex: { | } ~  [ \ ] ^ _ `  space ! " # $ % &
// ( ) * +  : ; < = > ? @  /. Bytes >= 0x80 (parts of multi-byte characters) never match.
bool is_13a_punct(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

// re.sub for a pattern of two one-character classes (first)(second) -> pre + \1 + mid + \2 + post: the leftmost
// match is replaced and the scan resumes after it. Working on bytes instead of code points gives the same result
// here: the classes that can match a non-ASCII character are [^0-9] only, each multi-byte character's inner bytes
// are followed by a continuation byte (never '.', ',' or '-') and a match consumes the character only to re-emit it.
template <typename First, typename Second>
std::string sub_pair(const std::string& s, First first, Second second, std::string_view pre, std::string_view mid,
                     std::string_view post) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      out.append(pre);
      out.push_back(s[i]);
      out.append(mid);
      out.push_back(s[i + 1]);
      out.append(post);
      i += 2;
    } else {
      out.push_back(s[i]);
      ++i;
    }
  }
  return out;
}

// Python's str.split() with no argument: tokens separated by runs of Python whitespace.
std::vector<std::string> py_split(std::string_view s) {
  std::vector<std::string> tokens;
  std::string cur;
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t len = decode_utf8(s, i, cp);
    if (is_py_space(cp)) {
      if (!cur.empty()) tokens.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.append(s.substr(i, len));
    }
    i += len;
  }
  if (!cur.empty()) tokens.push_back(std::move(cur));
  return tokens;
}

// Python's str.rstrip() with no argument.
std::string_view py_rstrip(std::string_view s) {
  size_t end = 0;  // byte just after the last non-space code point
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t len = decode_utf8(s, i, cp);
    i += len;
    if (!is_py_space(cp)) end = i;
  }
  return s.substr(0, end);
}

std::vector<std::string> split_tokens(const std::string& tokenized) {
  // tokenize_13a's output is tokens joined by single spaces, with no other whitespace.
  std::vector<std::string> tokens;
  size_t pos = 0;
  while (pos < tokenized.size()) {
    size_t sp = tokenized.find(' ', pos);
    if (sp == std::string::npos) sp = tokenized.size();
    tokens.emplace_back(tokenized, pos, sp - pos);
    pos = sp + 1;
  }
  return tokens;
}

constexpr int kMaxOrder = 4;

// n-gram -> count for one order; the key joins the n tokens with ' ' (tokens contain no spaces, so keys of one
// order are unambiguous).
using NgramCounts = std::unordered_map<std::string, int64_t>;

std::array<NgramCounts, kMaxOrder> count_ngrams(const std::vector<std::string>& tokens) {
  std::array<NgramCounts, kMaxOrder> counts;
  for (int n = 1; n <= kMaxOrder; ++n) {
    for (size_t i = 0; i + n <= tokens.size(); ++i) {
      std::string key = tokens[i];
      for (int k = 1; k < n; ++k) key.append(" ").append(tokens[i + k]);
      ++counts[n - 1][key];
    }
  }
  return counts;
}

// sacrebleu.utils.my_log: log, floored to -9999999999 at 0.
double my_log(double x) { return x == 0.0 ? -9999999999.0 : std::log(x); }

}  // namespace

std::string tokenize_13a(std::string_view line) {
  if (auto bad = find_invalid_utf8(line))
    throw std::invalid_argument("tokenize_13a: invalid UTF-8 at byte offset " + std::to_string(*bad));
  std::string s(py_rstrip(line));
  s = replace_all(s, "<skipped>", "");
  s = replace_all(s, "-\n", "");
  s = replace_all(s, "\n", " ");
  s = replace_all(s, "&quot;", "\"");
  s = replace_all(s, "&amp;", "&");
  s = replace_all(s, "&lt;", "<");
  s = replace_all(s, "&gt;", ">");
  s = " " + s + " ";

  std::string padded;
  padded.reserve(s.size() * 2);
  for (char c : s) {
    if (is_13a_punct(c)) {
      padded.push_back(' ');
      padded.push_back(c);
      padded.push_back(' ');
    } else {
      padded.push_back(c);
    }
  }
  auto not_digit = [](char c) { return !is_digit(c); };
  s = sub_pair(padded, not_digit, is_period_or_comma, "", " ", " ");  // ([^0-9])([\.,]) -> '\1 \2 '
  s = sub_pair(s, is_period_or_comma, not_digit, " ", " ", "");       // ([\.,])([^0-9]) -> ' \1 \2'
  s = sub_pair(s, is_digit, [](char c) { return c == '-'; }, "", " ", " ");  // ([0-9])(-) -> '\1 \2 '

  std::string out;
  for (const std::string& tok : py_split(s)) {
    if (!out.empty()) out.push_back(' ');
    out.append(tok);
  }
  return out;
}

CorpusBleu corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs) {
  if (hyps.size() != refs.size())
    throw std::invalid_argument("corpus_bleu: " + std::to_string(hyps.size()) + " hypotheses but " +
                                std::to_string(refs.size()) + " references");
  if (hyps.empty()) throw std::invalid_argument("corpus_bleu: empty corpus (0 segments)");

  CorpusBleu r;
  for (size_t i = 0; i < hyps.size(); ++i) {
    const std::string where = std::to_string(i + 1);
    if (refs[i].empty()) throw std::invalid_argument("corpus_bleu: reference " + where + " is empty");
    std::vector<std::string> hyp_tokens, ref_tokens;
    try {
      hyp_tokens = split_tokens(tokenize_13a(hyps[i]));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("corpus_bleu: hypothesis " + where + ": " + e.what());
    }
    try {
      ref_tokens = split_tokens(tokenize_13a(refs[i]));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("corpus_bleu: reference " + where + ": " + e.what());
    }
    r.hyp_len += static_cast<int64_t>(hyp_tokens.size());
    r.ref_len += static_cast<int64_t>(ref_tokens.size());
    const auto hyp_ngrams = count_ngrams(hyp_tokens);
    const auto ref_ngrams = count_ngrams(ref_tokens);
    for (int n = 0; n < kMaxOrder; ++n) {
      for (const auto& [ngram, count] : hyp_ngrams[n]) {
        r.totals[n] += count;
        auto it = ref_ngrams[n].find(ngram);
        if (it != ref_ngrams[n].end()) r.counts[n] += std::min(count, it->second);
      }
    }
  }

  // BLEU.compute_bleu, same operations in the same order as the Python so that results are bit-identical.
  if (r.hyp_len < r.ref_len)
    r.bp = r.hyp_len > 0 ? std::exp(1.0 - static_cast<double>(r.ref_len) / static_cast<double>(r.hyp_len)) : 0.0;
  else
    r.bp = 1.0;
  r.ratio = r.ref_len ? static_cast<double>(r.hyp_len) / static_cast<double>(r.ref_len) : 0.0;
  r.precisions.fill(0.0);
  bool any_match = false;
  for (int64_t c : r.counts) any_match |= c != 0;
  if (!any_match) {
    r.score = 0.0;
    return r;
  }
  double smooth_mteval = 1.0;
  for (int n = 0; n < kMaxOrder; ++n) {
    if (r.totals[n] == 0) break;
    if (r.counts[n] == 0) {
      smooth_mteval *= 2;
      r.precisions[n] = 100.0 / (smooth_mteval * static_cast<double>(r.totals[n]));
    } else {
      r.precisions[n] = 100.0 * static_cast<double>(r.counts[n]) / static_cast<double>(r.totals[n]);
    }
  }
  double log_sum = 0.0;
  for (double p : r.precisions) log_sum += my_log(p);
  r.score = r.bp * std::exp(log_sum / kMaxOrder);
  return r;
}

std::string CorpusBleu::format() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", score,
                precisions[0], precisions[1], precisions[2], precisions[3], bp, ratio,
                static_cast<long long>(hyp_len), static_cast<long long>(ref_len));
  return buf;
}

}  // namespace tfm
