#include "text/language_id.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/atomic_file.h"
#include "io/json_util.h"

namespace tfm {

namespace {

constexpr const char* kFormat = "tfm-language-id";
constexpr int kVersion = 1;
constexpr int kMaxOrder = 8;

// Letters and combining marks make words; an apostrophe inside a word (French l'homme, English don't) too.
bool is_word_char(utf8proc_int32_t c) {
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return true;
    default:
      return false;
  }
}

void append_utf8(std::string& out, utf8proc_int32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// The text's code points after NFC composition and case folding (É and E\u0301 both become é); an invalid UTF-8
// byte becomes a space.
std::vector<utf8proc_int32_t> folded_code_points(std::string_view text) {
  std::string clean;
  clean.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n < 0 || cp == 0) {
      clean += ' ';
      ++i;
    } else {
      clean.append(text.data() + i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    }
  }
  std::vector<utf8proc_int32_t> cps;
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t len =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(clean.data()), static_cast<utf8proc_ssize_t>(clean.size()),
                   &mapped, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_CASEFOLD));
  if (len < 0) {  // cannot happen on well-formed input; fall back to per-code-point lowercasing
    for (size_t i = 0; i < clean.size();) {
      utf8proc_int32_t cp;
      const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(clean.data()) + i,
                                                  static_cast<utf8proc_ssize_t>(clean.size() - i), &cp);
      cps.push_back(utf8proc_tolower(cp));
      i += static_cast<size_t>(n);
    }
    return cps;
  }
  for (utf8proc_ssize_t i = 0; i < len;) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t n = utf8proc_iterate(mapped + i, len - i, &cp);
    cps.push_back(cp);
    i += n;
  }
  std::free(mapped);
  return cps;
}

// Calls f(ngram, order) for every n-gram of `text`'s padded words.
template <typename F>
void for_each_ngram(std::string_view text, int max_order, F&& f) {
  const std::vector<utf8proc_int32_t> cps = folded_code_points(text);
  std::vector<utf8proc_int32_t> word;
  std::string g;
  auto flush = [&] {
    if (word.empty()) return;
    // A trailing apostrophe is not part of the word (the quote of 'word').
    while (!word.empty() && word.back() == '\'') word.pop_back();
    if (word.empty()) return;
    word.insert(word.begin(), ' ');
    word.push_back(' ');
    const int64_t n = (int64_t)word.size();
    for (int order = 1; order <= max_order; ++order)
      for (int64_t i = 0; i + order <= n; ++i) {
        if (order == 1 && word[i] == ' ') continue;
        g.clear();
        for (int k = 0; k < order; ++k) append_utf8(g, word[i + k]);
        f(g, order);
      }
    word.clear();
  };
  for (utf8proc_int32_t c : cps) {
    if (c == 0x2019 || c == 0x02BC) c = '\'';  // typographic apostrophes as the ASCII one
    if (is_word_char(c) || (c == '\'' && !word.empty())) {
      word.push_back(c);
    } else {
      flush();
    }
  }
  flush();
}

