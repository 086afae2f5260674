// tfm::Translator over models/seq2seq and decode/search: the same preprocessing, batching and decoding as
// `tfm translate` (tools/tfm/cmd_translate.cpp).
#include "tfm/translator.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>

#include "api/common.h"
#include "tfm/pipeline.h"
#include "decode/decoder_cache.h"
#include "decode/generation_config.h"
#include "decode/logits_process.h"
#include "decode/search.h"
#include "io/json_util.h"
#include "models/hf_seq2seq.h"
#include "models/registry.h"
#include "models/seq2seq.h"
#include "ops/gemm.h"
#include "text/nmt_data.h"
#include "text/subword.h"
#include "text/translation_tokenizer.h"
#include "io/text_file.h"
#include "text/vocab.h"

namespace tfm {

namespace {
// Translator::check_length_penalty, for Impl's option checks too.
void check_length_penalty_rule(bool hf, float lp, int64_t beam_size, bool return_scores, bool cli) {
  if (std::isnan(lp)) return;  // the model's default
  const std::string name = cli ? "--length-penalty" : "length_penalty";
  if (hf) {
    if (!std::isfinite(lp)) throw std::invalid_argument(name + " must be a finite number, got " + std::to_string(lp));
    return;
  }
  if (!std::isfinite(lp) || lp < 0)
    throw std::invalid_argument(name + " must be a finite number >= 0 (the GNMT alpha), got " + std::to_string(lp));
  // Greedy decoding ignores it; only beam search, or the returned scores, would show it.
  if (lp != 0 && beam_size <= 1 && !return_scores)
    throw std::invalid_argument(name + " applies to beam search only (or the returned scores); give " +
                                (cli ? "--beam N (N > 1) or --scores" : "beam_size > 1 or return_scores") +
                                " as well");
}
}  // namespace

struct Translator::Impl {
  std::unique_ptr<Seq2SeqModel> model;
  std::unique_ptr<SubwordModel> spm;        // joint SentencePiece model, or
  std::unique_ptr<Vocab> src_vocab, tgt_vocab;  // d2l word vocabularies
  std::unique_ptr<TranslationTokenizer> hf_tok;  // Hugging Face folders: their tokenizer and generation defaults
  std::unique_ptr<GenerationConfig> gen;
  std::string model_type = "transformer_seq2seq";
  int threads = 0;
  std::string dtype;
  std::mutex mu;  // Seq2SeqModel keeps decoding scratch: one call at a time

  bool hf() const { return hf_tok != nullptr; }
  bool subword() const { return spm != nullptr || hf(); }
  int64_t bos() const {
    return hf() ? gen->decoder_start_token_id : spm ? spm->bos_id() : (*tgt_vocab)["<bos>"];
  }
  int64_t eos() const { return hf() ? gen->eos_token_id : spm ? spm->eos_id() : (*tgt_vocab)["<eos>"]; }
  int64_t pad() const {
    return hf() ? model->config().pad_token_id : spm ? spm->pad_id() : (*src_vocab)["<pad>"];
  }
  // d2l word models pad every source to num_steps, as predict_seq2seq does (the padding is masked).
  int64_t padded_len(int64_t n) const { return subword() ? n : std::max<int64_t>(n, model->config().num_steps); }
  int64_t max_source_tokens() const {
    const Seq2SeqConfig& c = model->config();
    return hf() ? c.max_len : subword() ? std::min<int64_t>(c.max_len, 1024) : c.num_steps;
  }
  std::string source_token(int64_t id) const {
    return hf() ? hf_tok->source_token(id) : spm ? spm->id_to_piece(id) : src_vocab->to_token(id);
  }
  std::string target_token(int64_t id) const {
    return hf() ? hf_tok->target_token(id) : spm ? spm->id_to_piece(id) : tgt_vocab->to_token(id);
  }
  std::string detokenize(const std::vector<int64_t>& ids) const {
    if (hf()) return hf_tok->decode(ids);
    if (spm) return spm->decode(ids);
    std::string line;
    for (size_t k = 0; k < ids.size(); ++k) line += (k ? " " : "") + tgt_vocab->to_token(ids[k]);
    return line;
  }

