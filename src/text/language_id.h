// Language identification by character n-grams: a multinomial naive Bayes over the 1..max_order-grams of each
// word (lowercased letters, padded with a space on each side: " the " gives "t", "h", "e", " t", "th", ...,
// "the "), as Cavnar & Trenkle's n-gram profiles and langid.py's byte n-grams are used. It is trained on the
// user's own corpora (one sentence a line per language), so it needs no pretrained model: `tfm langid train`
// writes the counts as JSON, `tfm serve --langid` answers LibreTranslate's /detect and `source: "auto"` with it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tfm {

struct LanguageIdTrainOptions {
  int max_order = 4;             // n-gram orders 1..max_order (code points, word-boundary spaces included)
  int64_t max_ngrams = 20000;    // per language: its most frequent n-grams are kept (all orders together)
  double alpha = 0.5;            // additive smoothing of each order's n-gram distribution
};

// One language's training text.
struct LanguageCorpus {
  std::string language;            // its code as the served models name it ("en", "fr")
  std::vector<std::string> lines;  // UTF-8 text, one sentence a line
};

// A language and the identifier's confidence in it.
struct LanguageGuess {
  std::string language;
  double confidence = 0;  // in [0, 1]; the guesses of one text sum to 1
};

class CharNgramLanguageId {
 public:
  CharNgramLanguageId() = default;

  // Counts every corpus's n-grams. Throws std::invalid_argument for fewer than two languages, an empty or
  // repeated language code, a corpus without one letter, or options out of range (max_order 1..8,
  // max_ngrams >= 1, alpha > 0).
  static CharNgramLanguageId train(const std::vector<LanguageCorpus>& corpora,
                                   const LanguageIdTrainOptions& options = {});

  // The JSON file `save` writes. Throws std::runtime_error naming the path for an unreadable or malformed file.
  static CharNgramLanguageId load(const std::string& path);
  // Writes the model as JSON, atomically: {"format": "tfm-language-id", "version": 1, "max_order", "alpha",
  // "languages": [...], "totals": {code: [n-grams of order 1, 2, ...]}, "ngrams": {ngram: [count per language]}}.
  void save(const std::string& path) const;

  const std::vector<std::string>& languages() const { return languages_; }
  int max_order() const { return max_order_; }

  // Scores `text` against the languages in `among` (empty: every language; codes the model lacks are skipped),
  // best first. Confidence: the softmax of each language's log-likelihood divided by max_order (the orders of one
  // position are not independent evidence). A text with no known n-gram gets equal confidences and
  // `evidence` 0. Invalid UTF-8 is read as separators.
  std::vector<LanguageGuess> detect(std::string_view text, const std::vector<std::string>& among = {},
                                    int64_t* evidence = nullptr) const;

  // The n-grams of `text` (as detect and train see them), in order: exposed for tests.
  static std::vector<std::string> ngrams(std::string_view text, int max_order);

 private:
  void build_scores();

  int max_order_ = 4;
  double alpha_ = 0.5;
  std::vector<std::string> languages_;
  std::vector<std::vector<int64_t>> totals_;  // [language][order - 1] n-grams counted in training
  std::unordered_map<std::string, std::vector<int64_t>> counts_;  // n-gram -> [language] count
  // What detect reads: n-gram -> row of log P(ngram | language) in scores_ ([row, language]).
  std::unordered_map<std::string, int64_t> rows_;
  std::vector<float> scores_;
};

}  // namespace tfm
