// Private parts of the API classes that other src/api files share.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "text/bert_tokenizer.h"
#include "tfm/tokenizer.h"

namespace tfm {

struct Tokenizer::Impl {
  BertTokenizer tok;
};

// Builds a tfm::Tokenizer around an already loaded BertTokenizer (a task head's), so a folder is read once.
struct TokenizerAccess {
  static Tokenizer wrap(BertTokenizer tok) {
    Tokenizer t;
    t.impl_ = std::make_unique<Tokenizer::Impl>(Tokenizer::Impl{std::move(tok)});
    return t;
  }
};

namespace api {
// Validates the texts (non-empty list, UTF-8, pairs of equal count) and encodes each.
std::vector<Encoding> encode_texts(const BertTokenizer& tok, const std::vector<std::string>& texts,
                                   const std::vector<std::string>* pairs, const TokenizeOptions& options);
// A TextEncoding of `e` (the encoding of `seen`, which is the request text after a prompt of `skip` code points):
// special marks a [CLS]/[SEP] the tokenizer added at either end; offsets are in the request text, (-1, -1) for
// special and prompt tokens.
TextEncoding text_encoding(const BertTokenizer& tok, const Encoding& e, bool add_special_tokens,
                           const std::string& seen, int64_t skip, bool offsets = true);
// Right-pads encodings into [B, L] arrays ([PAD], mask 0, type 0).
TokenBatch pad_batch(const BertTokenizer& tok, std::vector<Encoding> enc);
}  // namespace api

}  // namespace tfm
