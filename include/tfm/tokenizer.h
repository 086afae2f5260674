/// @file tfm/tokenizer.h
/// Tokenization token-for-token equal to Hugging Face `tokenizers` for the tokenizer.json of a model folder
/// (WordPiece, byte-level BPE, Unigram with the SentencePiece Precompiled normalizer, WordLevel; their normalizers,
/// pre-tokenizers, post-processors, decoders, added tokens, truncation and padding), a BERT vocab.txt, or a
/// SentencePiece sentencepiece.bpe.model / spiece.model converted as transformers converts it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tfm/array.h"

namespace tfm {

struct TokenizeOptions {
  /// The post-processor's special tokens (BERT: [CLS] text [SEP] pair [SEP]; RoBERTa: <s> text </s></s> pair
  /// </s>), as HF add_special_tokens=True.
  bool add_special_tokens = true;
  /// Truncate every sequence (special tokens included) to at most this many tokens: the file's truncation strategy
  /// and side if it sets one, else HF "longest_first" from the right. 0: the tokenizer.json "truncation" if the
  /// file sets one, else no truncation.
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
  std::vector<int64_t> token_type_ids;  ///< [length] segment ids as the post-processor sets them (0 = first)
  std::vector<int64_t> attention_mask;  ///< [length] 1 (0 only where the tokenizer.json pads to a fixed length)
  std::vector<std::string> tokens;      ///< [length] vocabulary strings
  std::vector<bool> special;            ///< [length] true for the special tokens the post-processor added
  /// [length] character (code point) offsets [start, end) of each token in its own text (HF offset_mapping; a
  /// pair's second text counts from its own start), or (-1, -1) for a token with no place in it (special tokens,
  /// prompt tokens).
  std::vector<std::pair<int64_t, int64_t>> offsets;
};

struct TokenizerAccess;

/// Thread-safety: a Tokenizer is immutable after construction; every const method may be called from several
/// threads at once.
class Tokenizer {
 public:
  /// Loads `model_dir`/tokenizer.json, or else `model_dir`/vocab.txt with tokenizer_config.json, or else a
  /// SentencePiece sentencepiece.bpe.model (XLM-R) / spiece.model (T5).
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
  /// A pair with the post-processor's template (BERT: [CLS] text [SEP] pair [SEP]), unpadded, with offsets (each
  /// text counts from its own start). Same errors.
  TextEncoding encode_pair(const std::string& text, const std::string& pair, const TokenizeOptions& options = {}) const;
  /// Ids to text, as HF tokenizer.decode(ids, skip_special_tokens, clean_up_tokenization_spaces=False) with the
  /// file's decoder. Ids outside the vocabulary are skipped.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;
  /// Whether the model family takes token_type_ids (tokenizer_config.json model_input_names, else the tokenizer
  /// class: BERT yes; RoBERTa, XLM-R, DistilBERT, MPNet, ModernBERT, GPT-2, T5 no).
  bool has_token_type_ids() const;
  /// "WordPiece", "BPE", "Unigram" or "WordLevel".
  std::string model_type() const;

  /// Tokens of `text` without special tokens.
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
