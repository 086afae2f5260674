// Logits processors and sampling warpers as Hugging Face generate applies them
// (transformers/generation/logits_process.py, the list built by GenerationMixin._get_logits_processor), and the
// greedy / sampling decoding loop that uses them (HF's `_sample`, with a target prefix as CTranslate2's).
//
// Order, as _get_logits_processor builds the list:
//   1. RepetitionPenaltyLogitsProcessor  (repetition_penalty != 1)
//   2. NoRepeatNGramLogitsProcessor      (no_repeat_ngram_size > 0)
//   3. NoBadWordsLogitsProcessor         (bad_words_ids; a sequence [eos] alone is dropped, as HF does)
//   4. MinLengthLogitsProcessor          (min_length > 0: <eos> banned while the decoder input is shorter)
//   and with do_sample only, the warpers:
//   5. TemperatureLogitsWarper, 6. TopKLogitsWarper (top_k > 0), 7. TopPLogitsWarper (top_p < 1),
//   all with min_tokens_to_keep 1 and filter value -inf.
// `input_ids` is the decoder input so far, as HF passes it: the decoder start token (<bos> for our own models,
// pad for Marian) followed by the generated tokens. The processors see raw logits in greedy / sampling decoding
// and log-softmax scores in beam search, as in HF.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "decode/search.h"

namespace tfm {

struct LogitsProcessorOptions {
  // CTRL's penalty (Keskar et al. 2019) on every token of input_ids, applied once per token: a score s < 0
  // becomes s * penalty, else s / penalty. 1 = off; must be > 0.
  float repetition_penalty = 1.0f;
  // No n-gram of this size occurs twice in input_ids: the tokens that would complete an n-gram already present
  // get -inf. 0 = off.
  int64_t no_repeat_ngram_size = 0;
  // Token sequences never generated: a one-token sequence always gets -inf; a longer one's last token gets -inf
  // when input_ids ends with the rest (and is at least as long as the sequence, as SequenceBiasLogitsProcessor).
  std::vector<std::vector<int64_t>> bad_words_ids;
  // <eos> gets -inf while input_ids has fewer than min_length tokens (the start token counts, as in HF for
  // encoder-decoder models: min_length 1 + n means at least n generated tokens before <eos>). 0 = off.
  int64_t min_length = 0;
  int64_t eos_id = -1;  // required by min_length and bad_words_ids' [eos] filter
  // Sampling (HF do_sample): the warpers below, then a token drawn from softmax(scores). Off: argmax (first on ties).
  bool do_sample = false;
  float temperature = 1.0f;  // scores / temperature; > 0
  int64_t top_k = 0;         // keep the top_k best scores (ties with the k-th kept), 0 = all
  float top_p = 1.0f;        // nucleus: keep the smallest set of best tokens with probability > 1 - top_p; (0, 1]
  uint64_t seed = 0;         // see LogitsProcessor::start
};

// Thread-safety: process / warp are const; next_token and start use the per-row random streams (one call at a time).
class LogitsProcessor {
 public:
  // Throws std::invalid_argument (naming the option and the value) for repetition_penalty <= 0 or not finite,
  // no_repeat_ngram_size < 0, an empty bad word sequence or an id outside [0, vocab_size), min_length < 0,
  // min_length > 0 without eos_id, temperature <= 0 or not finite, top_k < 0, top_p outside (0, 1].
  LogitsProcessor(LogitsProcessorOptions options, int64_t vocab_size);

  const LogitsProcessorOptions& options() const { return o_; }
  // Any of processors 1-4 on (sampling alone does not count).
  bool has_processors() const;

  // Processors 1-4 on one row: scores [V] in place, input_ids [len] (start token first).
  void process(const int64_t* input_ids, int64_t len, float* scores) const;
  // Warpers 5-7 on one row: scores [V] in place (called by next_token when do_sample).
  void warp(float* scores) const;

  // Prepares one random stream per row for `rows` sources src [rows, Ls] (valid lengths src_valid_len [rows]).
  // A row's stream is seeded by (seed, its source ids, streams[row]), so a sample depends on the seed, the
  // sentence and its stream number only, not on the batch it is decoded in or on its position; the generator is
  // std::mt19937_64 (reproducible everywhere, not equal to torch's generator). streams: [rows] or null (all 0);
  // callers number the samples of one source 0, 1, ... (several samples of a sentence, identical sentences of
  // one call) so that they are independent draws.
  void start(int64_t rows, const int64_t* src, const int64_t* src_valid_len, int64_t Ls,
             const uint64_t* streams = nullptr);
  // The next token of row `row` from its processed scores [V] (process already applied): argmax, or with
  // do_sample warp + a draw from the row's stream. `scores` is warped in place.
  int64_t next_token(int64_t row, float* scores);

 private:
  LogitsProcessorOptions o_;
  int64_t V_;
  std::vector<std::mt19937_64> rng_;
};

// Greedy decoding or sampling with logits processors and target prefixes (HF generate with num_beams 1:
// processors on the raw logits, then argmax or the warpers and a draw). src: [B, Ls] ids, src_valid_len: [B].
// target_prefix: empty, or [B] token lists forced first (CTranslate2's target_prefix: the decoder reads them as if
// it had generated them; processors are not applied at those steps). A prefix must be shorter than max_steps and
// hold no <eos> (std::invalid_argument otherwise). `processor` may be null (plain greedy).
// Returns one Hypothesis per row: tokens (prefix included, <eos> excluded), logp = sum over the steps of
// log_softmax(processed logits)[token] (natural log; the raw model log-probs at the prefix steps and without
// processors), score = logp, finished = ended in <eos>. With opt.hf (Hugging Face folders, HF's greedy search /
// sampling) the built-in processors of apply_logits_processors (forced BOS / EOS, banned ids) follow `processor`'s
// on the logits of every step that is not a prefix step.
std::vector<Hypothesis> generate_greedy(Seq2SeqModel& model, const int64_t* src, const int64_t* src_valid_len,
                                        int64_t B, int64_t Ls, const DecodeOptions& opt, LogitsProcessor* processor,
                                        const std::vector<std::vector<int64_t>>& target_prefix = {});

// Teacher-forced log-likelihood (CTranslate2's score_batch): per row the log-probability of each token of
// target[b] and then <eos>, decoding <bos> + target[b] step by step as the search does (same positions).
// src: [B, Ls], src_valid_len: [B], target: [B] token lists (no <eos>). Returns [B] lists of target[b].size() + 1
// natural-log probabilities. Throws std::invalid_argument for a target token outside the vocabulary or a target
// longer than the model's max_len - 1.
std::vector<std::vector<double>> score_targets(Seq2SeqModel& model, const int64_t* src, const int64_t* src_valid_len,
                                               int64_t B, int64_t Ls, const std::vector<std::vector<int64_t>>& target,
                                               const DecodeOptions& opt);

}  // namespace tfm
