// Decoding for transformer_seq2seq: greedy and beam search on the decoder's key/value cache.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/seq2seq.h"

namespace tfm {

// Hugging Face generate's early_stopping for beam search (BeamHypotheses.is_done), see DecodeOptions::hf.
enum class EarlyStopping { kFalse, kTrue, kNever };
class LogitsProcessor;  // decode/logits_process.h

struct DecodeOptions {
  int64_t beam_size = 1;        // 1 = greedy
  float length_penalty = 0.0f;  // GNMT alpha (>= 0), see gnmt_length_penalty; with hf: transformers' exponent
  int64_t max_steps = 10;       // at most this many generated tokens (num_steps), <eos> included
  int64_t bos_id = 2, eos_id = 3;
  PositionMode position_mode = PositionMode::kAbsolute;
  // A token never generated, -1 for none: the target <unk> for CTranslate2's disable_unk. Its logit is set to
  // the lowest float before the log-softmax, as CTranslate2's DisableTokens does, so the other tokens' probabilities
  // are renormalised without it.
  int64_t suppress_id = -1;

  // ---- Hugging Face generate (transformers 4.38 generation/utils.py, beam_search.py), for its folders.
  // hf: scores are transformers' (see hf_length_penalty): beam search ranks log_softmax(logits) after the logits
  // processors below (which see log-probabilities, not renormalised), keeps a hypothesis by
  // logp / length ** length_penalty (length: generated tokens, the <eos> counted) and stops as `early_stopping`
  // says: kTrue once beam_size hypotheses finished; kFalse when the worst kept score >= the best candidate's
  // logp / (step + 1) ** length_penalty; kNever when it >= the best candidate's logp / max_steps ** length_penalty
  // (length_penalty > 0; else / (step + 1) ** length_penalty). A sentence that stops keeps no live beam; at
  // max_steps the live beams are added as cut-off hypotheses. beam_size 1 is greedy search (argmax of the
  // processed logits, stopping at <eos>). length_penalty may be any finite number.
  bool hf = false;
  EarlyStopping early_stopping = EarlyStopping::kFalse;
  // Built-in processors (apply_logits_processors; with hf at every step of greedy and beam search, after
  // `logits_processor`, which holds repetition penalty, no-repeat n-grams, bad words and min length: HF's order in
  // _get_logits_processor): banned_ids (disable_unk's <unk>): -inf; ForcedBOS: at step 0 every token but
  // forced_bos_id is -inf and it is 0; ForcedEOS: the same for forced_eos_id at the last step (max_steps - 1).
  // -1 / empty: off.
  int64_t forced_bos_id = -1, forced_eos_id = -1;
  std::vector<int64_t> banned_ids;
  // Beam search only (greedy and sampling with processors: generate_greedy in decode/logits_process.h).
  // Hugging Face logits processors applied to each beam's log-softmax scores (input_ids = <bos> + the beam's
  // tokens) before the candidates are ranked, as HF's beam search does; a beam's logp then sums processed scores.
  // nullptr = none. Its min_length is the one min length rule (HF's MinLengthLogitsProcessor).
  const LogitsProcessor* logits_processor = nullptr;
  // Per sentence [N] target tokens forced first (CTranslate2's target_prefix; empty list = none), each shorter
  // than max_steps, without <eos>. The forced steps add the model's log-probability (processors not applied).
  const std::vector<std::vector<int64_t>>* target_prefix = nullptr;
  // Sampling (generate_greedy): [N] each row's random stream number (LogitsProcessor::start), null = all 0.
  const uint64_t* sample_streams = nullptr;
};

// Hugging Face's length penalty: length ** alpha (BeamHypotheses.add divides the sum of log-probabilities by it).
double hf_length_penalty(int64_t length, double alpha);

// Applies the built-in processors of `opt` (banned ids and suppress_id: -inf; then ForcedBOS, ForcedEOS, as
// transformers orders NoBadWords before them) to scores [rows, V] at decoding step `step` (0 = the token after the
// decoder start). Greedy search passes logits, beam search log-probabilities (as transformers does), each after
// opt.logits_processor's processors.
void apply_logits_processors(float* scores, int64_t rows, int64_t V, int64_t step, const DecodeOptions& opt);

// Scoring used by beam search (Wu et al. 2016, "Google's Neural Machine Translation System", eq. 14, without the
// coverage term): a hypothesis y of `length` tokens scores
//   score(y) = logp(y) / lp(length),   lp(length) = ((5 + length) / 6)^alpha,
// logp(y) = sum over its tokens of log softmax(logits) (natural log). `length` counts the generated tokens
// including the final <eos>; a hypothesis cut off at max_steps without <eos> has length max_steps and no <eos>
// term. alpha 0 gives lp = 1 (plain sum of log-probabilities); alpha > 0 favours longer hypotheses.
double gnmt_length_penalty(int64_t length, double alpha);

// One decoded hypothesis.
struct Hypothesis {
  std::vector<int64_t> tokens;  // generated ids, without <eos>
  double logp = 0;              // sum of the log-probabilities of its tokens, <eos> included when finished
  double score = 0;             // logp / gnmt_length_penalty(length, length_penalty) (hf: / hf_length_penalty)
  bool finished = false;        // ended in <eos>; false: cut off after max_steps tokens
  int64_t length() const { return (int64_t)tokens.size() + (finished ? 1 : 0); }
};

// Optional attention weights of the first sentence, for visualisation.
struct DecodeAttention {
  std::vector<Tensor> encoder_self;  // per layer [heads, Ls, Ls]
  Tensor cross;                      // last decoder layer [heads, steps, Ls]
};

// Greedy decoding of a batch. src: [B, Ls] ids, src_valid_len: [B]. Returns per row the generated ids without
// <eos>. Rows that finish early are carried along (their later tokens are ignored).
std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqModel& model, const int64_t* src, const int64_t* src_valid_len,
                                                int64_t B, int64_t Ls, const DecodeOptions& opt,
                                                DecodeAttention* attention = nullptr);