int ngram_order(const std::string& g) {
  int n = 0;
  for (unsigned char c : g) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::vector<std::string> CharNgramLanguageId::ngrams(std::string_view text, int max_order) {
  std::vector<std::string> out;
  for_each_ngram(text, max_order, [&](const std::string& g, int) { out.push_back(g); });
  return out;
}

CharNgramLanguageId CharNgramLanguageId::train(const std::vector<LanguageCorpus>& corpora,
                                               const LanguageIdTrainOptions& o) {
  if (o.max_order < 1 || o.max_order > kMaxOrder)
    throw std::invalid_argument("max_order must be in 1.." + std::to_string(kMaxOrder) + ", got " +
                                std::to_string(o.max_order));
  if (o.max_ngrams < 1) throw std::invalid_argument("max_ngrams must be at least 1, got " + std::to_string(o.max_ngrams));
  if (!(o.alpha > 0) || !std::isfinite(o.alpha))
    throw std::invalid_argument("alpha must be a positive number, got " + std::to_string(o.alpha));
  if (corpora.size() < 2)
    throw std::invalid_argument("language identification needs corpora of at least two languages, got " +
                                std::to_string(corpora.size()));
  CharNgramLanguageId m;
  m.max_order_ = o.max_order;
  m.alpha_ = o.alpha;
  const size_t L = corpora.size();
  std::vector<std::unordered_map<std::string, int64_t>> counts(L);
  for (size_t l = 0; l < L; ++l) {
    const std::string& code = corpora[l].language;
    if (code.empty()) throw std::invalid_argument("a corpus has an empty language code");
    if (std::find(m.languages_.begin(), m.languages_.end(), code) != m.languages_.end())
      throw std::invalid_argument("language '" + code + "' is given twice; give all of its text as one corpus");
    m.languages_.push_back(code);
    std::vector<int64_t> totals(o.max_order, 0);
    for (const std::string& line : corpora[l].lines)
      for_each_ngram(line, o.max_order, [&](const std::string& g, int order) {
        ++counts[l][g];
        ++totals[order - 1];
      });
    if (totals[0] == 0) throw std::invalid_argument("the corpus of '" + code + "' has no letters");
    m.totals_.push_back(std::move(totals));
  }
  // Each language's most frequent n-grams (ties by the n-gram, so the model does not depend on hash order).
  for (size_t l = 0; l < L; ++l) {
    std::vector<std::pair<int64_t, const std::string*>> by_count;
    by_count.reserve(counts[l].size());
    for (const auto& [g, c] : counts[l]) by_count.push_back({c, &g});
    const size_t keep = std::min<size_t>(by_count.size(), (size_t)o.max_ngrams);
    std::partial_sort(by_count.begin(), by_count.begin() + keep, by_count.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : *a.second < *b.second;
    });
    for (size_t i = 0; i < keep; ++i) m.counts_.emplace(*by_count[i].second, std::vector<int64_t>(L, 0));
  }
  for (auto& [g, row] : m.counts_)
    for (size_t l = 0; l < L; ++l) {
      auto it = counts[l].find(g);
      row[l] = it == counts[l].end() ? 0 : it->second;
    }
  m.build_scores();
  return m;
}

void CharNgramLanguageId::build_scores() {
  const size_t L = languages_.size();
  std::vector<int64_t> vocab(max_order_, 0);  // n-grams kept, per order
  for (const auto& [g, row] : counts_) ++vocab[std::min(ngram_order(g), max_order_) - 1];
  rows_.clear();
  scores_.assign(counts_.size() * L, 0.0f);
  int64_t r = 0;
  for (const auto& [g, row] : counts_) {
    const int order = std::min(ngram_order(g), max_order_);
    for (size_t l = 0; l < L; ++l)
      scores_[r * L + l] = (float)std::log((row[l] + alpha_) / (totals_[l][order - 1] + alpha_ * vocab[order - 1]));
    rows_.emplace(g, r++);
  }
}

std::vector<LanguageGuess> CharNgramLanguageId::detect(std::string_view text, const std::vector<std::string>& among,
                                                       int64_t* evidence) const {
  std::vector<size_t> cand;
  if (among.empty()) {
    for (size_t l = 0; l < languages_.size(); ++l) cand.push_back(l);
  } else {
    for (const std::string& code : among) {
      auto it = std::find(languages_.begin(), languages_.end(), code);
      if (it != languages_.end() && std::find(cand.begin(), cand.end(), size_t(it - languages_.begin())) == cand.end())
        cand.push_back(size_t(it - languages_.begin()));
    }
  }
  std::vector<LanguageGuess> out;
  if (cand.empty()) return out;
  const size_t L = languages_.size();
  std::vector<double> s(cand.size(), 0.0);
  int64_t seen = 0;
  for_each_ngram(text, max_order_, [&](const std::string& g, int) {
    auto it = rows_.find(g);
    if (it == rows_.end()) return;
    ++seen;
    const float* row = scores_.data() + it->second * L;
    for (size_t i = 0; i < cand.size(); ++i) s[i] += row[cand[i]];
  });
  if (evidence) *evidence = seen;
  double top = -INFINITY;
  for (double& v : s) v /= max_order_, top = std::max(top, v);
  double z = 0;
  for (double& v : s) z += (v = std::exp(v - top));
  for (size_t i = 0; i < cand.size(); ++i) out.push_back({languages_[cand[i]], s[i] / z});
  std::stable_sort(out.begin(), out.end(), [](const LanguageGuess& a, const LanguageGuess& b) {
    return a.confidence > b.confidence;
  });
  return out;
}

