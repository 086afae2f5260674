// Decoding for transformer_seq2seq: greedy and beam search on the decoder's key/value cache.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/seq2seq.h"

namespace tfm {

struct DecodeOptions {
  int64_t beam_size = 1;        // 1 = greedy
  float length_penalty = 0.0f;  // GNMT alpha: score = sum log p / ((5 + len) / 6)^alpha, len = generated tokens
  int64_t max_steps = 10;       // decoding stops after this many tokens (num_steps) or at <eos>
  int64_t bos_id = 2, eos_id = 3;
  PositionMode position_mode = PositionMode::kAbsolute;
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

// Beam search for one source sentence src [1, Ls]. Returns the best hypothesis by length-penalised score, without
// <eos>.
std::vector<int64_t> beam_search(Seq2SeqModel& model, const int64_t* src, int64_t src_valid_len, int64_t Ls,
                                 const DecodeOptions& opt);

// Batched beam search: src [N, Ls], src_valid_len [N]. Every sentence's live beams are rows of one decoder cache;
// a hypothesis ending in <eos> leaves its beam, and a sentence with beam_size finished hypotheses (or none alive)
// leaves the batch. With beam_size 1 this is greedy decoding.
std::vector<std::vector<int64_t>> beam_search_batch(Seq2SeqModel& model, const int64_t* src,
                                                    const int64_t* src_valid_len, int64_t N, int64_t Ls,
                                                    const DecodeOptions& opt);

// Greedy decoding that re-runs the whole decoder on the prefix at every step (no cache, absolute positions);
// slow, kept as the reference the cached decoder is tested against.
std::vector<std::vector<int64_t>> greedy_decode_recompute(Seq2SeqModel& model, const int64_t* src,
                                                          const int64_t* src_valid_len, int64_t B, int64_t Ls,
                                                          const DecodeOptions& opt);

}  // namespace tfm
