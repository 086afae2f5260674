// Masked-LM training examples as transformers' run_mlm.py makes them without --line_by_line: every text tokenized
// (special tokens included, no truncation), then group_texts concatenates them and cuts blocks of max_seq_length.
#pragma once
#include <cstdint>
#include <vector>

namespace tfm {

// One tokenized text or block: input_ids, token_type_ids and special_tokens_mask [length] (attention_mask is all
// ones).
struct TokenizedText {
  std::vector<int64_t> input_ids, token_type_ids;
  std::vector<bool> special_tokens_mask;
};

// run_mlm.py's group_texts applied by datasets.map(batched=True) to `texts`: each run of texts_per_map_batch
// consecutive texts (map's batch_size, 1000) is concatenated key by key and cut into blocks of max_seq_length
// tokens, the remainder of each run dropped (a run shorter than max_seq_length in all is one short block; an
// empty run none). Blocks keep the texts' special tokens ([CLS] ... [SEP] [CLS] ...) and their
// special_tokens_mask, so DataCollatorForLanguageModeling never masks them. Throws std::invalid_argument for
// max_seq_length or texts_per_map_batch < 1 or a text whose arrays differ in length.
std::vector<TokenizedText> group_texts(const std::vector<TokenizedText>& texts, int64_t max_seq_length,
                                       int64_t texts_per_map_batch = 1000);

}  // namespace tfm