  // `text`: trailing spaces removed, not empty, valid UTF-8. o: the languages of Hugging Face folders.
  SourceEncoding encode(const std::string& text, const TranslateOptions* o = nullptr) const {
    SourceEncoding e;
    const int64_t limit = max_source_tokens();
    if (hf()) {  // [language code] pieces </s>: the pieces cut so that the whole fits
      const bool marian = hf_tok->kind() == TranslationTokenizer::Kind::kMarian;
      e.ids = hf_tok->encode_source(text, o ? o->source_lang : "", o && marian ? o->target_lang : "");
      e.full_length = (int64_t)e.ids.size();
      if (e.full_length > limit) {
        const int64_t last = e.ids.back();
        e.ids.resize(limit - 1);
        e.ids.push_back(last);
      }
      return e;
    }
    if (subword()) {
      e.ids = spm->encode(text);
      e.full_length = (int64_t)e.ids.size() + 1;
      if ((int64_t)e.ids.size() > limit - 1) e.ids.resize(limit - 1);
      e.ids.push_back(spm->eos_id());
      return e;
    }
    const std::string pre = preprocess_nmt(text);
    EncodedSource s = encode_source_sentence(pre, *src_vocab, model->config().num_steps);
    e.ids.assign(s.ids.begin(), s.ids.begin() + s.valid_len);
    e.full_length = (int64_t)std::count(pre.begin(), pre.end(), ' ') + 2;  // words (split on ' ') + <eos>
    for (size_t p = 0, q; p <= pre.size(); p = q + 1) {
      q = pre.find(' ', p);
      if (q == std::string::npos) q = pre.size();
      std::string w = pre.substr(p, q - p);
      if (!w.empty() && !src_vocab->contains(w)) e.unknown_words.push_back(w);
    }
    return e;
  }

  // Target text as the decoder reads it (no <eos>): SentencePiece pieces, or d2l-preprocessed words (<unk> for
  // words outside the target vocabulary).
  std::vector<int64_t> encode_target(const std::string& text) const {
    if (hf()) return hf_tok->encode_target(text);
    if (subword()) return spm->encode(text);
    const std::string pre = preprocess_nmt(text);
    std::vector<int64_t> ids;
    for (size_t p = 0, q; p <= pre.size(); p = q + 1) {
      q = pre.find(' ', p);
      if (q == std::string::npos) q = pre.size();
      if (q > p) ids.push_back((*tgt_vocab)[pre.substr(p, q - p)]);
    }
    return ids;
  }

  // n-best lists come from the beam (at most beam_size); samples are drawn, up to 64 of a sentence.
  static void check_num_hypotheses(int64_t n, int64_t beam_size, bool sampling) {
    if (sampling && (n < 1 || n > 64))
      throw std::invalid_argument("num_hypotheses must be from 1 to 64 samples, got " + std::to_string(n));
    if (!sampling && (n < 1 || n > beam_size))
      throw std::invalid_argument("num_hypotheses must be from 1 to beam_size (" + std::to_string(beam_size) +
                                  "), got " + std::to_string(n) + " (or sample: sampling_topk != 1)");
  }

  // The HF processors and sampling of `o` (Hugging Face folders: with generation_config.json's); nullptr when
  // none is on.
  std::unique_ptr<LogitsProcessor> logits_processor(const TranslateOptions& o) const {
    const bool sample = o.sampling_topk != 1;
    if (o.sampling_topk < 0)
      throw std::invalid_argument("sampling_topk must be >= 0 (0 = whole vocabulary, 1 = greedy), got " +
                                  std::to_string(o.sampling_topk));
    if (hf()) {
      const GenerationConfig g = hf_generation(o);
      auto proc = std::make_unique<LogitsProcessor>(g.processor_options(o.seed), model->config().tgt_vocab_size);
      if (!g.do_sample && !proc->has_processors()) return nullptr;
      return proc;
    }
    if (sample && o.beam_size > 1)
      throw std::invalid_argument("random sampling (sampling_topk " + std::to_string(o.sampling_topk) +
                                  ") needs beam_size 1, got " + std::to_string(o.beam_size));
    LogitsProcessorOptions p;
    p.repetition_penalty = o.repetition_penalty;
    p.no_repeat_ngram_size = o.no_repeat_ngram_size;
    p.bad_words_ids = o.bad_words_ids;
    p.min_length = o.min_length;
    p.eos_id = eos();
    p.do_sample = sample;
    p.top_k = o.sampling_topk;
    p.top_p = o.sampling_topp;
    p.temperature = o.sampling_temperature;
    p.seed = o.seed;
    auto proc = std::make_unique<LogitsProcessor>(p, model->config().tgt_vocab_size);  // validates every option
    if (!sample && !proc->has_processors()) return nullptr;
    return proc;
  }

