/// @file tfm/translator.h
/// Translation with a transformer_seq2seq folder written by `tfm train` (d2l word vocabularies src_vocab.txt /
/// tgt_vocab.txt, or a joint SentencePiece spm.model) or exported from the d2l.ai reference, or with a Hugging Face
/// translation folder: Marian (OPUS-MT: config.json model_type "marian", source.spm, target.spm, vocab.json) or
/// M2M100 / NLLB (model_type "m2m_100", sentencepiece.bpe.model), decoded as transformers' generate does with the
/// defaults of the folder's generation_config.json.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tfm/array.h"

namespace tfm {

struct TranslatorOptions {
  /// OpenMP threads (kernels and oneDNN GEMMs) of each call, set on the calling thread (0 = the process default:
  /// OMP_NUM_THREADS, else all cores).
  int threads = 0;
  /// Compute type of the encoder and decoder Linear layers: "fp32", "bf16" or "int8" (see EncoderOptions::dtype;
  /// the output projection stays fp32). Anything else throws std::invalid_argument.
  std::string dtype = "fp32";
  /// With dtype bf16 or int8: run the decoder's output projection (to the vocabulary) in that type too (faster; on
  /// the Multi30k recipe's models test BLEU moved by less than 0.2).
  bool quantize_output_projection = false;
};

struct TranslateOptions {
  /// 1 = greedy decoding; at most 64. 0 = the model's default: generation_config.json's num_beams for Hugging Face
  /// folders, 1 otherwise.
  int64_t beam_size = 0;
  /// Our models: GNMT length penalty alpha >= 0 (Wu et al. 2016, eq. 14): hypotheses are ranked by
  /// logp / ((5 + length) / 6)^alpha, length = generated tokens including the final <eos>. Greedy decoding ignores
  /// it, so a non-zero value with beam_size 1 and without return_scores throws std::invalid_argument (as
  /// `tfm translate --length-penalty` without --beam is refused).
  /// Hugging Face folders: transformers' length_penalty (any finite number): logp / length ** length_penalty.
  /// NaN = the model's default (generation_config.json, else 1.0; 0 for our models).
  float length_penalty = std::numeric_limits<float>::quiet_NaN();
  /// At most this many generated tokens, <eos> included (0 = config num_steps; Hugging Face folders:
  /// generation_config.json's max_new_tokens, else max_length - 1).
  int64_t max_steps = 0;
  bool return_scores = false;   ///< fill Translation::score and Translation::logp
  /// Never generate the target <unk> (CTranslate2's disable_unk): its logit is set to the lowest float before the
  /// log-softmax at every step, greedy or beam, so the best translation without <unk> is searched for.
  bool disable_unk = false;
  /// n-best: Translation::hypotheses receives the best num_hypotheses of the beam (1 <= num_hypotheses <=
  /// beam_size; CTranslate2's num_hypotheses, transformers' num_return_sequences). With random sampling
  /// (sampling_topk != 1, or a Hugging Face folder whose generation_config.json samples): num_hypotheses
  /// independent samples of the sentence (1 to 64), best (highest logp) first, as CTranslate2 returns them.
  int64_t num_hypotheses = 1;
  // ---- Hugging Face folders only (std::invalid_argument for our models when set)
  /// Target language: M2M100 "fr" or "__fr__", NLLB "fra_Latn" or "fr" (its token is forced first:
  /// forced_bos_token_id; with target_prefix and in score_batch it is the targets' first token, as in HF's labels);
  /// Marian multi-target models "fra" (">>fra<<" is prepended to each source that has no ">>xx<<" code).
  /// Empty: tokenizer_config.json's tgt_lang (M2M100 / NLLB), none (Marian).
  std::string target_lang;
  std::string source_lang;  ///< M2M100 / NLLB source language (empty: tokenizer_config.json's src_lang)
  /// transformers' early_stopping: "true", "false" or "never"; empty = generation_config.json's.
  std::string early_stopping;
  /// transformers' forced_eos_token_id (ForcedEOSTokenLogitsProcessor: </s> forced at the last step): -1 =
  /// generation_config.json's, 0 = off, 1 = on (the folder's eos_token_id).
  int forced_eos = -1;

