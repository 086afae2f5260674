#include "eval/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tfm {

namespace {

std::vector<std::string_view> split_space(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(' ', start);
    if (end == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
}

// ' '.join(tokens[i:i+n]): the n-gram key d2l uses. Tokens hold no ' ', so the key identifies the n-gram.
std::string ngram(const std::vector<std::string_view>& tokens, size_t i, size_t n) {
  std::string key(tokens[i]);
  for (size_t j = i + 1; j < i + n; ++j) {
    key += ' ';
    key += tokens[j];
  }
  return key;
}

}  // namespace

double bleu_d2l(const std::string& pred, const std::string& label, int k) {
  if (k < 1) throw std::invalid_argument("bleu_d2l: k = " + std::to_string(k) + ", expected >= 1");
  const auto pred_tokens = split_space(pred), label_tokens = split_space(label);
  const auto len_pred = static_cast<int64_t>(pred_tokens.size()), len_label = static_cast<int64_t>(label_tokens.size());
  if (pred.empty() || len_pred < k) return 0.0;  // d2l: ZeroDivisionError (see header)
  double score = std::exp(std::min(0.0, 1.0 - static_cast<double>(len_label) / static_cast<double>(len_pred)));
  for (int64_t n = 1; n <= k; ++n) {
    std::unordered_map<std::string, int64_t> label_subs;
    for (int64_t i = 0; i + n <= len_label; ++i) ++label_subs[ngram(label_tokens, size_t(i), size_t(n))];
    int64_t num_matches = 0;
    for (int64_t i = 0; i + n <= len_pred; ++i) {
      auto it = label_subs.find(ngram(pred_tokens, size_t(i), size_t(n)));
      if (it != label_subs.end() && it->second > 0) {  // clipping: each label n-gram matches once
        ++num_matches;
        --it->second;
      }
    }
    score *= std::pow(static_cast<double>(num_matches) / static_cast<double>(len_pred - n + 1),
                      std::pow(0.5, static_cast<double>(n)));
  }
  return score;
}

}  // namespace tfm
