// The HTTP server's connection workers. cpp-httplib runs each connection on one task-queue thread for as long as
// the connection lives, and a keep-alive client's idle connection holds its thread until the keep-alive timeout
// (5 s). With a fixed pool, more keep-alive clients than threads left new clients waiting seconds for a thread,
// and never answered 429. This queue starts a thread whenever no idle one can take a connection (up to
// max_threads; past it connections queue), so the pool is not the limit: the server's own concurrency limit
// (--max-concurrent-requests, checked per request) answers 429 at once.
#pragma once
#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tfm::serve {

class WorkerPool : public httplib::TaskQueue {
 public:
  explicit WorkerPool(size_t max_threads) : max_threads_(max_threads) {}
  ~WorkerPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    // Each waiting job needs an idle thread of its own; a thread woken but not yet running still counts as idle.
    if (jobs_.size() > idle_ && threads_.size() < max_threads_) threads_.emplace_back([this] { work(); });
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();  // enqueue is not called once httplib shuts its queue down
  }

  size_t threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_.size();
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [this] { return !jobs_.empty() || stopping_; });
      --idle_;
      if (jobs_.empty()) return;  // stopping, and every queued connection has been served
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace tfm::serve
