// BERT WordPiece tokenizer, token-for-token equal to Hugging Face `tokenizers` (BertNormalizer +
// BertPreTokenizer + WordPiece + the BERT [CLS] A [SEP] B [SEP] template), as loaded from a tokenizer.json or
// built from vocab.txt the way transformers' BertTokenizerFast converts it.
//
// Pipeline for one text (Hugging Face order):
//   1. added tokens ([CLS], [SEP], [PAD], [UNK], [MASK], ...) are matched in the raw text, leftmost-longest;
//   2. every other span is normalized: clean_text, handle_chinese_chars, strip_accents (NFD, drop Mn),
//      lowercase (Rust char::to_lowercase: full mapping, no context);
//   3. split on whitespace, every punctuation char becomes its own word;
//   4. WordPiece: greedy longest-match-first with the "##" prefix; a word longer than
//      max_input_chars_per_word chars, or with any piece missing from the vocab, becomes [UNK].
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tfm {

// One encoded sequence (or pair). All vectors have the same length L (tokens, including special tokens and
// padding).
struct Encoding {
  std::vector<int64_t> input_ids;       // [L]
  std::vector<int64_t> token_type_ids;  // [L], 0 = first segment incl. its [SEP], 1 = second segment
  std::vector<int64_t> attention_mask;  // [L], 1 = real token, 0 = padding
  std::vector<std::string> tokens;      // [L], vocab strings ("##" marks a word continuation)
};

// Hugging Face BertNormalizer options (tokenizer.json "normalizer" or transformers' tokenizer_config.json).
struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents;  // unset: follows lowercase (HF `strip_accents: null`)
  bool lowercase = true;
};

// A token matched verbatim in the raw text before normalization (HF AddedToken with normalized=false) or in
// the normalized text (normalized=true).
struct AddedToken {
  std::string content;
  int64_t id = -1;
  bool normalized = false;
  bool lstrip = false;  // the match also swallows whitespace on its left
  bool rstrip = false;  // ... and on its right
};

class BertTokenizer {
 public:
  // tokenizer.json in `dir` if present, else vocab.txt with the options of tokenizer_config.json if present
  // (do_lower_case, strip_accents, tokenize_chinese_chars, model_max_length).
  // Throws std::runtime_error naming the path when neither file exists or a file is malformed.
  static BertTokenizer from_dir(const std::string& dir);
  // A Hugging Face tokenizer.json whose model is WordPiece with BertNormalizer and BertPreTokenizer, the BERT
  // template post-processor, and truncation (LongestFirst, Right, stride 0) / padding (BatchLongest, Right) null
  // or as HF applies them. Throws std::runtime_error naming the file and what was found otherwise, including
  // special-token ids in post_processor or padding that differ from the vocabulary's.
  static BertTokenizer from_tokenizer_json(const std::string& path);
  // vocab.txt: one token per line, id = line number. The special tokens present in it become added tokens,
  // as in BertTokenizerFast. Throws std::runtime_error naming the path if it cannot be read.
  static BertTokenizer from_vocab_file(const std::string& path, const BertNormalizerOptions& options = {},
                                       int64_t model_max_length = 512);

  // Encodes `text` (and `pair` if given) as [CLS] text [SEP] (pair [SEP]). max_length > 0 truncates the
  // sequences (HF "longest_first" for pairs) so the result, special tokens included, has at most max_length
  // tokens; 0 means the tokenizer.json "truncation" max_length if the file sets one (as HF applies it), else no
  // truncation. attention_mask is all 1.
  // Throws std::invalid_argument if a text is not valid UTF-8 (message gives the byte offset) or if
  // max_length cannot even hold the special tokens.
  Encoding encode(std::string_view text, const std::string* pair = nullptr, bool add_special_tokens = true,
                  int64_t max_length = 0) const;
  // encode() of each text, right-padded to the longest with [PAD] (token_type_ids 0, attention_mask 0).
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens = true,
                                     int64_t max_length = 0) const;
  // Word pieces of `text` without special tokens (normalize + pre-tokenize + WordPiece).
  std::vector<std::string> tokenize(std::string_view text) const;

  // Normalized text as HF BertNormalizer produces it (no added-token matching). Throws like encode().
  std::string normalize(std::string_view text) const;

  int64_t token_to_id(const std::string& token) const;  // -1 if absent
  const std::string& id_to_token(int64_t id) const;     // throws std::out_of_range
  int64_t vocab_size() const { return (int64_t)id_to_token_.size(); }
  int64_t cls_id() const { return cls_id_; }
  int64_t sep_id() const { return sep_id_; }
  int64_t pad_id() const { return pad_id_; }
  int64_t unk_id() const { return unk_id_; }
  int64_t model_max_length() const { return model_max_length_; }
  const BertNormalizerOptions& normalizer_options() const { return norm_; }

 private:
  BertTokenizer() = default;
  // Checks ids, builds the reverse table and resolves the special token ids; `source` names the file.
  void finish(const std::string& source);
  void finish_special(const std::string& source);  // added-token strings and special ids
  // Appends the pieces of one text (added tokens + WordPiece words) as ids and strings. stop_at > 0 stops
  // after the first WordPiece word that leaves ids with >= stop_at tokens (see encode() for why).
  void encode_text(std::string_view text, std::vector<int64_t>& ids, std::vector<std::string>& tokens,
                   size_t stop_at = 0) const;
  void normalize_and_split(const std::u32string& span, std::vector<int64_t>& ids, std::vector<std::string>& tokens,
                           size_t stop_at, bool& stopped) const;
  void wordpiece(const std::u32string& word, std::vector<int64_t>& ids, std::vector<std::string>& tokens) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<AddedToken> added_;
  std::vector<std::u32string> added_u32_;  // added_[i].content decoded, for matching
  BertNormalizerOptions norm_;
  std::string unk_token_ = "[UNK]";
  std::string cls_token_ = "[CLS]";
  std::string sep_token_ = "[SEP]";
  std::string pad_token_ = "[PAD]";
  std::string continuing_subword_prefix_ = "##";
  int64_t max_input_chars_per_word_ = 100;
  int64_t model_max_length_ = 512;
  int64_t truncation_max_length_ = 0;  // tokenizer.json "truncation": used when encode gets max_length 0
  int64_t cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, unk_id_ = -1;
};

}  // namespace tfm