  /// Hugging Face logits processors (transformers' generate, applied in its order: repetition penalty, no-repeat
  /// n-grams, bad words, min length), to the raw logits in greedy decoding and sampling and to each beam's
  /// log-softmax scores in beam search, as HF does (see src/decode/logits_process.h). All off by default.
  float repetition_penalty = 1.0f;   ///< > 0; 1 = off; CTRL penalty on every token of <bos> + generated tokens
  int64_t no_repeat_ngram_size = 0;  ///< >= 0; 0 = off; no n-gram of this size twice in <bos> + generated tokens
  std::vector<std::vector<int64_t>> bad_words_ids;  ///< target id sequences never generated
  /// <eos> is banned while <bos> + the generated tokens are fewer than min_length (HF's min_length: at least
  /// min_length - 1 tokens before <eos>); 0 = off (Hugging Face folders: generation_config.json's min_length).
  int64_t min_length = 0;
  /// Random sampling (CTranslate2's names; beam_size 1 only): a token is drawn from the sampling_topk best
  /// (0 = the whole vocabulary; 1 = greedy decoding, the default) after the temperature and, when sampling_topp < 1,
  /// the nucleus (top-p) filter (HF's TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, in that order,
  /// after the processors). Each sample has its own std::mt19937_64 stream seeded by (seed, its source ids, the
  /// sample's number): reproducible for a seed, whatever the batch; not torch's generator. Samples are numbered
  /// per source within a call (sample h of the k-th occurrence of a sentence in the call), so identical sentences
  /// of one call get independent samples unless seed_per_sentence is set. Hugging Face folders: transformers'
  /// do_sample with top_k = sampling_topk, on greedy search (the folder's num_beams is not used unless beam_size
  /// is given, which then must be 1); sampling_topk 1 leaves generation_config.json's do_sample / top_k / top_p /
  /// temperature as they are (sampling_topp and sampling_temperature other than 1 override its top_p and
  /// temperature).
  int64_t sampling_topk = 1;
  float sampling_topp = 1.0f;        ///< (0, 1]
  float sampling_temperature = 1.0f; ///< > 0
  uint64_t seed = 0;
  /// Sampling: each sentence's streams seeded by (seed, the sentence) alone, so identical sentences of a call get
  /// identical samples (the same as each alone); off: they are independent draws.
  bool seed_per_sentence = false;
  /// Target prefix (CTranslate2's target_prefix, for autocompletion): empty, or one text per sentence that the
  /// translation is forced to start with ("" = none). It is tokenized with the target vocabulary (no <eos>), its
  /// tokens are decoded as if generated, and the returned translation includes it. Throws std::invalid_argument
  /// when the count differs from the sentences' or a prefix leaves no step to generate.
  std::vector<std::string> target_prefix;
};

/// The teacher-forced log-likelihood of one target given its source (Translator::score_batch, CTranslate2's
/// ScoringResult).
struct ScoringResult {
  std::vector<std::string> tokens;  ///< target tokens as the model reads them, then "<eos>" (or "</s>")
  std::vector<double> log_probs;    ///< [tokens.size()] natural-log probability of each token given the ones before
  double cumulated_score = 0;       ///< sum of log_probs
  double normalized_score = 0;      ///< cumulated_score / tokens.size()
};

struct Translation {
  std::string text;             ///< detokenized (SentencePiece) or space-joined (word vocabulary) output
  std::vector<int64_t> ids;     ///< target ids, without <eos>
  /// With return_scores: the natural-log probability of `ids` (plus <eos> when the hypothesis ended with it;
  /// a hypothesis cut off at max_steps has no <eos> term) under the model, ...
  double logp = 0;
  /// ... and logp / ((5 + length) / 6)^length_penalty, the beam's ranking score (= logp when alpha is 0).
  double score = 0;
  bool finished = true;         ///< ended in <eos> (false: cut off at max_steps)
  /// With TranslateOptions::num_hypotheses > 1: the best hypotheses, best first (the first is this translation);
  /// each has text, ids, logp, score and finished (its own `hypotheses` empty).
  std::vector<Translation> hypotheses;
};

/// A sentence as the model reads it (Translator::encode_source).
struct SourceEncoding {
  /// [n] source ids with <eos>, n <= max_source_tokens(): SentencePiece pieces cut to max_source_tokens() - 1 before
  /// <eos>, or d2l's truncate_pad to num_steps for word vocabularies (which drops the <eos> of a long sentence).
  std::vector<int64_t> ids;
  /// Tokens of the untruncated sentence with its <eos> (pieces + 1, or words + 1); > max_source_tokens() when
  /// `ids` was truncated.
  int64_t full_length = 0;
  std::vector<std::string> unknown_words;  ///< word vocabularies: the words read as <unk>, in order
};

/// The attention weights behind one translation, for plotting (`tfm translate --attention-png`, the server's
/// /attention). Ls = source tokens with <eos>; T = decoder steps: one per generated token plus the <eos> step
/// (none when the hypothesis was cut off at max_steps). Beam search keeps no attention, so the chosen hypothesis
/// is decoded again with teacher forcing, which gives each step the keys and values the search had.
struct TranslationAttention {
  Translation translation;                 ///< the hypothesis plotted (greedy, or the best beam)
  std::vector<std::string> source_tokens;  ///< [Ls] pieces or words of the source, <eos> included
  std::vector<std::string> target_tokens;  ///< [T] the token each step produced (<eos> at a finished last step)
  int64_t num_layers = 0, num_heads = 0;
  std::vector<FloatArray> encoder_self;    ///< per encoder layer [num_heads, Ls, Ls] (query, key)
  std::vector<FloatArray> cross;           ///< per decoder layer [num_heads, T, Ls] (step, source key)
};

/// Thread-safety: every const method may be called from several threads; the decoding calls (translate_batch,
/// translate_ids, attention) run one at a time (the decoder keeps per-call state in the model).
class Translator {
 public:
  /// Loads `model_dir`/config.json, model.safetensors and the vocabularies. Throws tfm::FileNotFoundError for a
  /// missing folder or file, std::runtime_error for a malformed or inconsistent one (the message names it),
  /// std::invalid_argument for an unknown dtype or threads < 0.
  explicit Translator(const std::string& model_dir, const TranslatorOptions& options = {});
  ~Translator();
  Translator(Translator&&) noexcept;
  Translator& operator=(Translator&&) noexcept;

