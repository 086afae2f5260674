#include "train/group_texts.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tfm {

std::vector<TokenizedText> group_texts(const std::vector<TokenizedText>& texts, int64_t max_seq_length,
                                       int64_t texts_per_map_batch) {
  if (max_seq_length < 1 || texts_per_map_batch < 1)
    throw std::invalid_argument("group_texts: max_seq_length and texts_per_map_batch must be at least 1");
  std::vector<TokenizedText> blocks;
  for (size_t first = 0; first < texts.size(); first += (size_t)texts_per_map_batch) {
    const size_t last = std::min(texts.size(), first + (size_t)texts_per_map_batch);
    TokenizedText all;  // concatenated_examples
    for (size_t t = first; t < last; ++t) {
      const TokenizedText& x = texts[t];
      if (x.token_type_ids.size() != x.input_ids.size() || x.special_tokens_mask.size() != x.input_ids.size())
        throw std::invalid_argument("group_texts: text " + std::to_string(t) + " has arrays of different lengths");
      all.input_ids.insert(all.input_ids.end(), x.input_ids.begin(), x.input_ids.end());
      all.token_type_ids.insert(all.token_type_ids.end(), x.token_type_ids.begin(), x.token_type_ids.end());
      all.special_tokens_mask.insert(all.special_tokens_mask.end(), x.special_tokens_mask.begin(),
                                     x.special_tokens_mask.end());
    }
    int64_t total = (int64_t)all.input_ids.size();
    if (total >= max_seq_length) total = total / max_seq_length * max_seq_length;  // drop the small remainder
    for (int64_t i = 0; i < total; i += max_seq_length) {
      const int64_t end = std::min(total, i + max_seq_length);
      TokenizedText b;
      b.input_ids.assign(all.input_ids.begin() + i, all.input_ids.begin() + end);
      b.token_type_ids.assign(all.token_type_ids.begin() + i, all.token_type_ids.begin() + end);
      b.special_tokens_mask.assign(all.special_tokens_mask.begin() + i, all.special_tokens_mask.begin() + end);
      blocks.push_back(std::move(b));
    }
  }
  return blocks;
}

}  // namespace tfm
