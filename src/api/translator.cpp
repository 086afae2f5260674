// tfm::Translator over models/seq2seq and decode/search: the same preprocessing, batching and decoding as
// `tfm translate` (tools/tfm/cmd_translate.cpp).
#include "tfm/translator.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#include "api/common.h"
#include "decode/search.h"
#include "io/json_util.h"
#include "models/seq2seq.h"
#include "ops/gemm.h"
#include "text/nmt_data.h"
#include "text/subword.h"
#include "text/text_file.h"
#include "text/vocab.h"

namespace tfm {

struct Translator::Impl {
  std::unique_ptr<Seq2SeqModel> model;
  std::unique_ptr<SubwordModel> spm;        // joint SentencePiece model, or
  std::unique_ptr<Vocab> src_vocab, tgt_vocab;  // d2l word vocabularies
  int threads = 0;
  std::string dtype;
  std::mutex mu;  // Seq2SeqModel keeps decoding scratch: one call at a time

  bool subword() const { return spm != nullptr; }
  int64_t bos() const { return subword() ? spm->bos_id() : (*tgt_vocab)["<bos>"]; }
  int64_t eos() const { return subword() ? spm->eos_id() : (*tgt_vocab)["<eos>"]; }
  int64_t pad() const { return subword() ? spm->pad_id() : (*src_vocab)["<pad>"]; }
  // d2l word models pad every source to num_steps, as predict_seq2seq does (the padding is masked).
  int64_t padded_len(int64_t n) const { return subword() ? n : std::max<int64_t>(n, model->config().num_steps); }
};

Translator::Translator(const std::string& dir, const TranslatorOptions& options) : impl_(std::make_unique<Impl>()) {
  namespace fs = std::filesystem;
  const ops::ComputeType ct = ops::parse_compute_type(options.dtype);
  api::check_threads(options.threads);
  api::require_dir(dir, "model folder");
  api::require_file(dir + "/config.json");
  api::require_file(dir + "/model.safetensors");
  impl_->threads = options.threads;
  const std::string config_path = dir + "/config.json";
  const nlohmann::json j = load_json_file(config_path);
  impl_->model = std::make_unique<Seq2SeqModel>(Seq2SeqConfig::from_json(j, config_path));
  const Seq2SeqConfig& c = impl_->model->config();
  std::error_code ec;
  const bool subword =
      fs::exists(dir + "/spm.model", ec) || json_string_or(j, "tokenizer", "", config_path) == "sentencepiece";
  if (subword) {
    api::require_file(dir + "/spm.model");
    impl_->spm = std::make_unique<SubwordModel>(SubwordModel::load(dir + "/spm.model"));
    if (impl_->spm->vocab_size() != c.src_vocab_size || impl_->spm->vocab_size() != c.tgt_vocab_size)
      throw std::runtime_error(dir + ": spm.model has " + std::to_string(impl_->spm->vocab_size()) +
                               " pieces but config.json says src_vocab_size " + std::to_string(c.src_vocab_size) +
                               ", tgt_vocab_size " + std::to_string(c.tgt_vocab_size));
  } else {
    api::require_file(dir + "/src_vocab.txt");
    api::require_file(dir + "/tgt_vocab.txt");
    impl_->src_vocab = std::make_unique<Vocab>(Vocab::load(dir + "/src_vocab.txt"));
    impl_->tgt_vocab = std::make_unique<Vocab>(Vocab::load(dir + "/tgt_vocab.txt"));
    if (impl_->src_vocab->size() != c.src_vocab_size || impl_->tgt_vocab->size() != c.tgt_vocab_size)
      throw std::runtime_error(dir + ": vocabulary files have " + std::to_string(impl_->src_vocab->size()) + " / " +
                               std::to_string(impl_->tgt_vocab->size()) +
                               " tokens but config.json says src_vocab_size " + std::to_string(c.src_vocab_size) +
                               ", tgt_vocab_size " + std::to_string(c.tgt_vocab_size));
  }
  impl_->model->load(dir + "/model.safetensors");
  impl_->model->prepare_inference(ct);  // as `tfm translate --dtype` does
  impl_->dtype = ops::compute_type_name(ct);
}
Translator::~Translator() = default;
Translator::Translator(Translator&&) noexcept = default;
Translator& Translator::operator=(Translator&&) noexcept = default;

int64_t Translator::num_steps() const { return impl_->model->config().num_steps; }
bool Translator::subword() const { return impl_->subword(); }
const std::string& Translator::dtype() const { return impl_->dtype; }

std::vector<Translation> Translator::translate_batch(const std::vector<std::string>& sentences,
                                                     const TranslateOptions& o) const {
  Impl& I = *impl_;
  const Seq2SeqConfig& c = I.model->config();
  if (o.beam_size < 1 || o.beam_size > 64)
    throw std::invalid_argument("beam_size must be from 1 to 64, got " + std::to_string(o.beam_size));
  if (!std::isfinite(o.length_penalty) || o.length_penalty < 0)
    throw std::invalid_argument("length_penalty must be a finite number >= 0, got " + std::to_string(o.length_penalty));
  // As `tfm translate --length-penalty` without --beam: greedy decoding ignores it, only scores would show it.
  if (o.length_penalty != 0 && o.beam_size == 1 && !o.return_scores)
    throw std::invalid_argument("length_penalty applies to beam search (or the returned scores) only; give "
                                "beam_size > 1 or return_scores as well");
  if (o.max_steps < 0 || o.max_steps > c.max_len)
    throw std::invalid_argument("max_steps must be from 0 (the model's num_steps) to the model's max_len " +
                                std::to_string(c.max_len) + ", got " + std::to_string(o.max_steps));
  DecodeOptions opt;
  opt.beam_size = o.beam_size;
  opt.length_penalty = o.length_penalty;
  opt.max_steps = o.max_steps > 0 ? o.max_steps : c.num_steps;
  opt.bos_id = I.bos();
  opt.eos_id = I.eos();
  if (o.disable_unk) opt.suppress_id = I.subword() ? I.spm->unk_id() : (*I.tgt_vocab)["<unk>"];
  opt.position_mode = c.decode_positions == "absolute" ? PositionMode::kAbsolute : PositionMode::kD2lStep;

  // Source ids (with <eos>) of every non-empty sentence, as the CLI builds them.
  std::vector<std::vector<int64_t>> src(sentences.size());
  std::vector<size_t> todo;
  for (size_t i = 0; i < sentences.size(); ++i) {
    std::string text = sentences[i];
    if (auto bad = find_invalid_utf8(text))
      throw std::invalid_argument("sentence " + std::to_string(i + 1) + ": invalid UTF-8 at byte offset " +
                                  std::to_string(*bad));
    while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t' || text.back() == '\n'))
      text.pop_back();
    if (text.empty()) continue;
    todo.push_back(i);
    if (I.subword()) {
      src[i] = I.spm->encode(text);
      const int64_t limit = std::min<int64_t>(c.max_len, 1024) - 1;
      if ((int64_t)src[i].size() > limit) src[i].resize(limit);
      src[i].push_back(I.spm->eos_id());
    } else {
      EncodedSource s = encode_source_sentence(preprocess_nmt(text), *I.src_vocab, c.num_steps);
      src[i].assign(s.ids.begin(), s.ids.begin() + s.valid_len);
    }
  }

  std::vector<Translation> out(sentences.size());
  std::lock_guard<std::mutex> lock(I.mu);
  api::apply_threads(I.threads);
  // Batches of similar length; greedy, or beam search with finished sentences leaving the batch.
  std::vector<size_t> order = todo;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return src[a].size() < src[b].size(); });
  const size_t batch = o.beam_size > 1 ? 32 : 64;
  for (size_t s = 0; s < order.size(); s += batch) {
    const size_t n = std::min(batch, order.size() - s);
    int64_t Ls = 0;
    for (size_t k = 0; k < n; ++k) Ls = std::max<int64_t>(Ls, I.padded_len((int64_t)src[order[s + k]].size()));
    std::vector<int64_t> ids(n * Ls, I.pad()), vl(n);
    for (size_t k = 0; k < n; ++k) {
      const auto& v = src[order[s + k]];
      std::copy(v.begin(), v.end(), ids.begin() + k * Ls);
      vl[k] = (int64_t)v.size();
    }
    if (o.beam_size == 1 && !o.return_scores) {
      auto res = greedy_decode(*I.model, ids.data(), vl.data(), (int64_t)n, Ls, opt);
      for (size_t k = 0; k < n; ++k) {
        Translation& t = out[order[s + k]];
        t.ids = std::move(res[k]);
        // Decoding stops at <eos> or after max_steps tokens (<eos> counted): a shorter output ended with <eos>.
        t.finished = (int64_t)t.ids.size() < opt.max_steps;
      }
      continue;
    }
    // Beam search (beam_size 1 is greedy decoding) returns each hypothesis with its logp and ranking score.
    auto res = beam_search_hypotheses(*I.model, ids.data(), vl.data(), (int64_t)n, Ls, opt);
    for (size_t k = 0; k < n; ++k) {
      Translation& t = out[order[s + k]];
      Hypothesis& best = res[k].front();
      t.ids = std::move(best.tokens);
      t.finished = best.finished;
      if (o.return_scores) t.logp = best.logp, t.score = best.score;
    }
  }
  for (Translation& t : out) {
    if (I.subword()) {
      t.text = I.spm->decode(t.ids);
    } else {
      for (size_t k = 0; k < t.ids.size(); ++k) t.text += (k ? " " : "") + I.tgt_vocab->to_token(t.ids[k]);
    }
  }
  return out;
}

}  // namespace tfm
