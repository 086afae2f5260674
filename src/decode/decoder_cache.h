// Incremental decoding of a Seq2SeqModel: the decoder cache and one step at a time, each decoder layer running
// its incremental path (nn::DecoderBlock::step) over the cached keys and values.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/seq2seq.h"
#include "nn/transformer_block.h"

namespace tfm {

// Decoder state for incremental decoding: per layer the projected self-attention keys/values of every step so
// far and the projected encoder keys/values (computed once per source sentence).
//
// Beam search reorders rows at every step; nothing is copied for that. Self-attention keys/values are appended,
// step after step, to one growing buffer per layer (`kv_rows_used` rows of H floats); row r of the batch reads
// its key/value of step s at buffer row kv_index[r * capacity + s]. Encoder keys/values stay one block per source
// sentence; row r reads block cross_row[r]. reorder_cache only permutes these small index arrays.
//
// Memory: the self-attention buffers hold `kv_rows_capacity` rows per layer (start_decoding: batch * max_steps, what
// greedy decoding fills exactly). When a step's rows do not fit, the rows no current row reads any more (beams
// that lost, sentences that left the batch) are dropped first (compact_decoder_cache); the buffers grow only when
// the rows still read need it. Beam hypotheses share their common prefix's rows, so a beam batch holds about
// (sentences x steps) rows instead of (sentences x beam x steps).
struct DecoderCache {
  int64_t batch = 0, src_len = 0, steps = 0, capacity = 0;
  int64_t kv_rows_capacity = 0;        // rows reserved in every layer's self_k / self_v
  std::vector<int64_t> src_valid_len;  // [batch] (of cross_row's sentence)
  std::vector<nn::LayerKV> layers;     // per decoder layer
  std::vector<int64_t> kv_index;       // [batch, capacity] buffer row of each step's key/value
  std::vector<int64_t> cross_row;      // [batch] encoder block of each row
  int64_t kv_rows_used = 0;
  std::vector<std::vector<float>> scratch;  // step work buffers (reused, not reallocated)
};

// Prepares `cache` for up to max_steps decoder steps over enc_out [B, Ls, H] (Seq2SeqModel::encode).
void start_decoding(const Seq2SeqModel& model, DecoderCache& cache, const Tensor& enc_out,
                    const int64_t* src_valid_len, int64_t max_steps);
// One decoder step for tokens [B]: appends to the cache and writes logits [B, tgt_vocab_size].
// cross_attention, when non-null, receives each layer's cross-attention weights [B, heads, 1, Ls].
// Throws std::logic_error when the cache is full, std::invalid_argument past max_len, std::out_of_range for a
// token outside the target vocabulary.
void decode_step(const Seq2SeqModel& model, DecoderCache& cache, const int64_t* tokens, float* logits,
                 PositionMode mode, std::vector<std::vector<float>>* cross_attention = nullptr);
// Drops the self-attention keys/values that no row of the batch reads (kv_index of rows 0 .. batch - 1, steps
// 0 .. steps - 1): the others move down in their order, byte for byte, and kv_index is renumbered, so decoding
// goes on with the same values. Returns the rows dropped. decode_step calls it when its rows do not fit.
int64_t compact_decoder_cache(DecoderCache& cache);
// Keeps cache rows `rows` (new row r = old row rows[r]); for beam search. Throws std::out_of_range for a row
// outside the batch.
void reorder_cache(DecoderCache& cache, const std::vector<int64_t>& rows);

}  // namespace tfm
