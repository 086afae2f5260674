// The tokenizers of Hugging Face translation folders, on libsentencepiece (pieces) and the folders' id maps:
//  - MarianTokenizer (tokenization_marian.py): source.spm pieces mapped to ids through vocab.json (<unk> for a
//    piece it lacks), a leading ">>xx<<" kept as one token (other ">>..<<" removed), </s> appended; decoding maps
//    ids through target_vocab.json (separate_vocabs) or vocab.json and joins the pieces with target.spm.
//  - M2M100Tokenizer (tokenization_m2m_100.py): sentencepiece.bpe.model pieces through vocab.json (<unk> = 3),
//    [__src__] + ids + [</s>]; language tokens after the vocabulary (len(vocab.json) + index).
//  - NllbTokenizer (tokenization_nllb.py): spm id + 1 (the fairseq offset; spm <unk> -> 3; <s> 0, <pad> 1, </s> 2,
//    <unk> 3), [src_lang] + ids + [</s>]; language codes at spm size + 1 + index.
// Language ids come from tokenizer_config.json's added_tokens_decoder when present, else from the order of
// additional_special_tokens (special_tokens_map.json or tokenizer_config.json), else (M2M100) fairseq's list.
// Decoding skips the special tokens (skip_special_tokens=True).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tfm {

class TranslationTokenizer {
 public:
  enum class Kind { kMarian, kM2M100, kNllb };
  // `dir`: the folder; model_type from its config.json ("marian" or "m2m_100"; NLLB when tokenizer_config.json
  // names NllbTokenizer / NllbTokenizerFast). Throws std::runtime_error naming a missing or malformed file.
  static std::unique_ptr<TranslationTokenizer> load(const std::string& dir, const std::string& model_type);
  ~TranslationTokenizer();

  Kind kind() const { return kind_; }
  // Source ids of `text` in `src_lang` (M2M100 / NLLB; empty: tokenizer_config.json's src_lang). Marian: a
  // non-empty `target_lang` is prepended as ">>target_lang<<" when the text has no leading code (multi-target
  // models); throws std::invalid_argument when vocab.json lacks that token.
  std::vector<int64_t> encode_source(const std::string& text, const std::string& src_lang = "",
                                     const std::string& target_lang = "") const;
  // Target ids of `text` as the decoder reads them (as the tokenizer's text_target, without </s> and without a
  // language code): target.spm pieces through target_vocab.json / vocab.json (Marian), the folder's
  // SentencePiece pieces and id map (M2M100, NLLB); <unk> for a piece the map lacks. Throws std::invalid_argument
  // when SentencePiece fails.
  std::vector<int64_t> encode_target(const std::string& text) const;
  // Text of target ids, special tokens skipped.
  std::string decode(const std::vector<int64_t>& ids) const;
  // The token of a target id (for attention plots).
  std::string target_token(int64_t id) const;
  std::string source_token(int64_t id) const;
  // The id of a language token for forced_bos_token_id: M2M100 "fr" or "__fr__", NLLB "fra_Latn". Throws
  // std::invalid_argument naming the code and a few known ones.
  int64_t language_id(const std::string& code) const;
  bool has_languages() const { return !languages_.empty(); }
  // The codes language_id takes, one per language, sorted: M2M100 "fr"; NLLB the ISO 639-1 code of the common
  // languages ("fr" for fra_Latn; language_id takes both) and the NLLB code of the others; Marian multi-target the
  // ">>xx<<" tokens' "xx"; empty for a single-language model.
  std::vector<std::string> language_codes() const;
  int64_t unk_id() const { return unk_; }
  int64_t eos_id() const { return eos_; }
  const std::string& default_source_lang() const { return src_lang_; }
  const std::string& default_target_lang() const { return tgt_lang_; }

 private:
  TranslationTokenizer() = default;
  int64_t piece_id(const std::string& piece, bool target) const;
  std::string id_token(int64_t id, bool target) const;
  Kind kind_ = Kind::kMarian;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> src_sp_, tgt_sp_;  // tgt_sp_ null: src_sp_
  std::unordered_map<std::string, int64_t> vocab_, tgt_vocab_;               // tgt_vocab_ empty: vocab_
  std::unordered_map<int64_t, std::string> inv_, tgt_inv_;
  std::map<std::string, int64_t> languages_;  // token -> id
  std::vector<bool> special_;                 // by id (skipped when decoding)
  int64_t eos_ = 0, unk_ = 1, pad_ = -1;
  std::string src_lang_, tgt_lang_;
};

}  // namespace tfm