  /// One Translation per sentence, in order. A sentence is preprocessed as `tfm translate` does (d2l models:
  /// lowercased, punctuation split; SentencePiece models: encoded and truncated to max_len); an empty sentence
  /// gives an empty translation. Words outside the source vocabulary are read as <unk>. Throws
  /// std::invalid_argument for invalid UTF-8 (the message gives the 1-based sentence number and byte offset),
  /// beam_size outside [1, 64], or a negative or non-finite length_penalty or max_steps.
  std::vector<Translation> translate_batch(const std::vector<std::string>& sentences,
                                           const TranslateOptions& options = {}) const;

  /// Encodes one sentence as translate_batch() does (trailing spaces and line breaks dropped; d2l models:
  /// lowercased, punctuation split). Throws std::invalid_argument for invalid UTF-8 (the message gives the byte
  /// offset) or an empty sentence.
  SourceEncoding encode_source(const std::string& sentence) const;
  /// As encode_source(sentence), with the source and target languages of `options` (Hugging Face folders:
  /// the M2M100 / NLLB source language code first; Marian's ">>target_lang<<").
  SourceEncoding encode_source(const std::string& sentence, const TranslateOptions& options) const;
  /// Target text as the decoder reads it, without <eos> (SentencePiece pieces, or d2l-preprocessed words with
  /// <unk> for words outside the target vocabulary): for bad_words_ids. Throws std::invalid_argument for invalid
  /// UTF-8 (the message gives the byte offset).
  std::vector<int64_t> encode_target(const std::string& text) const;
  /// Word vocabularies (d2l folders): the words of `text`, preprocessed as encode_target does, that are outside
  /// the target vocabulary (read as <unk>), in order; empty for subword models. Throws as encode_target.
  std::vector<std::string> unknown_target_words(const std::string& text) const;
  /// Tokens a source may have, <eos> included: min(max_len, 1024) for SentencePiece models, num_steps for d2l ones.
  int64_t max_source_tokens() const;
  /// Translations of already encoded sources (encode_source().ids), one per source, in order. Throws
  /// std::invalid_argument as translate_batch() does for the options, and for an empty source, an id outside the
  /// source vocabulary or a source longer than max_source_tokens().
  std::vector<Translation> translate_ids(const std::vector<std::vector<int64_t>>& sources,
                                         const TranslateOptions& options = {}) const;
  /// The translation of `source` (encode_source().ids) with every layer's attention weights (see
  /// TranslationAttention). Same errors as translate_ids().
  TranslationAttention attention(const std::vector<int64_t>& source, const TranslateOptions& options = {}) const;