// Beam search (the usual algorithm, as Hugging Face's BeamSearchScorer and fairseq run it). Per sentence, K =
// beam_size live beams start from <bos>. At each step every live beam is extended by every token and the
// candidates are ranked by logp (ties: lower beam, then lower token id). A candidate ending in <eos> among the top
// K ranks becomes a finished hypothesis; the first K candidates not ending in <eos> are the next live beams. After
// max_steps tokens the live beams become cut-off hypotheses. Of all finished and cut-off hypotheses the K best by
// score (see gnmt_length_penalty) are kept.
//
// Stopping: a sentence stops early only when no live beam can still enter the K kept hypotheses: with K kept,
// every live beam's best achievable score, logp / max(lp(len + 1), lp(max_steps)) (log-probabilities only
// decrease and lp is monotone in the length), is <= the worst kept score. The result is therefore exactly that of
// running every sentence to max_steps (or until no beam is alive). beam_size 1 is greedy decoding: it stops at the
// first <eos>, whatever the length penalty, and equals greedy_decode.
//
// src: [N, Ls] ids, src_valid_len: [N]. Every sentence's live beams are rows of one decoder cache; a finished
// sentence leaves the batch. Returns per sentence its kept hypotheses, best score first (at most beam_size; at
// least one). Throws std::invalid_argument when beam_size < 1, length_penalty < 0 or is not finite, or
// max_steps < 0.
std::vector<std::vector<Hypothesis>> beam_search_hypotheses(Seq2SeqModel& model, const int64_t* src,
                                                            const int64_t* src_valid_len, int64_t N, int64_t Ls,
                                                            const DecodeOptions& opt);

// The best hypothesis of beam_search_hypotheses for each sentence, tokens only.
std::vector<std::vector<int64_t>> beam_search_batch(Seq2SeqModel& model, const int64_t* src,
                                                    const int64_t* src_valid_len, int64_t N, int64_t Ls,
                                                    const DecodeOptions& opt);

// beam_search_batch for one source sentence src [1, Ls].
std::vector<int64_t> beam_search(Seq2SeqModel& model, const int64_t* src, int64_t src_valid_len, int64_t Ls,
                                 const DecodeOptions& opt);

// Greedy decoding that re-runs the whole decoder on the prefix at every step (no cache, absolute positions);
// slow, kept as the reference the cached decoder is tested against.
std::vector<std::vector<int64_t>> greedy_decode_recompute(Seq2SeqModel& model, const int64_t* src,
                                                          const int64_t* src_valid_len, int64_t B, int64_t Ls,
                                                          const DecodeOptions& opt);

}  // namespace tfm
