/// @file tfm/tokenizer.h
/// Tokenization token-for-token equal to Hugging Face `tokenizers` for the tokenizer.json of a model folder
/// (WordPiece, byte-level BPE, Unigram with the SentencePiece Precompiled normalizer, WordLevel; their normalizers,
/// pre-tokenizers, post-processors, decoders, added tokens, truncation and padding), or a BERT vocab.txt.
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
};

/// One encoded text (or pair), unpadded, as HF's Encoding: all vectors have the token count L.
struct TokenEncoding {
  std::vector<int64_t> input_ids;       ///< [L] vocabulary ids
  std::vector<int64_t> token_type_ids;  ///< [L] segment ids as the post-processor sets them
  std::vector<int64_t> attention_mask;  ///< [L] 1 (0 only where the file pads to a fixed length)
  std::vector<int64_t> special_tokens_mask;  ///< [L] 1 = added by the post-processor (or padding)
  std::vector<std::string> tokens;      ///< [L] vocabulary strings
  /// [L] [start, end) in Unicode code points of its own text (Python's offset_mapping); a pair's second text
  /// counts from its own start; (0, 0) for special tokens.
  std::vector<std::pair<int64_t, int64_t>> offsets;
};

/// A padded batch, as HF tokenizer(texts, padding=True) returns it. All arrays are int64 [batch, length]; rows
/// are right-padded with [PAD] to the longest row.
struct TokenBatch {
  IdArray input_ids;       ///< [batch, length] vocabulary ids
  IdArray attention_mask;  ///< [batch, length] 1 = real token, 0 = padding
  IdArray token_type_ids;  ///< [batch, length] 0 = first segment (through its [SEP]), 1 = second segment
  std::vector<std::vector<std::string>> tokens;  ///< [batch][tokens of the row, no padding], "##" continues a word
};

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

  /// One text, or a pair when `pair` is given. Throws std::invalid_argument for invalid UTF-8 (the message gives
  /// the byte offset) or a max_length that cannot hold the special tokens.
  TokenEncoding encode(const std::string& text, const TokenizeOptions& options = {}) const;
  TokenEncoding encode(const std::string& text, const std::string& pair, const TokenizeOptions& options = {}) const;
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
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
