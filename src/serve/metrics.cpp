#include "serve/metrics.h"

#include <cstdio>
#include <sstream>

namespace tfm::serve {

namespace {
std::vector<double> exponential(double start, double factor, int n) {
  std::vector<double> b;
  for (int i = 0; i < n; ++i, start *= factor) b.push_back(start);
  return b;
}
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace

void Metrics::Histogram::observe(double v) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) {
      counts[i] += 1;
      break;
    }
  sum += v;
  count += 1;
}

Metrics::Metrics() {
  auto init = [](Histogram& h, std::vector<double> b) {
    h.bounds = std::move(b);
    h.counts.assign(h.bounds.size(), 0);
  };
  init(batch_size_, exponential(1, 2, 11));        // 1 .. 1024 inputs
  init(batch_tokens_, exponential(16, 2, 12));     // 16 .. 32768 tokens
  init(tokenization_, exponential(1e-5, 4, 10));   // 10 us .. 2.6 s
  init(queue_, exponential(1e-5, 4, 12));          // 10 us .. 42 s
  init(inference_, exponential(1e-4, 4, 10));      // 100 us .. 26 s
}

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_["route=\"" + route + "\""] += 1;
  if (status >= 400) failures_["route=\"" + route + "\",status=\"" + std::to_string(status) + "\""] += 1;
}
void Metrics::set_queue_size(int64_t tasks) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_size_ = tasks;
}
void Metrics::observe_batch(int64_t inputs, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  batch_size_.observe((double)inputs);
  batch_tokens_.observe((double)tokens);
}
void Metrics::observe_tokenization(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  tokenization_.observe(s);
}
void Metrics::observe_queue(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.observe(s);
}
void Metrics::observe_inference(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  inference_.observe(s);
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  auto counter = [&](const char* name, const char* help, const std::map<std::string, double>& m) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n";
    for (const auto& [labels, v] : m) o << name << "{" << labels << "} " << num(v) << "\n";
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    double cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      o << name << "_bucket{le=\"" << num(h.bounds[i]) << "\"} " << num(cum) << "\n";
    }
    o << name << "_bucket{le=\"+Inf\"} " << num(h.count) << "\n";
    o << name << "_sum " << num(h.sum) << "\n" << name << "_count " << num(h.count) << "\n";
  };
  counter("tfm_request_count", "Requests received, by route.", requests_);
  counter("tfm_request_failure", "Requests answered with a 4xx/5xx status, by route and status.", failures_);
  o << "# HELP tfm_queue_size Inputs waiting in the batching queue.\n# TYPE tfm_queue_size gauge\ntfm_queue_size "
    << queue_size_ << "\n";
  histogram("tfm_batch_size", "Inputs per model batch.", batch_size_);
  histogram("tfm_batch_tokens", "Padded tokens per model batch.", batch_tokens_);
  histogram("tfm_tokenization_duration_seconds", "Tokenization time per request.", tokenization_);
  histogram("tfm_queue_duration_seconds", "Time an input waited for its batch.", queue_);
  histogram("tfm_inference_duration_seconds", "Model time per batch.", inference_);
  return o.str();
}

}  // namespace tfm::serve
