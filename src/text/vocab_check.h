// The rule that a tokenizer fits its model: every id it can produce has a row in the embedding table.
#pragma once
#include <cstdint>
#include <string>

namespace tfm {

// Throws std::runtime_error "<where>: tokenizer vocabulary (N tokens) is larger than config.json vocab_size (M)"
// when tokenizer_vocab_size > config_vocab_size (where: the model folder). A smaller tokenizer is fine (Hugging
// Face checkpoints often pad vocab_size to a multiple of 8 or 64).
void check_tokenizer_vocab(const std::string& where, int64_t tokenizer_vocab_size, int64_t config_vocab_size);

}  // namespace tfm