  // Hugging Face folders: generation_config.json with the options given (transformers' keys: num_beams,
  // length_penalty, max_new_tokens, early_stopping, min_length, forced_bos_token_id, repetition_penalty,
  // no_repeat_ngram_size, bad_words_ids (appended to the folder's), do_sample / top_k / top_p / temperature).
  GenerationConfig hf_generation(const TranslateOptions& o) const {
    const Seq2SeqConfig& c = model->config();
    nlohmann::json over = nlohmann::json::object();
    if (o.beam_size < 0 || o.beam_size > 64)
      throw std::invalid_argument("beam_size must be from 1 to 64 (0: the model's), got " +
                                  std::to_string(o.beam_size));
    if (o.beam_size > 0) over["num_beams"] = o.beam_size;
    // Sampling (CTranslate2's sampling_topk != 1) is transformers' do_sample with top_k (0 = all tokens), on
    // greedy search: the folder's num_beams does not apply unless beam_size is given (then it is refused below).
    if (o.sampling_topk != 1) {
      over["do_sample"] = true;
      over["top_k"] = o.sampling_topk;
      if (o.beam_size == 0) over["num_beams"] = 1;
    }
    if (o.sampling_topp != 1.0f) over["top_p"] = o.sampling_topp;
    if (o.sampling_temperature != 1.0f) over["temperature"] = o.sampling_temperature;
    if (o.repetition_penalty != 1.0f) over["repetition_penalty"] = o.repetition_penalty;
    if (o.no_repeat_ngram_size != 0) over["no_repeat_ngram_size"] = o.no_repeat_ngram_size;
    if (!o.bad_words_ids.empty()) {
      std::vector<std::vector<int64_t>> bad = gen->bad_words_ids;
      bad.insert(bad.end(), o.bad_words_ids.begin(), o.bad_words_ids.end());
      over["bad_words_ids"] = bad;
    }
    check_length_penalty_rule(true, o.length_penalty, o.beam_size, o.return_scores, false);
    if (!std::isnan(o.length_penalty)) over["length_penalty"] = o.length_penalty;
    if (o.max_steps < 0 || o.max_steps > c.max_len)
      throw std::invalid_argument("max_new_tokens (max_steps, --max-steps) must be from 0 (the model's) to "
                                  "max_position_embeddings " + std::to_string(c.max_len) + ", got " +
                                  std::to_string(o.max_steps));
    if (o.max_steps > 0) over["max_new_tokens"] = o.max_steps;
    if (!o.early_stopping.empty()) {
      if (o.early_stopping == "true" || o.early_stopping == "false")
        over["early_stopping"] = o.early_stopping == "true";
      else if (o.early_stopping == "never")
        over["early_stopping"] = "never";
      else
        throw std::invalid_argument("early_stopping must be true, false or never, got '" + o.early_stopping + "'");
    }
    if (o.min_length > 0) over["min_length"] = o.min_length;
    if (o.forced_eos < -1 || o.forced_eos > 1)
      throw std::invalid_argument("forced_eos must be -1 (the model's), 0 or 1, got " + std::to_string(o.forced_eos));
    if (o.forced_eos == 0) over["forced_eos_token_id"] = nullptr;
    if (o.forced_eos == 1) over["forced_eos_token_id"] = gen->eos_token_id;
    if (hf_tok->kind() != TranslationTokenizer::Kind::kMarian) {
      const std::string lang = o.target_lang.empty() ? hf_tok->default_target_lang() : o.target_lang;
      if (!lang.empty()) over["forced_bos_token_id"] = hf_tok->language_id(lang);
      else if (gen->forced_bos_token_id < 0)
        throw std::invalid_argument("no target language: give target_lang (--target-lang), e.g. fr or fra_Latn");
    }
    GenerationConfig g;
    try {
      g = GenerationConfig::from_json(gen->raw, over, "options");
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(e.what());
    }
    if (g.do_sample && g.num_beams > 1)
      throw std::invalid_argument("random sampling (sampling_topk " + std::to_string(o.sampling_topk) +
                                  ") needs beam_size 1, got " + std::to_string(g.num_beams));
    check_num_hypotheses(o.num_hypotheses, g.num_beams, g.do_sample);
    return g;
  }

  DecodeOptions hf_decode_options(const TranslateOptions& o) const {
    const Seq2SeqConfig& c = model->config();
    DecodeOptions opt = hf_generation(o).decode_options();
    // Positions exist for max_position_embeddings tokens (the decoder start included).
    opt.max_steps = std::min<int64_t>(opt.max_steps, c.max_len);
    if (o.disable_unk) opt.banned_ids.push_back(hf_tok->unk_id());
    return opt;
  }