  /// Scores given translations (CTranslate2's score_batch): for each (sources[i], targets[i]) the log-probability
  /// of every target token and of <eos>, the decoder reading <bos> + the target step by step as translation does.
  /// Sources and targets are preprocessed as translate_batch() does (targets with the target vocabulary; words
  /// outside it read as <unk>). Throws std::invalid_argument when the counts differ, a source or target is empty
  /// or has invalid UTF-8 (1-based pair number and byte offset), or a target has more tokens than the model's
  /// max_len - 1.
  std::vector<ScoringResult> score_batch(const std::vector<std::string>& sources,
                                         const std::vector<std::string>& targets) const;

  /// Multilingual folders: the codes TranslateOptions::target_lang / source_lang take, one per language, sorted
  /// (M2M100 "fr"; NLLB the ISO 639-1 code of common languages, "fr" for fra_Latn, which is taken too, else its
  /// code; Marian multi-target "fra" of its ">>fra<<" tokens). Empty for a single-pair model.
  std::vector<std::string> languages() const;
  /// Whether a folder whose config.json has this model_type is a translation folder Translator loads
  /// ("transformer_seq2seq", "marian", "m2m_100").
  static bool handles_model_type(const std::string& model_type);

  /// The one rule on TranslateOptions::length_penalty, which translate_batch applies and `tfm translate` and
  /// Python call: NaN (the model's default) always passes; our models take a GNMT alpha >= 0, which greedy
  /// decoding ignores, so a non-zero value needs beam_size > 1 or return_scores; Hugging Face folders take any
  /// finite number. Throws std::invalid_argument naming the options as the library spells them, or with
  /// cli_names as `tfm translate` does (--length-penalty, --beam, --scores).
  void check_length_penalty(float length_penalty, int64_t beam_size, bool return_scores, bool cli_names = false) const;

  int64_t num_steps() const;  ///< the model's default decoding limit (tokens)
  int64_t num_layers() const;  ///< encoder (= decoder) layers
  int64_t num_heads() const;
  bool subword() const;       ///< SentencePiece model (else d2l word vocabularies); true for Hugging Face folders
  /// "transformer_seq2seq", or the Hugging Face model_type ("marian", "m2m_100").
  const std::string& model_type() const;
  const std::string& dtype() const;  ///< "fp32", "bf16" or "int8"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfm
