/// @file tfm/bleu.h
/// BLEU: sacreBLEU's corpus BLEU (its defaults) and d2l.ai's sentence BLEU.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tfm::bleu {

/// sacreBLEU's BLEUScore; score and precisions in percent [0, 100].
struct CorpusScore {
  double score = 0;                    ///< BP * exp(mean_n log p_n)
  double bp = 0;                       ///< brevity penalty
  double ratio = 0;                    ///< hyp_len / ref_len
  int64_t hyp_len = 0, ref_len = 0;    ///< 13a tokens in hypotheses / references
  std::array<double, 4> precisions{};  ///< p_1..p_4 in percent (exp-smoothed)
  std::array<int64_t, 4> counts{};     ///< clipped n-gram matches, n = 1..4
  std::array<int64_t, 4> totals{};     ///< hypothesis n-grams, n = 1..4
  /// sacreBLEU's line: "BLEU = 41.23 72.1/49.3/35.0/25.2 (BP = 0.987 ratio = 0.987 hyp_len = 1234 ref_len = 1250)"
  std::string format() const;
};

/// sacrebleu.corpus_bleu(hyps, [refs]) with default arguments (13a tokenizer, case-sensitive, 4-grams, exp
/// smoothing); refs[i] is the single reference of hyps[i]. Throws std::invalid_argument when the lists differ in
/// length or are empty, a reference is empty, or a line is not valid UTF-8 (messages give the line, 1-based).
CorpusScore corpus(const std::vector<std::string>& refs, const std::vector<std::string>& hyps);

/// d2l.ai's sentence BLEU of `hypothesis` against `reference` (space-separated tokens), n-grams up to k:
/// exp(min(0, 1 - len_ref / len_hyp)) * prod_n p_n^(1/2^n); 0 when the hypothesis has fewer than k tokens.
/// Throws std::invalid_argument if k < 1.
double sentence(const std::string& hypothesis, const std::string& reference, int k = 2);

}  // namespace tfm::bleu