  DecodeOptions decode_options(const TranslateOptions& o0) const {
    // min_length counts the decoder input (start token + output), which has at most max_len positions: above
    // that <eos> could never be generated.
    if (o0.min_length > model->config().max_len)
      throw std::invalid_argument("min_length " + std::to_string(o0.min_length) + " is more than the model's " +
                                  std::to_string(model->config().max_len) +
                                  " decoder positions (max_position_embeddings), so no translation could end; use "
                                  "at most " + std::to_string(model->config().max_len));
    if (hf() && hf_tok->kind() == TranslationTokenizer::Kind::kMarian && !o0.source_lang.empty())
      throw std::invalid_argument("source_lang '" + o0.source_lang + "': a Marian folder translates from the one "
                                  "source language it was trained on and takes no source language (target_lang "
                                  "picks the target of a multi-target model)");
    if (hf()) return hf_decode_options(o0);
    if (!o0.target_lang.empty() || !o0.source_lang.empty() || !o0.early_stopping.empty() || o0.forced_eos != -1)
      throw std::invalid_argument("target_lang, source_lang, early_stopping and forced_eos apply to Hugging Face "
                                  "translation folders (Marian, M2M100, NLLB) only");
    TranslateOptions o = o0;
    if (o.beam_size == 0) o.beam_size = 1;
    if (std::isnan(o.length_penalty)) o.length_penalty = 0.0f;
    if (o.beam_size < 1 || o.beam_size > 64)
      throw std::invalid_argument("beam_size must be from 1 to 64, got " + std::to_string(o.beam_size));
    check_num_hypotheses(o.num_hypotheses, o.beam_size, o.sampling_topk != 1);
    const Seq2SeqConfig& c = model->config();
    check_length_penalty_rule(false, o.length_penalty, o.beam_size, o.return_scores, false);
    if (o.max_steps < 0 || o.max_steps > c.max_len)
      throw std::invalid_argument("max_new_tokens (max_steps, --max-steps) must be from 0 (the model's num_steps) "
                                  "to the model's max_len " + std::to_string(c.max_len) + ", got " +
                                  std::to_string(o.max_steps));
    DecodeOptions opt;
    opt.beam_size = o.beam_size;
    opt.length_penalty = o.length_penalty;
    opt.max_steps = o.max_steps > 0 ? o.max_steps : c.num_steps;
    opt.bos_id = bos();
    opt.eos_id = eos();
    if (o.disable_unk) opt.suppress_id = subword() ? spm->unk_id() : (*tgt_vocab)["<unk>"];
    opt.position_mode = c.decode_positions == "absolute" ? PositionMode::kAbsolute : PositionMode::kD2lStep;
    return opt;
  }

