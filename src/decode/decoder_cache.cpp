#include "decode/decoder_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/profile.h"

namespace tfm {
namespace {
// Scratch buffers beyond the blocks' own (nn::kNumStepScratch).
enum { kX = nn::kNumStepScratch, kProbsSelf, kProbsCross, kNumScratch };
}  // namespace

int64_t compact_decoder_cache(DecoderCache& cache) {
  const int64_t R = cache.batch, cap = cache.capacity, T = cache.steps, used = cache.kv_rows_used;
  if (used == 0 || cache.layers.empty()) return 0;
  const int64_t H = (int64_t)cache.layers[0].self_k.size() / used;
  std::vector<int64_t> to(used, -1);  // old buffer row -> new, -1: dropped
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < T; ++s) to[cache.kv_index[r * cap + s]] = 0;
  int64_t live = 0;
  for (int64_t i = 0; i < used; ++i)
    if (to[i] == 0) to[i] = live++;
  if (live == used) return 0;
  std::vector<nn::Buf*> bufs;
  for (auto& kv : cache.layers) bufs.insert(bufs.end(), {&kv.self_k, &kv.self_v});
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < (int64_t)bufs.size(); ++j) {
    float* p = bufs[j]->data();
    for (int64_t i = 0; i < used; ++i)  // to[i] <= i: moving down in order overwrites only rows already moved
      if (to[i] >= 0 && to[i] != i) std::memcpy(p + to[i] * H, p + i * H, sizeof(float) * H);
    bufs[j]->resize(live * H);
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < T; ++s) cache.kv_index[r * cap + s] = to[cache.kv_index[r * cap + s]];
  cache.kv_rows_used = live;
  return used - live;
}

namespace {
// Room for a step's cache.batch rows in every layer's self-attention buffers: first the rows no one reads are
// dropped; the buffers grow (to leave a quarter free, not by doubling) only when fewer than a quarter of
// them would then be free, so that compacting stays rare (each one moves at most 3/4 of the rows, and frees at
// least a quarter: a few of a step's products' worth of copying, amortised over many steps).
void make_room(DecoderCache& cache, int64_t H) {
  const int64_t B = cache.batch;
  if (cache.kv_rows_used + B <= cache.kv_rows_capacity) return;
  compact_decoder_cache(cache);
  const int64_t need = cache.kv_rows_used + B;
  if (4 * need <= 3 * cache.kv_rows_capacity) return;
  cache.kv_rows_capacity = std::max(cache.kv_rows_capacity + 1, need + need / 3 + 1);  // a quarter free
  for (auto& kv : cache.layers) {
    kv.self_k.reserve(cache.kv_rows_capacity * H);
    kv.self_v.reserve(cache.kv_rows_capacity * H);
  }
}
}  // namespace

void start_decoding(const Seq2SeqModel& model, DecoderCache& cache, const Tensor& enc_out,
                    const int64_t* src_valid_len, int64_t max_steps) {
  const auto& blocks = model.modules().decoder;
  const int64_t B = enc_out.size(0), Ls = enc_out.size(1), H = model.config().num_hiddens;
  cache.batch = B;
  cache.src_len = Ls;
  cache.steps = 0;
  cache.capacity = max_steps;
  cache.src_valid_len.assign(src_valid_len, src_valid_len + B);
  cache.cross_row.resize(B);
  for (int64_t b = 0; b < B; ++b) cache.cross_row[b] = b;
  cache.kv_index.assign(B * max_steps, 0);
  cache.kv_rows_used = 0;
  cache.layers.resize(blocks.size());
  // Greedy needs exactly B * max_steps rows; beam search reuses the rows its losing beams leave (decode_step).
  // Reserved, not touched: a row's pages are in memory once a step writes it.
  cache.kv_rows_capacity = B * max_steps;
  for (auto& kv : cache.layers) {
    nn::Buf().swap(kv.self_k);
    nn::Buf().swap(kv.self_v);
    kv.self_k.reserve(cache.kv_rows_capacity * H);
    kv.self_v.reserve(cache.kv_rows_capacity * H);
  }
  decode_profile::Timer tm(decode_profile::kCrossKV);
  nn::Context ctx;
  ctx.packed = true;
  for (size_t l = 0; l < blocks.size(); ++l) blocks[l].start(ctx, cache.layers[l], enc_out.f32(), B * Ls);
  cache.scratch.resize(kNumScratch);
}

