#include "text/vocab_check.h"

#include <stdexcept>

namespace tfm {

void check_tokenizer_vocab(const std::string& where, int64_t tokenizer_vocab_size, int64_t config_vocab_size) {
  if (tokenizer_vocab_size > config_vocab_size)
    throw std::runtime_error(where + ": tokenizer vocabulary (" + std::to_string(tokenizer_vocab_size) +
                             " tokens) is larger than config.json vocab_size (" + std::to_string(config_vocab_size) +
                             ")");
}

}  // namespace tfm