  // One sentence's target prefix ids (sentence i, 0-based, in messages). M2M100 / NLLB: the target language token
  // (`forced_bos`, the decoder's first token) before a non-empty prefix, as their labels start with it.
  std::vector<int64_t> target_prefix(const std::string& text, size_t i, int64_t forced_bos = -1) const {
    if (auto bad = find_invalid_utf8(text))
      throw std::invalid_argument("target_prefix " + std::to_string(i + 1) + ": invalid UTF-8 at byte offset " +
                                  std::to_string(*bad));
    std::string t = text;
    while (!t.empty() && (t.back() == '\r' || t.back() == '\n' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
    if (t.empty()) return {};
    std::vector<int64_t> ids = encode_target(t);
    if (hf() && forced_bos >= 0) ids.insert(ids.begin(), forced_bos);
    return ids;
  }

  void check_source(const std::vector<int64_t>& src, size_t i) const {
    if (src.empty()) throw std::invalid_argument("source " + std::to_string(i) + " is empty");
    if ((int64_t)src.size() > max_source_tokens())
      throw std::invalid_argument("source " + std::to_string(i) + " has " + std::to_string(src.size()) +
                                  " tokens, more than the model's " + std::to_string(max_source_tokens()));
    const int64_t V = model->config().src_vocab_size;
    for (int64_t id : src)
      if (id < 0 || id >= V)
        throw std::invalid_argument("source " + std::to_string(i) + ": id " + std::to_string(id) +
                                    " is outside the source vocabulary [0, " + std::to_string(V) + ")");
  }

  // Decodes srcs[k] into *outs[k]: batches of similar length; greedy, or beam search with finished sentences
  // leaving the batch. Callers hold `mu`.
  void decode(const std::vector<const std::vector<int64_t>*>& srcs, const std::vector<Translation*>& outs,
              const TranslateOptions& o, const DecodeOptions& opt,
              const std::vector<std::vector<int64_t>>& prefixes = {}) {
    std::unique_ptr<LogitsProcessor> proc = logits_processor(o);
    // Sampling: num_hypotheses rows per sentence, each its own random stream. Stream numbers count the samples
    // of one source within this call, so identical sentences draw independently (unless seed_per_sentence).
    const bool sampling = proc && proc->options().do_sample;
    const size_t copies = sampling ? (size_t)o.num_hypotheses : 1;
    std::vector<uint64_t> first_stream(srcs.size(), 0);
    if (sampling && !o.seed_per_sentence) {
      std::map<std::vector<int64_t>, uint64_t> seen;
      for (size_t i = 0; i < srcs.size(); ++i) first_stream[i] = copies * seen[*srcs[i]]++;
    }
    std::vector<int64_t> lengths;
    for (const std::vector<int64_t>* src : srcs) lengths.push_back((int64_t)src->size());
    BatchLimits limits;
    // sentences (beam search keeps beam_size rows of each, sampling num_hypotheses)
    limits.max_rows = o.beam_size > 1 ? 32 : std::max<int64_t>(1, 64 / (int64_t)copies);
    for (const std::vector<size_t>& order : length_batches(lengths, limits)) {
      // The embedding rows the last batch looked up go back to the file: a long input would otherwise end up
      // holding the whole embedding matrix (the decoder's tokens range over all of it) beside the packed weights.
      model->release_unpacked_pages();
      const size_t n = order.size(), rows = n * copies;
      int64_t Ls = 0;
      for (size_t k = 0; k < n; ++k) Ls = std::max<int64_t>(Ls, padded_len((int64_t)srcs[order[k]]->size()));
      std::vector<int64_t> ids(rows * Ls, pad()), vl(rows);
      std::vector<uint64_t> streams(rows);
      for (size_t r = 0; r < rows; ++r) {
        const auto& v = *srcs[order[r / copies]];
        std::copy(v.begin(), v.end(), ids.begin() + r * Ls);
        vl[r] = (int64_t)v.size();
        streams[r] = first_stream[order[r / copies]] + r % copies;
      }
      std::vector<std::vector<int64_t>> prefix;  // this batch's target prefixes, or none
      if (!prefixes.empty())
        for (size_t r = 0; r < rows; ++r) prefix.push_back(prefixes[order[r / copies]]);
      // HF's greedy / sampling with processors on the logits (Hugging Face folders always: greedy search, with
      // the folder's forced tokens)
      if (opt.beam_size == 1 && (proc || !prefix.empty() || opt.hf)) {
        DecodeOptions gopt = opt;
        gopt.sample_streams = streams.data();
        auto res = generate_greedy(*model, ids.data(), vl.data(), (int64_t)rows, Ls, gopt, proc.get(), prefix);
        for (size_t k = 0; k < n; ++k) {
          Translation& t = *outs[order[k]];
          // The samples of sentence k, best (highest logp) first; the first is the translation.
          auto first = res.begin() + k * copies, last = first + copies;
          std::stable_sort(first, last, [](const Hypothesis& a, const Hypothesis& b) { return a.logp > b.logp; });
          if (copies > 1)
            for (auto h = first; h != last; ++h) {
              Translation alt;
              alt.ids = h->tokens;
              alt.finished = h->finished;
              alt.logp = alt.score = h->logp;
              alt.text = detokenize(alt.ids);
              t.hypotheses.push_back(std::move(alt));
            }
          t.ids = std::move(first->tokens);
          t.finished = first->finished;
          if (o.return_scores || copies > 1) t.logp = t.score = first->logp;
        }
        continue;
      }
      if (opt.beam_size == 1 && !o.return_scores && !opt.hf) {
        auto res = greedy_decode(*model, ids.data(), vl.data(), (int64_t)n, Ls, opt);
        for (size_t k = 0; k < n; ++k) {
          Translation& t = *outs[order[k]];
          t.ids = std::move(res[k]);
          // Decoding stops at <eos> or after max_steps tokens (<eos> counted): a shorter output ended with <eos>.
          t.finished = (int64_t)t.ids.size() < opt.max_steps;
        }
        continue;
      }
      // Beam search (beam_size 1 is greedy decoding) returns each hypothesis with its logp and ranking score.
      DecodeOptions bopt = opt;
      bopt.logits_processor = proc.get();
      if (!prefix.empty()) bopt.target_prefix = &prefix;
      auto res = beam_search_hypotheses(*model, ids.data(), vl.data(), (int64_t)n, Ls, bopt);
      for (size_t k = 0; k < n; ++k) {
        Translation& t = *outs[order[k]];
        if (o.num_hypotheses > 1)
          for (int64_t h = 0; h < o.num_hypotheses && h < (int64_t)res[k].size(); ++h) {
            Translation alt;
            alt.ids = res[k][h].tokens;
            alt.finished = res[k][h].finished;
            alt.logp = res[k][h].logp;
            alt.score = res[k][h].score;
            alt.text = detokenize(alt.ids);
            t.hypotheses.push_back(std::move(alt));
          }
        Hypothesis& best = res[k].front();
        t.ids = std::move(best.tokens);
        t.finished = best.finished;
        if (o.return_scores || o.num_hypotheses > 1) t.logp = best.logp, t.score = best.score;
      }
    }
    for (Translation* t : outs) t->text = detokenize(t->ids);
  }
};

namespace {
// Trailing spaces, tabs and line breaks dropped, as `tfm translate` reads a line.
std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t' || text.back() == '\n'))
    text.pop_back();
  return text;
}
}  // namespace

Translator::Translator(const std::string& model, const TranslatorOptions& options) : impl_(std::make_unique<Impl>()) {
  namespace fs = std::filesystem;
  const ops::ComputeType ct = ops::parse_compute_type(options.dtype);
  api::check_threads(options.threads);
  const std::string dir = api::model_folder(model);
  api::require_dir(dir, "model folder");
  api::require_file(dir + "/config.json");
  api::require_file(dir + "/model.safetensors");
  impl_->threads = options.threads;
  const std::string config_path = dir + "/config.json";
  const nlohmann::json j = load_json_file(config_path);
  const std::string model_type = read_model_type(j, config_path, default_model_type(j));
  const ModelFamily& family = family_of(model_type, config_path);
  require_translation_family(family, model_type, config_path, "tfm::Encoder and 'tfm encode' run it");
  if (family.hugging_face) {  // Marian / M2M100 / NLLB: transformers' names, tokenizer and generate
    impl_->model_type = model_type;
    const Seq2SeqConfig config = family.seq2seq_config(j, config_path);
    impl_->hf_tok = TranslationTokenizer::load(dir, model_type);
    const std::string gen_path = dir + "/generation_config.json";
    std::error_code ec;
    const nlohmann::json gen = fs::exists(gen_path, ec) ? load_json_file(gen_path) : nlohmann::json();
    impl_->gen = std::make_unique<GenerationConfig>(GenerationConfig::from_json(j, gen, gen_path));
    // Weights used from the mapped file and packed once, the file pages then released (Seq2SeqModel::open).
    impl_->model = Seq2SeqModel::open(config, dir + "/model.safetensors");
    impl_->model->prepare_inference(ct, options.quantize_output_projection);
    impl_->dtype = ops::compute_type_name(ct);
    return;
  }
  const Seq2SeqConfig c = family.seq2seq_config(j, config_path);
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
  impl_->model = Seq2SeqModel::open(c, dir + "/model.safetensors");
  impl_->model->prepare_inference(ct, options.quantize_output_projection);  // as `tfm translate --dtype` does
  impl_->dtype = ops::compute_type_name(ct);
}
Translator::~Translator() = default;
Translator::Translator(Translator&&) noexcept = default;
Translator& Translator::operator=(Translator&&) noexcept = default;

void Translator::check_length_penalty(float length_penalty, int64_t beam_size, bool return_scores,
                                      bool cli_names) const {
  check_length_penalty_rule(impl_->hf(), length_penalty, beam_size, return_scores, cli_names);
}

int64_t Translator::num_steps() const {
  return impl_->hf() ? std::min<int64_t>(impl_->gen->max_steps(), impl_->model->config().max_len)
                     : impl_->model->config().num_steps;
}
const std::string& Translator::model_type() const { return impl_->model_type; }
std::vector<std::string> Translator::languages() const {
  return impl_->hf() ? impl_->hf_tok->language_codes() : std::vector<std::string>{};
}
bool Translator::handles_model_type(const std::string& model_type) {
  const ModelFamily* family = find_family(model_type);
  return family && family->translation;
}
bool Translator::subword() const { return impl_->subword(); }
const std::string& Translator::dtype() const { return impl_->dtype; }

SourceEncoding Translator::encode_source(const std::string& sentence) const {
  if (auto bad = find_invalid_utf8(sentence))
    throw std::invalid_argument("sentence: invalid UTF-8 at byte offset " + std::to_string(*bad));
  const std::string text = trimmed(sentence);
  if (text.empty()) throw std::invalid_argument("sentence is empty");
  return impl_->encode(text);
}

SourceEncoding Translator::encode_source(const std::string& sentence, const TranslateOptions& options) const {
  if (auto bad = find_invalid_utf8(sentence))
    throw std::invalid_argument("sentence: invalid UTF-8 at byte offset " + std::to_string(*bad));
  const std::string text = trimmed(sentence);
  if (text.empty()) throw std::invalid_argument("sentence is empty");
  return impl_->encode(text, &options);
}

std::vector<int64_t> Translator::encode_target(const std::string& text) const {
  if (auto bad = find_invalid_utf8(text))
    throw std::invalid_argument("target text: invalid UTF-8 at byte offset " + std::to_string(*bad));
  return impl_->encode_target(trimmed(text));
}

std::vector<std::string> Translator::unknown_target_words(const std::string& text) const {
  if (auto bad = find_invalid_utf8(text))
    throw std::invalid_argument("target text: invalid UTF-8 at byte offset " + std::to_string(*bad));
  const Impl& I = *impl_;
  std::vector<std::string> out;
  if (I.hf() || I.subword()) return out;  // subwords cover every text
  const std::string pre = preprocess_nmt(trimmed(text));
  for (size_t p = 0, q; p <= pre.size(); p = q + 1) {
    q = pre.find(' ', p);
    if (q == std::string::npos) q = pre.size();
    if (q > p && !I.tgt_vocab->contains(pre.substr(p, q - p))) out.push_back(pre.substr(p, q - p));
  }
  return out;
}

int64_t Translator::max_source_tokens() const { return impl_->max_source_tokens(); }

std::vector<Translation> Translator::translate_batch(const std::vector<std::string>& sentences,
                                                     const TranslateOptions& o) const {
  Impl& I = *impl_;
  const DecodeOptions opt = I.decode_options(o);
  // Source ids (with <eos>) of every non-empty sentence, as the CLI builds them.
  std::vector<std::vector<int64_t>> src(sentences.size());
  std::vector<Translation> out(sentences.size());
  std::vector<const std::vector<int64_t>*> todo;
  std::vector<Translation*> outs;
  if (!o.target_prefix.empty() && o.target_prefix.size() != sentences.size())
    throw std::invalid_argument("target_prefix has " + std::to_string(o.target_prefix.size()) + " entries for " +
                                std::to_string(sentences.size()) + " sentences");
  std::vector<std::vector<int64_t>> prefixes;
  for (size_t i = 0; i < sentences.size(); ++i) {
    if (auto bad = find_invalid_utf8(sentences[i]))
      throw std::invalid_argument("sentence " + std::to_string(i + 1) + ": invalid UTF-8 at byte offset " +
                                  std::to_string(*bad));
    const std::string text = trimmed(sentences[i]);
    if (text.empty()) continue;
    src[i] = I.encode(text, &o).ids;
    todo.push_back(&src[i]);
    outs.push_back(&out[i]);
    if (!o.target_prefix.empty()) prefixes.push_back(I.target_prefix(o.target_prefix[i], i, opt.forced_bos_id));
  }
  std::lock_guard<std::mutex> lock(I.mu);
  api::apply_threads(I.threads);
  I.decode(todo, outs, o, opt, prefixes);
  return out;
}

std::vector<Translation> Translator::translate_ids(const std::vector<std::vector<int64_t>>& sources,
                                                   const TranslateOptions& o) const {
  Impl& I = *impl_;
  const DecodeOptions opt = I.decode_options(o);
  std::vector<Translation> out(sources.size());
  std::vector<const std::vector<int64_t>*> srcs;
  std::vector<Translation*> outs;
  if (!o.target_prefix.empty() && o.target_prefix.size() != sources.size())
    throw std::invalid_argument("target_prefix has " + std::to_string(o.target_prefix.size()) + " entries for " +
                                std::to_string(sources.size()) + " sources");
  std::vector<std::vector<int64_t>> prefixes;
  for (size_t i = 0; i < sources.size(); ++i) {
    I.check_source(sources[i], i);
    srcs.push_back(&sources[i]);
    outs.push_back(&out[i]);
    if (!o.target_prefix.empty()) prefixes.push_back(I.target_prefix(o.target_prefix[i], i, opt.forced_bos_id));
  }
  std::lock_guard<std::mutex> lock(I.mu);
  api::apply_threads(I.threads);
  I.decode(srcs, outs, o, opt, prefixes);
  return out;
}

TranslationAttention Translator::attention(const std::vector<int64_t>& source, const TranslateOptions& o) const {
  Impl& I = *impl_;
  const DecodeOptions opt = I.decode_options(o);
  I.check_source(source, 0);
  const Seq2SeqConfig& c = I.model->config();
  const int64_t vl = (int64_t)source.size(), Ls = I.padded_len(vl), heads = c.num_heads, V = c.tgt_vocab_size;
  std::vector<int64_t> ids(source);
  ids.resize(Ls, I.pad());
  std::lock_guard<std::mutex> lock(I.mu);
  api::apply_threads(I.threads);
  TranslationAttention a;
  Translation& t = a.translation;
  {
    std::vector<Translation*> outs{&t};
    I.decode({&source}, outs, o, opt);
  }
  // The decoder run again on <bos> hypothesis (teacher forcing): one step per token, plus the <eos> step unless the
  // hypothesis was cut off at max_steps (as greedy_decode counts).
  std::vector<Tensor> enc_attn;
  Tensor enc = I.model->encode(ids.data(), &vl, 1, Ls, &enc_attn);
  const int64_t steps = std::min<int64_t>((int64_t)t.ids.size() + 1, opt.max_steps);
  DecoderCache cache;
  start_decoding(*I.model, cache, enc, &vl, opt.max_steps);
  std::vector<float> logits(V);
  std::vector<Tensor> cross;
  const int64_t dec_layers = (int64_t)I.model->modules().decoder.size();
  for (int64_t l = 0; l < dec_layers; ++l) cross.push_back(Tensor::zeros({heads, steps, vl}));
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t token = s == 0 ? opt.bos_id : t.ids[s - 1];
    std::vector<std::vector<float>> w;  // per layer [heads, Ls]
    decode_step(*I.model, cache, &token, logits.data(), opt.position_mode, &w);
    for (int64_t l = 0; l < dec_layers; ++l)
      for (int64_t h = 0; h < heads; ++h)
        std::copy_n(w[l].data() + h * Ls, vl, cross[l].f32() + (h * steps + s) * vl);
    a.target_tokens.push_back(I.target_token(s < (int64_t)t.ids.size() ? t.ids[s] : opt.eos_id));
  }
  for (const Tensor& e : enc_attn) {  // [1, heads, Ls, Ls] -> [heads, vl, vl]
    Tensor m = Tensor::empty({heads, vl, vl});
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t q = 0; q < vl; ++q)
        std::copy_n(e.f32() + (h * Ls + q) * Ls, vl, m.f32() + (h * vl + q) * vl);
    a.encoder_self.push_back(api::to_array(std::move(m)));
  }
  for (Tensor& x : cross) a.cross.push_back(api::to_array(std::move(x)));
  for (int64_t id : source) a.source_tokens.push_back(I.source_token(id));
  a.num_layers = c.num_layers;
  a.num_heads = heads;
  return a;
}

