/// @file tfm/source_tokenizer.h
/// The tokenizers of translation folders without their weights (`tfm tokenize` on a translation model): the
/// subwords tfm::Translator feeds its encoder, and the decoding of target ids.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tfm {

/// A sentence as tfm::Translator's encoder reads it, untruncated: [language code] pieces (or words) <eos>.
struct SourceTokens {
  std::vector<int64_t> input_ids;
  std::vector<std::string> tokens;  ///< the piece, word or special token of each id
};

/// Thread-safety: immutable after construction; every method may be called from several threads.
class SourceTokenizer {
 public:
  /// Reads the tokenizer of a translation folder, as tfm::Translator does: a Hugging Face Marian folder
  /// (source.spm, target.spm, vocab.json), M2M100 / NLLB (sentencepiece model, vocab.json, tokenizer_config.json),
  /// a subword-recipe folder (spm.model) or a d2l folder (src_vocab.txt, tgt_vocab.txt). Throws
  /// tfm::FileNotFoundError for a missing folder or file, std::invalid_argument for a folder whose config.json is
  /// not a translation model's, std::runtime_error for a malformed one.
  explicit SourceTokenizer(const std::string& model_dir);
  ~SourceTokenizer();
  SourceTokenizer(SourceTokenizer&&) noexcept;
  SourceTokenizer& operator=(SourceTokenizer&&) noexcept;

  /// Whether DIR/config.json names a translation model_type (transformer_seq2seq, marian, m2m_100, nllb).
  static bool is_translation_folder(const std::string& model_dir);

  /// The source side of `text`, as Translator::encode_source(text, options) gives its ids (before truncation to
  /// max_source_tokens()): Marian with a leading ">>lang<<" of `target_lang` for multi-target models, M2M100 /
  /// NLLB with the `source_lang` code first (default: tokenizer_config.json's src_lang); d2l folders lowercase and
  /// split punctuation, words outside the vocabulary are <unk>. Throws std::invalid_argument for invalid UTF-8 or
  /// an unknown language.
  SourceTokens encode(const std::string& text, const std::string& source_lang = "",
                      const std::string& target_lang = "") const;
  /// Target ids as text, special tokens skipped (what Translator returns for those ids). Throws
  /// std::invalid_argument for an id outside the target vocabulary.
  std::string decode(const std::vector<int64_t>& ids) const;
  /// "marian", "m2m_100", "nllb" (their config.json model_type) or "transformer_seq2seq".
  const std::string& model_type() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
