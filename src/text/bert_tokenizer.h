// The tokenizer of a model folder, token-for-token equal to Hugging Face `tokenizers`: any tokenizer.json the
// engine in text/tokenizer/ supports (WordPiece, byte-level BPE, Unigram, WordLevel; see tokenizer.h there), or a
// BERT vocab.txt (+ tokenizer_config.json) converted the way transformers' BertTokenizerFast converts it.
//
// (The class keeps its historical name: every command that reads text goes through it.)
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace tfm {

// Hugging Face BertNormalizer options (tokenizer.json "normalizer" or transformers' tokenizer_config.json).
struct BertNormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  std::optional<bool> strip_accents;  // unset: follows lowercase (HF `strip_accents: null`)
  bool lowercase = true;
};

class BertTokenizer {
 public:
  // tokenizer.json in `dir` if present, else vocab.txt with the options of tokenizer_config.json if present
  // (do_lower_case, strip_accents, tokenize_chinese_chars, model_max_length). tokenizer_config.json also gives
  // model_max_length and model_input_names (whether the family has token_type_ids).
  // Throws std::runtime_error naming the path when neither file exists or a file is malformed.
  static BertTokenizer from_dir(const std::string& dir);
  // A Hugging Face tokenizer.json. Throws std::runtime_error naming the file and the unsupported or malformed
  // component.
  static BertTokenizer from_tokenizer_json(const std::string& path);
  // vocab.txt: one token per line, id = line number. The special tokens present in it become added tokens,
  // as in BertTokenizerFast. Throws std::runtime_error naming the path if it cannot be read.
  static BertTokenizer from_vocab_file(const std::string& path, const BertNormalizerOptions& options = {},
                                       int64_t model_max_length = 512);

  // Encodes `text` (and `pair` if given) with the post-processor's special tokens (BERT: [CLS] text [SEP]
  // pair [SEP]). max_length > 0 truncates (the file's truncation strategy, else HF "longest_first") so the
  // result, special tokens included, has at most max_length tokens; 0 means the tokenizer.json "truncation" if
  // the file sets one, else none. attention_mask is all 1 unless the file pads to a fixed length.
  // Throws std::invalid_argument if a text is not valid UTF-8 (message gives the byte offset) or if
  // max_length cannot even hold the special tokens.
  Encoding encode(std::string_view text, const std::string* pair = nullptr, bool add_special_tokens = true,
                  int64_t max_length = 0) const;
  Encoding encode(std::string_view text, const std::string* pair, const EncodeCall& call) const;
  // The (text, pair) windows of HfTokenizer::encode_windows (truncation only_second with overflow and stride).
  std::vector<Encoding> encode_windows(std::string_view text, std::string_view pair, int64_t max_length,
                                       int64_t stride) const {
    return engine_->encode_windows(text, pair, max_length, stride);
  }
  // encode() of each text, padded to the longest (the file's padding side / token, else right with pad_id()).
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens = true,
                                     int64_t max_length = 0) const;
  // Pads encodings to the longest of them, as encode_batch does.
  void pad(std::vector<Encoding>& batch) const { engine_->pad(batch); }
  // Tokens of `text` without special tokens.
  std::vector<std::string> tokenize(std::string_view text) const;
  // Ids to text as tokenizers' decode (clean_up_tokenization_spaces false); skip_special drops special tokens.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const {
    return engine_->decode(ids, skip_special);
  }

  // Normalized text as the normalizer produces it (no added-token matching). Throws like encode().
  std::string normalize(std::string_view text) const;

  int64_t token_to_id(const std::string& token) const;  // -1 if absent
  const std::string& id_to_token(int64_t id) const;     // throws std::out_of_range
  int64_t vocab_size() const { return (int64_t)id_to_token_.size(); }
  // Special ids: the post-processor's first / last token of a single text ([CLS]/[SEP], <s>/</s>), the pad id,
  // the unknown token; -1 where the tokenizer has none.
  int64_t cls_id() const { return cls_id_; }
  int64_t sep_id() const { return sep_id_; }
  int64_t pad_id() const { return pad_id_; }
  int64_t unk_id() const { return unk_id_; }
  bool is_special(int64_t id) const { return engine_->is_special(id); }
  int64_t model_max_length() const { return model_max_length_; }
  // Whether the model takes token_type_ids (tokenizer_config.json model_input_names, else the tokenizer class:
  // BERT-like yes; RoBERTa, XLM-R, DistilBERT, MPNet, ModernBERT, GPT-2, T5 no).
  bool has_token_type_ids() const { return has_token_type_ids_; }
  const BertNormalizerOptions& normalizer_options() const { return norm_; }
  const HfTokenizer& engine() const { return *engine_; }

 private:
  BertTokenizer() = default;
  void finish();  // id table and special ids

  std::shared_ptr<HfTokenizer> engine_;
  std::vector<std::string> id_to_token_;
  BertNormalizerOptions norm_;
  int64_t model_max_length_ = 512;
  int64_t cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, unk_id_ = -1;
  bool has_token_type_ids_ = true;
};

}  // namespace tfm
