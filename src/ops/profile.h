// Light per-op timing of the inference forward (bench_encoder --breakdown): scoped OpTimer sections in the model
// code add their wall time to a process-wide table. Off by default; when off an OpTimer costs one relaxed atomic
// load and no clock read. Turned on by set_op_profiling(true) or TFM_PROFILE=1 in the environment (read once).
// Sections are timed on the calling thread around whole (internally parallel) ops, so nested timers would
// double-count: the models time disjoint sections only.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tfm::ops {

void set_op_profiling(bool on);
bool op_profiling();

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
    if (name_) t0_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() { stop(); }
  void stop() {
    if (!name_) return;
    record_op_time(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
    name_ = nullptr;
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace tfm::ops
