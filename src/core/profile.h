// The profilers of the project, off unless asked for.
//
// 1. Light per-op timing of the inference forward (bench_encoder --breakdown): scoped OpTimer sections in the model
// code add their wall time to a process-wide table. Off by default; when off an OpTimer costs one relaxed atomic
// load and no clock read. Turned on by set_op_profiling(true) or TFM_PROFILE=1 in the environment (read once).
// Sections are timed on the calling thread around whole (internally parallel) ops, so nested timers would
// double-count: the models time disjoint sections only. TFM_PROFILE=cpu times the calling thread's CPU time instead
// of wall time (CLOCK_THREAD_CPUTIME_ID): for sections that run on one thread, such as the training profile at one
// thread per rank or replica, it leaves out the time other processes take the core (a shared machine).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace tfm {

void set_op_profiling(bool on);
bool op_profiling();
// Whether OpTimer reads the calling thread's CPU time (TFM_PROFILE=cpu) rather than wall time.
bool op_profiling_cpu_time();
// The clock OpTimer reads, in seconds: steady wall time, or the calling thread's CPU time (op_profiling_cpu_time).
double op_profile_clock();

struct OpStat {
  std::string name;
  double seconds = 0;  // total wall time
  int64_t calls = 0;
};
std::vector<OpStat> op_profile();  // sections in first-seen order
void reset_op_profile();
void record_op_time(const char* name, double seconds);

// Times its scope (or until stop()) under `name` (a string literal) when profiling is on.
class OpTimer {
 public:
  explicit OpTimer(const char* name) : name_(op_profiling() ? name : nullptr) {
    if (name_) t0_ = op_profile_clock();
  }
  ~OpTimer() { stop(); }
  void stop() {
    if (!name_) return;
    record_op_time(name_, op_profile_clock() - t0_);
    name_ = nullptr;
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* name_;
  double t0_ = 0;
};

}  // namespace tfm

// 2. Wall-time breakdown of decoding, for profiling: set TFM_DECODE_PROFILE=1 and every beam_search_hypotheses /
// greedy_decode call adds to the totals; they are printed to stderr at exit. Off (one cached getenv) otherwise.
// The totals are atomic (relaxed adds): threads decoding at once (tfm serve, Python threads) may all add to them.
namespace tfm::decode_profile {

enum Part {
  kEncoder,       // Seq2SeqModel::encode
  kCrossKV,       // start_decoding: encoder keys/values of every decoder layer
  kSelfProj,      // decoder self-attention W_q, W_k, W_v, W_o
  kSelfAttn,      // self-attention over the cached steps
  kCrossProj,     // cross-attention W_q, W_o
  kCrossAttn,     // cross-attention over the encoder keys/values
  kFfn,           // position-wise FFN
  kOther,         // embedding, LayerNorm, residuals
  kOutProj,       // output projection to the vocabulary
  kLogSoftmaxTopK,// log-softmax normaliser and per-row top-2K
  kSelect,        // candidate ranking, hypotheses, stopping
  kReorder,       // cache reordering
  kNumParts
};

struct Totals {
  std::atomic<int64_t> nanoseconds[kNumParts] = {};
  std::atomic<int64_t> steps{0}, rows{0};
  void add_step(int64_t batch_rows) {
    steps.fetch_add(1, std::memory_order_relaxed);
    rows.fetch_add(batch_rows, std::memory_order_relaxed);
  }
  ~Totals() {
    if (steps == 0) return;
    double seconds[kNumParts];
    for (int i = 0; i < kNumParts; ++i) seconds[i] = 1e-9 * (double)nanoseconds[i].load();
    static const char* names[kNumParts] = {"encoder",     "cross K/V",   "self proj",   "self attn",
                                           "cross proj",  "cross attn",  "ffn",         "embed/LN/res",
                                           "output proj", "lse + top-k", "select",      "reorder"};
    double total = 0;
    for (double s : seconds) total += s;
    std::fprintf(stderr, "decode profile: %lld steps, %.1f rows/step, %.3f s timed\n", (long long)steps.load(),
                 (double)rows.load() / (double)steps.load(), total);
    for (int i = 0; i < kNumParts; ++i)
      std::fprintf(stderr, "  %-13s %8.3f s  %5.1f%%\n", names[i], seconds[i], 100.0 * seconds[i] / total);
  }
};

inline bool enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TFM_DECODE_PROFILE");
    return e && *e && *e != '0';
  }();
  return on;
}
inline Totals& totals() {
  static Totals t;
  return t;
}

// Adds the time from construction to destruction (or to next()) to a part; nothing when profiling is off.
class Timer {
 public:
  explicit Timer(Part p) : part_(p), on_(enabled()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  void next(Part p) {
    if (!on_) return;
    auto now = std::chrono::steady_clock::now();
    totals().nanoseconds[part_].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count(),
                                          std::memory_order_relaxed);
    start_ = now;
    part_ = p;
  }
  ~Timer() { next(part_); }

 private:
  Part part_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tfm::decode_profile
