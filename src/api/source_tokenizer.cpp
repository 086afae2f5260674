// tfm::SourceTokenizer: a translation folder's tokenizer without its weights (`tfm tokenize` on Marian, M2M100,
// NLLB, subword-recipe and d2l folders). The encoding repeats tfm::Translator's (src/api/translator.cpp), before
// its truncation to the model's positions.
#include "tfm/source_tokenizer.h"

#include <filesystem>
#include <stdexcept>

#include "api/common.h"
#include "io/json_util.h"
#include "models/hf_seq2seq.h"
#include "models/registry.h"
#include "models/seq2seq.h"
#include "text/nmt_data.h"
#include "text/subword.h"
#include "text/translation_tokenizer.h"
#include "text/vocab.h"
#include "tfm/translator.h"

namespace tfm {

struct SourceTokenizer::Impl {
  std::string model_type;
  std::unique_ptr<TranslationTokenizer> hf;  // Marian / M2M100 / NLLB, or
  std::unique_ptr<SubwordModel> spm;         // the subword recipe's joint SentencePiece model, or
  std::unique_ptr<Vocab> src, tgt;           // d2l word vocabularies
};

bool SourceTokenizer::is_translation_folder(const std::string& model_dir) {
  std::error_code ec;
  const std::string cp = model_dir + "/config.json";
  if (!std::filesystem::is_regular_file(cp, ec)) return false;
  try {
    const nlohmann::json j = load_json_file(cp);
    const ModelFamily* f = find_family(read_model_type(j, cp, default_model_type(j)));
    return f && f->translation;
  } catch (const std::exception&) {
    return false;
  }
}

SourceTokenizer::SourceTokenizer(const std::string& model) : impl_(std::make_unique<Impl>()) {
  namespace fs = std::filesystem;
  const std::string dir = api::model_folder(model);
  api::require_dir(dir, "model folder");
  const std::string cp = dir + "/config.json";
  api::require_file(cp);
  const nlohmann::json j = load_json_file(cp);
  const std::string type = read_model_type(j, cp, default_model_type(j));
  if (!family_of(type, cp).translation)
    throw std::invalid_argument(cp + ": model_type '" + type + "' is not a translation model");
  impl_->model_type = type;
  if (is_hf_seq2seq_type(type)) {
    impl_->hf = TranslationTokenizer::load(dir, type);
    return;
  }
  std::error_code ec;
  if (fs::exists(dir + "/spm.model", ec) || json_string_or(j, "tokenizer", "", cp) == "sentencepiece") {
    api::require_file(dir + "/spm.model");
    impl_->spm = std::make_unique<SubwordModel>(SubwordModel::load(dir + "/spm.model"));
    return;
  }
  api::require_file(dir + "/src_vocab.txt");
  api::require_file(dir + "/tgt_vocab.txt");
  impl_->src = std::make_unique<Vocab>(Vocab::load(dir + "/src_vocab.txt"));
  impl_->tgt = std::make_unique<Vocab>(Vocab::load(dir + "/tgt_vocab.txt"));
}
SourceTokenizer::~SourceTokenizer() = default;
SourceTokenizer::SourceTokenizer(SourceTokenizer&&) noexcept = default;
SourceTokenizer& SourceTokenizer::operator=(SourceTokenizer&&) noexcept = default;

const std::string& SourceTokenizer::model_type() const { return impl_->model_type; }

SourceTokens SourceTokenizer::encode(const std::string& text0, const std::string& source_lang,
                                     const std::string& target_lang) const {
  // As Translator: trailing spaces and line breaks dropped.
  std::string text = text0;
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' || text.back() == '\t'))
    text.pop_back();
  SourceTokens t;
  if (impl_->hf) {
    const bool marian = impl_->hf->kind() == TranslationTokenizer::Kind::kMarian;
    if (marian && !source_lang.empty())
      throw std::invalid_argument("source_lang '" + source_lang + "': a Marian folder translates from the one "
                                  "source language it was trained on and takes no source language");
    t.input_ids = impl_->hf->encode_source(text, source_lang, marian ? target_lang : "");
    for (int64_t id : t.input_ids) t.tokens.push_back(impl_->hf->source_token(id));
    return t;
  }
  if (!source_lang.empty() || !target_lang.empty())
    throw std::invalid_argument("source and target languages apply to Hugging Face translation folders (Marian, "
                                "M2M100, NLLB) only");
  if (impl_->spm) {
    t.input_ids = impl_->spm->encode(text);
    t.input_ids.push_back(impl_->spm->eos_id());
    for (int64_t id : t.input_ids) t.tokens.push_back(impl_->spm->id_to_piece(id));
    return t;
  }
  const std::string pre = preprocess_nmt(text);
  for (size_t p = 0, q; p <= pre.size(); p = q + 1) {
    q = pre.find(' ', p);
    if (q == std::string::npos) q = pre.size();
    if (q == p) continue;
    const std::string w = pre.substr(p, q - p);
    const int64_t id = (*impl_->src)[w];  // <unk> for a word outside the vocabulary
    t.input_ids.push_back(id);
    t.tokens.push_back(impl_->src->to_token(id));
  }
  t.input_ids.push_back((*impl_->src)["<eos>"]);
  t.tokens.push_back("<eos>");
  return t;
}

std::string SourceTokenizer::decode(const std::vector<int64_t>& ids) const {
  if (impl_->hf) return impl_->hf->decode(ids);
  if (impl_->spm) {
    for (int64_t id : ids)
      if (id < 0 || id >= impl_->spm->vocab_size())
        throw std::invalid_argument("id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                    std::to_string(impl_->spm->vocab_size()) + ")");
    return impl_->spm->decode(ids);
  }
  std::string line;
  for (int64_t id : ids) {
    if (id < 0 || id >= impl_->tgt->size())
      throw std::invalid_argument("id " + std::to_string(id) + " is outside the target vocabulary [0, " +
                                  std::to_string(impl_->tgt->size()) + ")");
    const std::string& w = impl_->tgt->to_token(id);
    if (w == "<pad>" || w == "<bos>" || w == "<eos>") continue;
    line += (line.empty() ? "" : " ") + w;
  }
  return line;
}

}  // namespace tfm