std::vector<ScoringResult> Translator::score_batch(const std::vector<std::string>& sources,
                                                  const std::vector<std::string>& targets) const {
  Impl& I = *impl_;
  if (sources.size() != targets.size())
    throw std::invalid_argument("score_batch: " + std::to_string(sources.size()) + " sources but " +
                                std::to_string(targets.size()) + " targets");
  const DecodeOptions opt = I.decode_options(TranslateOptions{});
  const int64_t max_target = I.model->config().max_len - 1;
  std::vector<std::vector<int64_t>> src(sources.size()), tgt(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    for (const auto* text : {&sources[i], &targets[i]}) {
      const char* what = text == &sources[i] ? "source" : "target";
      if (auto bad = find_invalid_utf8(*text))
        throw std::invalid_argument(std::string(what) + " " + std::to_string(i + 1) + ": invalid UTF-8 at byte offset " +
                                    std::to_string(*bad));
      if (trimmed(*text).empty()) throw std::invalid_argument(std::string(what) + " " + std::to_string(i + 1) + " is empty");
    }
    src[i] = I.encode(trimmed(sources[i])).ids;
    tgt[i] = I.encode_target(trimmed(targets[i]));
    if (I.hf() && opt.forced_bos_id >= 0) tgt[i].insert(tgt[i].begin(), opt.forced_bos_id);  // M2M100 / NLLB labels
    if ((int64_t)tgt[i].size() > max_target)
      throw std::invalid_argument("target " + std::to_string(i + 1) + " has " + std::to_string(tgt[i].size()) +
                                  " tokens, more than the model's max_len - 1 = " + std::to_string(max_target));
  }
  std::vector<ScoringResult> out(sources.size());
  std::lock_guard<std::mutex> lock(I.mu);
  api::apply_threads(I.threads);
  constexpr size_t kBatch = 32;
  for (size_t s = 0; s < src.size(); s += kBatch) {
    const size_t n = std::min(kBatch, src.size() - s);
    int64_t Ls = 0;
    for (size_t k = 0; k < n; ++k) Ls = std::max<int64_t>(Ls, I.padded_len((int64_t)src[s + k].size()));
    std::vector<int64_t> ids(n * Ls, I.pad()), vl(n);
    for (size_t k = 0; k < n; ++k) {
      std::copy(src[s + k].begin(), src[s + k].end(), ids.begin() + k * Ls);
      vl[k] = (int64_t)src[s + k].size();
    }
    const std::vector<std::vector<int64_t>> batch_tgt(tgt.begin() + s, tgt.begin() + s + n);
    auto lp = score_targets(*I.model, ids.data(), vl.data(), (int64_t)n, Ls, batch_tgt, opt);
    for (size_t k = 0; k < n; ++k) {
      ScoringResult& r = out[s + k];
      for (int64_t id : batch_tgt[k]) r.tokens.push_back(I.target_token(id));
      r.tokens.push_back(I.target_token(opt.eos_id));
      r.log_probs = std::move(lp[k]);
      for (double x : r.log_probs) r.cumulated_score += x;
      r.normalized_score = r.cumulated_score / (double)r.log_probs.size();
    }
  }
  return out;
}

int64_t Translator::num_layers() const { return impl_->model->config().num_layers; }
int64_t Translator::num_heads() const { return impl_->model->config().num_heads; }

}  // namespace tfm
