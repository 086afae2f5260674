/// @file tfm/language_id.h
/// Language identification trained on the user's own corpora (no pretrained model): a character n-gram naive Bayes
/// (text/language_id.h) behind `tfm langid train / detect` and `tfm serve --langid` (LibreTranslate's /detect and
/// `source: "auto"`).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tfm {

/// One language's training text: its code as the served models name it ("en", "fr") and its sentences.
struct LanguageSample {
  std::string language;
  std::vector<std::string> lines;  ///< UTF-8, one sentence a line
};

struct LanguageIdOptions {
  int max_order = 4;           ///< character n-grams of orders 1..max_order (1..8)
  int64_t max_ngrams = 20000;  ///< kept per language: its most frequent n-grams (the file's size grows with it)
  double alpha = 0.5;          ///< additive smoothing of each order's distribution (> 0)
};

/// A detected language: its code and the confidence in it, in [0, 1] (the guesses of one text sum to 1).
struct DetectedLanguage {
  std::string language;
  double confidence = 0;
};

/// Thread-safety: immutable after construction; detect may be called from several threads at once.
class LanguageIdentifier {
 public:
  /// Trains on `samples` (two languages or more). Throws std::invalid_argument for fewer than two languages, a
  /// repeated or empty code, a language without a letter in its text, or options out of range.
  static LanguageIdentifier train(const std::vector<LanguageSample>& samples, const LanguageIdOptions& options = {});
  /// Loads a file `save` wrote. Throws tfm::FileNotFoundError "<path>: no such file", std::runtime_error naming the
  /// path for a malformed file.
  static LanguageIdentifier load(const std::string& path);
  /// Writes the identifier as JSON (atomically). Throws std::runtime_error naming the path when it cannot.
  void save(const std::string& path) const;

  ~LanguageIdentifier();
  LanguageIdentifier(LanguageIdentifier&&) noexcept;
  LanguageIdentifier& operator=(LanguageIdentifier&&) noexcept;

  /// The codes it tells apart, in training order.
  std::vector<std::string> languages() const;
  /// Every candidate language of `text` with its confidence, best first: among `among` (empty: all; codes the
  /// identifier does not know are left out, so the result may be empty). A text without a letter, or without one
  /// n-gram seen in training, gets equal confidences and `*evidence` 0 (the n-grams of the text it knew).
  std::vector<DetectedLanguage> detect(const std::string& text, const std::vector<std::string>& among = {},
                                       int64_t* evidence = nullptr) const;

 private:
  struct Impl;
  explicit LanguageIdentifier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
