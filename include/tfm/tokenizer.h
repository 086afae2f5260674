/// @file tfm/tokenizer.h
/// BERT WordPiece tokenization, token-for-token equal to Hugging Face `tokenizers` (BertTokenizerFast) for the
/// tokenizer.json or vocab.txt of a model folder.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/array.h"

namespace tfm {

struct TokenizeOptions {
  bool add_special_tokens = true;  ///< [CLS] text [SEP] (pair [SEP]), as HF add_special_tokens=True
  /// Truncate every sequence (special tokens included) to at most this many tokens, HF "longest_first" for pairs.
  /// 0: the tokenizer.json "truncation" max_length if the file sets one, else no truncation.
  int64_t max_length = 0;
  /// encode(): fill TextEncoding::offsets (HF return_offsets_mapping); false leaves them empty (faster).
  bool return_offsets = true;
};

/// A padded batch, as HF tokenizer(texts, padding=True) returns it. All arrays are int64 [batch, length]; rows
/// are right-padded with [PAD] to the longest row.
struct TokenBatch {
  IdArray input_ids;       ///< [batch, length] vocabulary ids
  IdArray attention_mask;  ///< [batch, length] 1 = real token, 0 = padding
  IdArray token_type_ids;  ///< [batch, length] 0 = first segment (through its [SEP]), 1 = second segment
  std::vector<std::vector<std::string>> tokens;  ///< [batch][tokens of the row, no padding], "##" continues a word
};

/// One text encoded, unpadded: a row of HF tokenizer(text, return_offsets_mapping=True,
/// return_special_tokens_mask=True).
struct TextEncoding {
  std::vector<int64_t> input_ids;       ///< [length] vocabulary ids
  std::vector<int64_t> token_type_ids;  ///< [length] 0 = first segment
  std::vector<std::string> tokens;      ///< [length] "##" continues a word
  std::vector<bool> special;            ///< [length] true for the [CLS] / [SEP] the tokenizer added
  /// [length] character (code point) offsets [start, end) of each token in the text (HF offset_mapping), or
  /// (-1, -1) for a token with no place in it (special tokens, prompt tokens).
  std::vector<std::pair<int64_t, int64_t>> offsets;
};

struct TokenizerAccess;

/// Thread-safety: a Tokenizer is immutable after construction; every const method may be called from several
/// threads at once.
class Tokenizer {
 public:
  /// Loads `model_dir`/tokenizer.json, or else `model_dir`/vocab.txt with tokenizer_config.json.
  /// Throws tfm::FileNotFoundError when the folder or both files are missing; std::runtime_error for a malformed
  /// or unsupported file (the message names it).
  explicit Tokenizer(const std::string& model_dir);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// Encodes `texts` (UTF-8) into one padded batch. Throws std::invalid_argument when `texts` is empty, a text is
  /// not valid UTF-8 (the message gives the text's index and byte offset), or max_length cannot hold the special
  /// tokens.
  TokenBatch operator()(const std::vector<std::string>& texts, const TokenizeOptions& options = {}) const;
  /// Sentence pairs: row i is [CLS] texts[i] [SEP] pairs[i] [SEP]. Throws std::invalid_argument also when the
  /// two lists differ in length.
  TokenBatch operator()(const std::vector<std::string>& texts, const std::vector<std::string>& pairs,
                        const TokenizeOptions& options = {}) const;

  /// One text with its offsets, unpadded. Throws std::invalid_argument for invalid UTF-8 ("text is not valid
  /// UTF-8 (byte offset N)"), a negative max_length or one that cannot hold the special tokens.
  TextEncoding encode(const std::string& text, const TokenizeOptions& options = {}) const;
  /// A pair, [CLS] text [SEP] pair [SEP] (truncation "longest_first"), unpadded; offsets are left empty. Same
  /// errors.
  TextEncoding encode_pair(const std::string& text, const std::string& pair, const TokenizeOptions& options = {}) const;

  /// Word pieces of `text` without special tokens.
  std::vector<std::string> tokenize(const std::string& text) const;
  /// Id of `token`, or -1 when it is not in the vocabulary.
  int64_t token_to_id(const std::string& token) const;
  /// Throws std::out_of_range for an id outside [0, vocab_size()).
  std::string id_to_token(int64_t id) const;
  int64_t vocab_size() const;
  int64_t pad_id() const;
  int64_t model_max_length() const;  ///< tokens (tokenizer_config.json model_max_length, default 512)

 private:
  friend class Encoder;
  friend struct TokenizerAccess;  // src/api: a Tokenizer around a tokenizer a model folder already loaded
  Tokenizer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
