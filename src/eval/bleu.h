// d2l.ai's sentence BLEU (reference: shared/reference/torch/d2lnmt.py, bleu).
#pragma once

#include <string>

namespace tfm {

// exp(min(0, 1 - len_label / len_pred)) * prod_{n=1..k} p_n^(0.5^n), where p_n is the clipped n-gram precision
// of pred against label. Tokens are split on single ' ' as Python's str.split(' '), so "a  b" has three tokens
// ("a", "", "b") and the empty string counts as one empty token.
// Differences from d2l, which raises ZeroDivisionError instead: returns 0 when pred is empty or has fewer than
// k tokens (d2l divides by len_pred - n + 1 = 0). For an empty pred this also replaces d2l's defined values
// (bleu('', '', 1) = 1 there): an empty translation scores 0.
// Throws std::invalid_argument if k < 1.
double bleu_d2l(const std::string& pred, const std::string& label, int k);

}  // namespace tfm
