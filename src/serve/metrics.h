// Server metrics in the Prometheus text exposition format (version 0.0.4): counters, one gauge and histograms
// with cumulative buckets, thread-safe.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tfm::serve {

class Metrics {
 public:
  Metrics();
  // tfm_request_count{route}: every request; tfm_request_failure{route, status}: answers >= 400.
  void count_request(const std::string& route, int status);
  void set_queue_size(int64_t tasks);                 // tfm_queue_size (inputs waiting for a batch)
  void observe_batch(int64_t inputs, int64_t tokens);  // tfm_batch_size, tfm_batch_tokens (padded)
  void observe_tokenization(double seconds);          // tfm_tokenization_duration_seconds (per request)
  void observe_queue(double seconds);                 // tfm_queue_duration_seconds (per input)
  void observe_inference(double seconds);             // tfm_inference_duration_seconds (per batch)
  std::string render() const;                         // the /metrics body

 private:
  struct Histogram {
    std::vector<double> bounds, counts;  // counts[i]: observations <= bounds[i] (non-cumulative here)
    double sum = 0, count = 0;
    void observe(double v);
  };
  mutable std::mutex mu_;
  std::map<std::string, double> requests_, failures_;  // label string -> count
  int64_t queue_size_ = 0;
  Histogram batch_size_, batch_tokens_, tokenization_, queue_, inference_;
};

}  // namespace tfm::serve
