// Corpus BLEU exactly as sacreBLEU 2.x computes it with its defaults (sacrebleu.corpus_bleu(hyps, [refs]):
// tokenizer '13a', case-sensitive, max n-gram order 4, smooth_method 'exp', effective_order False), with one
// reference per segment. Reference: mjpost/sacrebleu, sacrebleu/metrics/bleu.py (BLEU.compute_bleu,
// _compute_segment_statistics, _preprocess_segment), sacrebleu/tokenizers/tokenizer_13a.py, tokenizer_re.py.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tfm {

// sacreBLEU's BLEUScore. Percentages as in sacreBLEU: score and precisions are in [0, 100].
struct CorpusBleu {
  double score = 0;                      // BP * exp(mean_n log p_n), in percent; 0 when no n-gram matches at all
  double bp = 0;                         // brevity penalty: 1 if hyp_len >= ref_len, else exp(1 - ref_len/hyp_len)
                                         // (0 when hyp_len == 0)
  double ratio = 0;                      // hyp_len / ref_len (0 when ref_len == 0)
  int64_t hyp_len = 0, ref_len = 0;      // total 13a tokens in hypotheses / references
  std::array<double, 4> precisions{};    // p_1..p_4 in percent (exp-smoothed where counts[n] == 0)
  std::array<int64_t, 4> counts{};       // clipped n-gram matches summed over the corpus, n = 1..4
  std::array<int64_t, 4> totals{};       // hypothesis n-grams summed over the corpus, n = 1..4

  // sacreBLEU's default BLEUScore.format():
  //   "BLEU = 41.23 72.1/49.3/35.0/25.2 (BP = 0.987 ratio = 0.987 hyp_len = 1234 ref_len = 1250)"
  // (score 2 decimals, precisions 1, BP and ratio 3; rounded as Python's format(), i.e. exact binary value,
  // ties to even, which is what printf does).
  std::string format() const;
};

// sacreBLEU's preprocessing of one segment for default BLEU: Tokenizer13a()(line.rstrip()).
// 1. rstrip Python whitespace (str.isspace: ASCII \t\n\v\f\r, U+001C..U+001F, space, U+0085, U+00A0, U+1680,
//    U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000);
// 2. in this order: remove "<skipped>", remove "-\n", '\n' -> ' ', "&quot;" -> '"', "&amp;" -> '&', "&lt;" -> '<',
//    "&gt;" -> '>' (each a left-to-right replace-all, so "&amp;quot;" becomes "&quot;" and stays so);
// 3. pad with one space on each side, then apply in order, each as a left-to-right non-overlapping re.sub:
//    ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> " \1 "   (ASCII punctuation except ' , - . and digits/letters)
//    ([^0-9])([\.,])                 -> "\1 \2 " (period/comma not preceded by a digit)
//    ([\.,])([^0-9])                 -> " \1 \2" (period/comma not followed by a digit)
//    ([0-9])(-)                      -> "\1 \2 " (dash preceded by a digit)
// 4. ' '.join(line.split()): split on Python whitespace (so U+00A0 and U+202F separate tokens too).
// Example: "Le prix est 3,50 euros." -> "Le prix est 3,50 euros ."
// Throws std::invalid_argument "tokenize_13a: invalid UTF-8 at byte offset N" on malformed UTF-8.
std::string tokenize_13a(std::string_view line);

// sacrebleu.corpus_bleu(hyps, [refs]) with default arguments; refs[i] is the single reference of hyps[i].
// Per segment: 13a-tokenize both sides, count hypothesis n-grams (n = 1..4) and clip each by its count in the
// reference; sum counts, totals and lengths over the corpus; then BLEU.compute_bleu with 'exp' smoothing: going
// n = 1..4, stop at the first order with totals[n] == 0 (that and later precisions stay 0 and the score becomes
// 0); where counts[n] == 0 the precision is 100 / (2^k * totals[n]) for the k-th such order, else
// 100 * counts[n] / totals[n].
// Throws std::invalid_argument (messages give the values):
//   "corpus_bleu: 3 hypotheses but 4 references"; "corpus_bleu: empty corpus (0 segments)";
//   "corpus_bleu: reference 5 is empty" (1-based; sacreBLEU also rejects an empty reference line);
//   "corpus_bleu: hypothesis 2: tokenize_13a: invalid UTF-8 at byte offset 7" (likewise "reference N: ...").
CorpusBleu corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs);

}  // namespace tfm
