// The tokenizer engine: a Hugging Face tokenizer.json pipeline (normalizer, pre-tokenizer, model, post-processor,
// decoder, added tokens, truncation, padding) giving the ids, tokens and offsets of the Rust `tokenizers` library
// (0.23) without it.
//
// Supported components (tokenizer.json "type"):
//   normalizers     BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Replace, Prepend,
//                   Precompiled (SentencePiece charsmap), Sequence
//   pre-tokenizers  BertPreTokenizer, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Punctuation, Digits,
//                   Split (string or Oniguruma regex; Removed/Isolated/MergedWithPrevious/MergedWithNext/
//                   Contiguous; invert), CharDelimiterSplit, Sequence
//   models          WordPiece, BPE (merges, byte_fallback, ignore_merges, continuing_subword_prefix,
//                   end_of_word_suffix, fuse_unk, unk_token), Unigram (Viterbi, byte_fallback, unk), WordLevel
//   post-processors BertProcessing, RobertaProcessing, TemplateProcessing, ByteLevel, Sequence
//   decoders        ByteLevel, Metaspace, WordPiece, BPEDecoder, ByteFallback, Fuse, Strip, Replace, Sequence
// Offsets are in Unicode code points of the input text (Python's offset_mapping); [0, 0] for added special
// tokens of the post-processor. A pair's second text counts from its own start.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tfm {

// One encoded sequence (or pair). All vectors have the same length L (tokens, special tokens and padding).
struct Encoding {
  std::vector<int64_t> input_ids;       // [L]
  std::vector<int64_t> token_type_ids;  // [L], segment ids as the post-processor sets them
  std::vector<int64_t> attention_mask;  // [L], 1 = real token, 0 = padding
  std::vector<std::string> tokens;      // [L], vocabulary strings
  std::vector<std::pair<int64_t, int64_t>> offsets;  // [L], [start, end) in code points of its own text
  std::vector<int64_t> special_tokens_mask;          // [L], 1 = added by the post-processor or padding
  std::vector<int> sequence_ids;                     // [L], 0 / 1 = which text, -1 = special or padding
  // [L], the word of each token within its text: the index of its pre-tokenizer split (added tokens count as one),
  // as tokenizers' Encoding.word_ids; -1 for special tokens and padding.
  std::vector<int64_t> words;
};

enum class TruncationStrategy { LongestFirst, OnlyFirst, OnlySecond };
enum class Side { Left, Right };

struct TruncationParams {
  int64_t max_length = 0;  // tokens including the post-processor's special tokens
  TruncationStrategy strategy = TruncationStrategy::LongestFirst;
  Side direction = Side::Right;
  int64_t stride = 0;
};

struct PaddingParams {
  std::optional<int64_t> fixed_length;  // nullopt: pad to the longest of the batch
  Side direction = Side::Right;
  int64_t pad_to_multiple_of = 0;
  int64_t pad_id = 0, pad_type_id = 0;
  std::string pad_token = "[PAD]";
};

struct EncodeCall {
  bool add_special_tokens = true;
  // > 0: truncate to this many tokens (strategy / direction of the file's truncation if it has one, else
  // longest_first / right); 0: the tokenizer.json "truncation" if set, else none.
  int64_t max_length = 0;
  std::optional<TruncationStrategy> strategy;  // overrides the file's
  std::optional<Side> direction;
};

class HfTokenizer {
 public:
  // Parses a tokenizer.json. Throws std::runtime_error naming `path` and the component for a malformed or
  // unsupported file.
  static HfTokenizer from_file(const std::string& path);
  static HfTokenizer from_json_text(const std::string& text, const std::string& source);
  // BERT vocab.txt as transformers' BertTokenizerFast converts it (BertNormalizer + BertPreTokenizer + WordPiece
  // + [CLS] A [SEP] B [SEP]).
  struct BertOptions {
    bool clean_text = true, handle_chinese_chars = true, lowercase = true;
    std::optional<bool> strip_accents;
  };
  static HfTokenizer from_bert_vocab(const std::string& path, const BertOptions& options);

  // Encodes one text or pair. Throws std::invalid_argument for invalid UTF-8 (byte offset in the message) or a
  // max_length that cannot hold the special tokens.
  Encoding encode(std::string_view text, const std::string_view* pair = nullptr, const EncodeCall& call = {}) const;
  // The windows of a (text, pair) encoding whose pair is too long for max_length, as tokenizers returns them with
  // truncation only_second, `stride` and return_overflowing_tokens (tokenizers <= 0.22: Encoding::truncate's
  // parts of the pair, each joined to the whole first text by the post-processor): the pair's tokens cut into
  // parts of max_length - len(text) - special tokens, consecutive parts overlapping by `stride` tokens, first
  // part first. One window when everything fits. The file's padding and truncation settings are not applied.
  // Throws std::invalid_argument when the text leaves no room for the pair ("... too short to respect max_length")
  // or when stride is not below the room left for the pair (tokenizers' "`stride` must be strictly less than
  // `max_len`" assertion).
  std::vector<Encoding> encode_windows(std::string_view text, std::string_view pair, int64_t max_length,
                                       int64_t stride) const;
  // Pads a batch as the file's padding says (or to the longest, right, with pad_id()).
  void pad(std::vector<Encoding>& batch) const;
  // Ids to text, as tokenizers decodes (clean_up_tokenization_spaces false); skip_special drops special added
  // tokens. Unknown ids are skipped.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const;
  // Token strings to text through the file's decoder (tokens joined by spaces without one), as transformers'
  // PreTrainedTokenizerFast.convert_tokens_to_string; nothing is skipped.
  std::string decode_tokens(std::vector<std::string> tokens) const;
  // The model's continuing_subword_prefix ("##" for WordPiece), "" when it has none (Unigram, most BPE files).
  std::string continuing_subword_prefix() const;
  // Normalizer output on the whole text (no added-token split). Throws like encode().
  std::string normalize(std::string_view text) const;

  int64_t token_to_id(const std::string& token) const;  // -1 if absent
  std::optional<std::string> id_to_token(int64_t id) const;
  int64_t vocab_size() const;  // largest id + 1
  bool is_special(int64_t id) const;
  const std::optional<TruncationParams>& truncation() const;
  const std::optional<PaddingParams>& padding() const;
  int64_t pad_id() const;  // padding's pad_id, else the id of a pad token ([PAD], <pad>), else 0
  int64_t num_special_tokens_to_add(bool pair) const;
  std::string model_type() const;  // "WordPiece", "BPE", "Unigram", "WordLevel"
  // Id of the first / last special token the post-processor adds to a single text (-1 when none).
  int64_t first_special_id() const;
  int64_t last_special_id() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// tokenizer.json text for a SentencePiece Unigram model without one, as transformers' convert_slow_tokenizer builds
// it: XLMRobertaConverter (t5_style false: fairseq ids <s> <pad> </s> <unk>, pieces after the 3 controls shifted by
// one, <mask> last, <s> A </s></s> B </s>) or T5Converter (ids as in the model, then extra_ids <extra_id_N>,
// A </s> B </s>); normalizer Precompiled (the model's charsmap) + Replace(" {2,}", " "), Metaspace.
// Throws std::runtime_error naming the file for an unreadable, malformed or non-Unigram model.
std::string sentencepiece_tokenizer_json(const std::string& model_path, bool t5_style, int64_t extra_ids);

}  // namespace tfm