void decode_step(const Seq2SeqModel& model, DecoderCache& cache, const int64_t* tokens, float* logits,
                 PositionMode mode, std::vector<std::vector<float>>* cross_attention) {
  namespace dp = decode_profile;
  const Seq2SeqConfig& c = model.config();
  const int64_t B = cache.batch, Ls = cache.src_len, H = c.num_hiddens, nh = c.num_heads;
  const int64_t t = cache.steps, cap = cache.capacity;
  if (t >= cap) throw std::logic_error("decode_step: cache is full");
  cache.scratch.resize(kNumScratch);
  auto buf = [&](int i, int64_t n) {
    std::vector<float>& v = cache.scratch[i];
    if ((int64_t)v.size() < n) v.resize(n);
    return v.data();
  };
  float* x = buf(kX, B * H);
  if (dp::enabled()) dp::totals().add_step(B);
  {
    dp::Timer tm(dp::kOther);  // the blocks time their own parts
    model.embed_target_step(x, tokens, B, mode == PositionMode::kAbsolute ? t : 0);
  }
  make_room(cache, H);
  // This step's keys/values go to buffer rows base .. base + B - 1 of every layer.
  const int64_t base = cache.kv_rows_used;
  for (int64_t b = 0; b < B; ++b) cache.kv_index[b * cap + t] = base + b;
  nn::StepArgs a;
  a.rows = B;
  a.base = base;
  a.self.kv_len = t + 1;  // row b's key of step s is buffer row kv_index[b, s]
  a.self.rows = cache.kv_index.data();
  a.self.rows_stride = cap;
  a.cross.kv_len = Ls;  // row b reads its sentence's block, its first src_valid_len keys
  a.cross.blocks = cache.cross_row.data();
  a.cross.valid_lens = cache.src_valid_len.data();
  a.probs_self = cross_attention ? buf(kProbsSelf, B * nh * (t + 1)) : nullptr;
  a.probs_cross = cross_attention ? buf(kProbsCross, B * nh * Ls) : nullptr;
  a.scratch = cache.scratch.data();
  if (cross_attention) cross_attention->clear();
  nn::Context ctx;
  ctx.packed = true;
  const auto& blocks = model.modules().decoder;
  for (size_t l = 0; l < blocks.size(); ++l) {
    blocks[l].step(ctx, x, cache.layers[l], a);
    if (cross_attention) cross_attention->emplace_back(a.probs_cross, a.probs_cross + B * nh * Ls);
  }
  dp::Timer tm(dp::kOutProj);
  model.project_output(logits, x, B);
  cache.kv_rows_used = base + B;
  cache.steps++;
}

void reorder_cache(DecoderCache& cache, const std::vector<int64_t>& rows) {
  // Only indices move: row r now reads the keys/values of old row rows[r] (steps 0 .. steps-1) and its sentence.
  const int64_t R = (int64_t)rows.size(), cap = cache.capacity, T = cache.steps;
  std::vector<int64_t> idx(R * cap), cross(R), vl(R);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t o = rows[r];
    if (o < 0 || o >= cache.batch)
      throw std::out_of_range("reorder_cache: row " + std::to_string(o) + " of " + std::to_string(cache.batch));
    std::copy(cache.kv_index.begin() + o * cap, cache.kv_index.begin() + o * cap + T, idx.begin() + r * cap);
    cross[r] = cache.cross_row[o];
    vl[r] = cache.src_valid_len[o];
  }
  cache.kv_index.swap(idx);
  cache.cross_row.swap(cross);
  cache.src_valid_len.swap(vl);
  cache.batch = R;
}

}  // namespace tfm
