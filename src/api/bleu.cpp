// tfm::bleu over eval/corpus_bleu (sacreBLEU) and eval/bleu (d2l).
#include "tfm/bleu.h"

#include <stdexcept>

#include "eval/bleu.h"
#include "eval/corpus_bleu.h"
#include "io/text_file.h"

namespace tfm::bleu {

namespace {
CorpusBleu to_internal(const CorpusScore& s) {
  CorpusBleu b;
  b.score = s.score, b.bp = s.bp, b.ratio = s.ratio, b.hyp_len = s.hyp_len, b.ref_len = s.ref_len;
  b.precisions = s.precisions, b.counts = s.counts, b.totals = s.totals;
  return b;
}
}  // namespace

std::string CorpusScore::format() const { return to_internal(*this).format(); }

CorpusScore corpus(const std::vector<std::string>& refs, const std::vector<std::string>& hyps) {
  const CorpusBleu b = corpus_bleu(hyps, refs);
  CorpusScore s;
  s.score = b.score, s.bp = b.bp, s.ratio = b.ratio, s.hyp_len = b.hyp_len, s.ref_len = b.ref_len;
  s.precisions = b.precisions, s.counts = b.counts, s.totals = b.totals;
  return s;
}

double sentence(const std::string& hypothesis, const std::string& reference, int k) {
  for (const std::string* t : {&hypothesis, &reference})
    if (auto bad = find_invalid_utf8(*t))
      throw std::invalid_argument(std::string(t == &hypothesis ? "hypothesis" : "reference") +
                                  ": invalid UTF-8 at byte offset " + std::to_string(*bad));
  return bleu_d2l(hypothesis, reference, k);
}

}  // namespace tfm::bleu
