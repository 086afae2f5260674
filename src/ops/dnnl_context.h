// The oneDNN CPU engine and this thread's stream, shared by every oneDNN call of the project (ops/gemm.cpp,
// ops/gemm_bf16.cpp). Internal to src/ops.
#pragma once
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

namespace tfm::ops {
dnnl::engine& dnnl_cpu_engine();
// A stream per thread: oneDNN does not promise that one stream may be used from several threads at once.
dnnl::stream& dnnl_cpu_stream();

// A matmul primitive and the layout of its scratchpad (scratchpad_mode::user: each calling thread passes its own).
struct CachedMatmul {
  dnnl::matmul matmul;
  dnnl::memory::desc scratchpad;
};

// The one primitive cache of src/ops (PackedLinear per weight and row count, gemm_bf16 per shape): primitives by
// key, created once (about 0.1 ms each) by `make` under the lock, thread-safe. Bounded: shapes that keep varying
// (length bucketing) clear it when it holds max_entries.
template <class Key>
class MatmulCache {
 public:
  explicit MatmulCache(size_t max_entries = 4096) : max_(max_entries) {}
  template <class Make>
  CachedMatmul get(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second;
    if (map_.size() >= max_) map_.clear();
    CachedMatmul m = make();
    map_.emplace(key, m);
    return m;
  }

 private:
  std::mutex mu_;
  std::map<Key, CachedMatmul> map_;
  size_t max_;
};
}  // namespace tfm::ops