void CharNgramLanguageId::save(const std::string& path) const {
  nlohmann::json totals = nlohmann::json::object(), grams = nlohmann::json::object();
  for (size_t l = 0; l < languages_.size(); ++l) totals[languages_[l]] = totals_[l];
  for (const auto& [g, row] : counts_) grams[g] = row;  // nlohmann's object is ordered: the file is deterministic
  const nlohmann::json j = {{"format", kFormat}, {"version", kVersion},   {"max_order", max_order_},
                            {"alpha", alpha_},   {"languages", languages_}, {"totals", totals},
                            {"ngrams", grams}};
  write_file_atomic(path, j.dump() + "\n");
}

CharNgramLanguageId CharNgramLanguageId::load(const std::string& path) {
  const nlohmann::json j = load_json_file(path);
  auto bad = [&](const std::string& what) { return std::runtime_error(path + ": " + what); };
  if (!j.is_object() || json_string_or(j, "format", "", path) != kFormat)
    throw bad(std::string("not a language identifier (\"format\": \"") + kFormat + "\" missing; write one with tfm "
              "langid train)");
  if (const int64_t v = json_int(j, "version", path); v != kVersion)
    throw bad("version " + std::to_string(v) + " is not one this build reads (" + std::to_string(kVersion) + ")");
  CharNgramLanguageId m;
  const int64_t order = json_int(j, "max_order", path);
  if (order < 1 || order > kMaxOrder) throw bad("max_order must be in 1.." + std::to_string(kMaxOrder));
  m.max_order_ = (int)order;
  m.alpha_ = json_number(j, "alpha", path);
  if (!(m.alpha_ > 0) || !std::isfinite(m.alpha_)) throw bad("alpha must be a positive number");
  if (!j.contains("languages") || !j["languages"].is_array() || j["languages"].size() < 2)
    throw bad("\"languages\" must list at least two language codes");
  for (const auto& c : j["languages"]) {
    if (!c.is_string() || c.get<std::string>().empty()) throw bad("\"languages\" holds a value that is not a code");
    if (std::find(m.languages_.begin(), m.languages_.end(), c.get<std::string>()) != m.languages_.end())
      throw bad("language '" + c.get<std::string>() + "' is listed twice");
    m.languages_.push_back(c.get<std::string>());
  }
  const size_t L = m.languages_.size();
  auto counts = [&](const nlohmann::json& v, size_t n, const std::string& where) {
    if (!v.is_array() || v.size() != n)
      throw bad(where + " must be an array of " + std::to_string(n) + " counts");
    std::vector<int64_t> out;
    for (const auto& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0) throw bad(where + " holds a value that is not a count");
      out.push_back(x.get<int64_t>());
    }
    return out;
  };
  if (!j.contains("totals") || !j["totals"].is_object()) throw bad("\"totals\" is missing");
  for (const std::string& code : m.languages_) {
    if (!j["totals"].contains(code)) throw bad("\"totals\" has no entry for '" + code + "'");
    m.totals_.push_back(counts(j["totals"][code], m.max_order_, "totals." + code));
  }
  if (!j.contains("ngrams") || !j["ngrams"].is_object()) throw bad("\"ngrams\" is missing");
  for (const auto& [g, row] : j["ngrams"].items()) {
    const int n = ngram_order(g);
    if (n < 1 || n > m.max_order_) throw bad("n-gram '" + g + "' is not of order 1.." + std::to_string(m.max_order_));
    m.counts_.emplace(g, counts(row, L, "ngrams['" + g + "']"));
  }
  m.build_scores();
  return m;
}

}  // namespace tfm
