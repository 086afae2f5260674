// tfm::Tokenizer over the tokenizer engine (text/bert_tokenizer, text/tokenizer).
#include "tfm/tokenizer.h"

#include <filesystem>
#include <stdexcept>

#include "api/common.h"
#include "api/impl.h"
#include "models/heads.h"
#include "io/text_file.h"

namespace tfm {

Tokenizer::Tokenizer(const std::string& model) {
  const std::string model_dir = api::model_folder(model);
  api::require_dir(model_dir, "model folder");
  std::error_code ec;
  bool any = false;
  for (const char* f : {"/tokenizer.json", "/vocab.txt", "/sentencepiece.bpe.model", "/spiece.model"})
    any = any || std::filesystem::exists(model_dir + f, ec);
  if (!any) throw FileNotFoundError(model_dir + ": no tokenizer.json or vocab.txt in the model folder");
  impl_ = std::make_unique<Impl>(Impl{BertTokenizer::from_dir(model_dir)});
}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

namespace {
std::shared_ptr<const int64_t> share(std::vector<int64_t> v) {
  auto keep = std::make_shared<std::vector<int64_t>>(std::move(v));
  return std::shared_ptr<const int64_t>(keep, keep->data());
}
}  // namespace

TokenBatch api::pad_batch(const BertTokenizer& tok, std::vector<Encoding> enc) {
  const int64_t B = (int64_t)enc.size();
  size_t L = 0;
  for (const Encoding& e : enc) L = std::max(L, e.input_ids.size());
  std::vector<int64_t> ids(B * L, tok.pad_id()), mask(B * L, 0), types(B * L, 0);
  TokenBatch out;
  out.tokens.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(enc[b].input_ids.begin(), enc[b].input_ids.end(), ids.begin() + b * L);
    std::copy(enc[b].attention_mask.begin(), enc[b].attention_mask.end(), mask.begin() + b * L);
    std::copy(enc[b].token_type_ids.begin(), enc[b].token_type_ids.end(), types.begin() + b * L);
    out.tokens[b] = std::move(enc[b].tokens);
  }
  out.input_ids = IdArray(share(std::move(ids)), {B, (int64_t)L});
  out.attention_mask = IdArray(share(std::move(mask)), {B, (int64_t)L});
  out.token_type_ids = IdArray(share(std::move(types)), {B, (int64_t)L});
  return out;
}

std::vector<Encoding> api::encode_texts(const BertTokenizer& tok, const std::vector<std::string>& texts,
                                        const std::vector<std::string>* pairs, const TokenizeOptions& o) {
  if (texts.empty()) throw std::invalid_argument("no texts given (an empty list)");
  if (pairs && pairs->size() != texts.size())
    throw std::invalid_argument(std::to_string(texts.size()) + " texts but " + std::to_string(pairs->size()) +
                                " pairs");
  if (o.max_length < 0) throw std::invalid_argument("max_length must be >= 0, got " + std::to_string(o.max_length));
  std::vector<Encoding> enc;
  enc.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    for (int side = 0; side < (pairs ? 2 : 1); ++side) {
      const std::string& t = side ? (*pairs)[i] : texts[i];
      if (auto bad = find_invalid_utf8(t))
        throw std::invalid_argument(std::string(side ? "pair " : "text ") + std::to_string(i) +
                                    ": invalid UTF-8 at byte offset " + std::to_string(*bad));
    }
    enc.push_back(tok.encode(texts[i], pairs ? &(*pairs)[i] : nullptr, o.add_special_tokens, o.max_length));
  }
  return enc;
}

TokenBatch Tokenizer::operator()(const std::vector<std::string>& texts, const TokenizeOptions& options) const {
  return api::pad_batch(impl_->tok, api::encode_texts(impl_->tok, texts, nullptr, options));
}
TokenBatch Tokenizer::operator()(const std::vector<std::string>& texts, const std::vector<std::string>& pairs,
                                 const TokenizeOptions& options) const {
  return api::pad_batch(impl_->tok, api::encode_texts(impl_->tok, texts, &pairs, options));
}
TextEncoding api::text_encoding(const BertTokenizer& tok, const Encoding& e, bool add_special_tokens,
                                const std::string& seen, int64_t skip, bool offsets) {
  TextEncoding t;
  t.input_ids = e.input_ids;
  t.token_type_ids = e.token_type_ids;
  t.attention_mask = e.attention_mask;
  t.tokens = e.tokens;
  // The engine marks the post-processor's tokens; an encoding cut by hand (a sentence-transformers max_seq_length)
  // may have lost the mask, then a [CLS]/[SEP] at either end counts.
  const bool mask = e.special_tokens_mask.size() == t.tokens.size();
  for (size_t i = 0; i < t.tokens.size(); ++i)
    t.special.push_back(add_special_tokens &&
                        (mask ? e.special_tokens_mask[i] == 1
                              : (i == 0 || i + 1 == t.tokens.size()) &&
                                    (t.tokens[i] == "[CLS]" || t.tokens[i] == "[SEP]")));
  if (!offsets) return t;
  // The tokenizer's own offsets (HF offset_mapping) when the encoding still has them.
  t.offsets = e.offsets.size() == e.input_ids.size() ? e.offsets : token_offsets(tok, seen, e);
  for (size_t i = 0; i < t.offsets.size(); ++i) {
    auto& [a, b] = t.offsets[i];
    if (t.special[i] || (a == 0 && b == 0 && !mask) || a < skip) {
      a = b = -1;
    } else {
      a -= skip;
      b -= skip;
    }
  }
  return t;
}

TextEncoding Tokenizer::encode(const std::string& text, const TokenizeOptions& o) const {
  const Encoding e = impl_->tok.encode(text, nullptr, o.add_special_tokens, o.max_length);
  return api::text_encoding(impl_->tok, e, o.add_special_tokens, text, 0, o.return_offsets);
}
TextEncoding Tokenizer::encode_pair(const std::string& text, const std::string& pair, const TokenizeOptions& o) const {
  const Encoding e = impl_->tok.encode(text, &pair, o.add_special_tokens, o.max_length);
  // Offsets come from the engine, each text counting from its own start.
  return api::text_encoding(impl_->tok, e, o.add_special_tokens, text, 0, o.return_offsets);
}
std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return impl_->tok.decode(ids, skip_special_tokens);
}
bool Tokenizer::has_token_type_ids() const { return impl_->tok.has_token_type_ids(); }
std::string Tokenizer::model_type() const { return impl_->tok.engine().model_type(); }

std::vector<std::string> Tokenizer::tokenize(const std::string& text) const {
  if (auto bad = find_invalid_utf8(text))
    throw std::invalid_argument("text: invalid UTF-8 at byte offset " + std::to_string(*bad));
  return impl_->tok.tokenize(text);
}
int64_t Tokenizer::token_to_id(const std::string& token) const { return impl_->tok.token_to_id(token); }
std::string Tokenizer::id_to_token(int64_t id) const { return impl_->tok.id_to_token(id); }
int64_t Tokenizer::vocab_size() const { return impl_->tok.vocab_size(); }
int64_t Tokenizer::pad_id() const { return impl_->tok.pad_id(); }
int64_t Tokenizer::model_max_length() const { return impl_->tok.model_max_length(); }

}  // namespace tfm
