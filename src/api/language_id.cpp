// tfm::LanguageIdentifier over text/language_id (the character n-gram naive Bayes).
#include "tfm/language_id.h"

#include "api/common.h"
#include "text/language_id.h"

namespace tfm {

struct LanguageIdentifier::Impl {
  CharNgramLanguageId model;
};

LanguageIdentifier::LanguageIdentifier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LanguageIdentifier::~LanguageIdentifier() = default;
LanguageIdentifier::LanguageIdentifier(LanguageIdentifier&&) noexcept = default;
LanguageIdentifier& LanguageIdentifier::operator=(LanguageIdentifier&&) noexcept = default;

LanguageIdentifier LanguageIdentifier::train(const std::vector<LanguageSample>& samples, const LanguageIdOptions& o) {
  std::vector<LanguageCorpus> corpora;
  corpora.reserve(samples.size());
  for (const LanguageSample& s : samples) corpora.push_back({s.language, s.lines});
  LanguageIdTrainOptions t;
  t.max_order = o.max_order, t.max_ngrams = o.max_ngrams, t.alpha = o.alpha;
  auto impl = std::make_unique<Impl>();
  impl->model = CharNgramLanguageId::train(corpora, t);
  return LanguageIdentifier(std::move(impl));
}

LanguageIdentifier LanguageIdentifier::load(const std::string& path) {
  api::require_file(path);
  auto impl = std::make_unique<Impl>();
  impl->model = CharNgramLanguageId::load(path);
  return LanguageIdentifier(std::move(impl));
}

void LanguageIdentifier::save(const std::string& path) const { impl_->model.save(path); }

std::vector<std::string> LanguageIdentifier::languages() const { return impl_->model.languages(); }

std::vector<DetectedLanguage> LanguageIdentifier::detect(const std::string& text, const std::vector<std::string>& among,
                                                         int64_t* evidence) const {
  std::vector<DetectedLanguage> out;
  for (const LanguageGuess& g : impl_->model.detect(text, among, evidence)) out.push_back({g.language, g.confidence});
  return out;
}

}  // namespace tfm
