#include "core/profile.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace tfm {
namespace {

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TFM_PROFILE");
    return e && *e && std::strcmp(e, "0") != 0;
  }()};
  return on;
}
std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}
std::vector<OpStat>& table() {
  static std::vector<OpStat> t;
  return t;
}

}  // namespace

void set_op_profiling(bool on) { enabled().store(on, std::memory_order_relaxed); }
bool op_profiling() { return enabled().load(std::memory_order_relaxed); }

bool op_profiling_cpu_time() {
  static const bool cpu = [] {
    const char* e = std::getenv("TFM_PROFILE");
    return e && std::strcmp(e, "cpu") == 0;
  }();
  return cpu;
}

double op_profile_clock() {
  if (op_profiling_cpu_time()) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void record_op_time(const char* name, double seconds) {
  std::lock_guard<std::mutex> lock(table_mutex());
  for (OpStat& s : table())
    if (s.name == name) {
      s.seconds += seconds;
      s.calls++;
      return;
    }
  table().push_back({name, seconds, 1});
}

std::vector<OpStat> op_profile() {
  std::lock_guard<std::mutex> lock(table_mutex());
  return table();
}

void reset_op_profile() {
  std::lock_guard<std::mutex> lock(table_mutex());
  table().clear();
}

}  // namespace tfm
