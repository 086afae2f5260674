#include "serve/batch_queue.h"

#include <algorithm>

#include "serve/requests.h"

namespace tfm::serve {

void RequestState::finish(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu);
  if (e && !error) error = e;
  if (--remaining == 0) cv.notify_all();
}

void RequestState::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return remaining == 0; });
  if (error) std::rethrow_exception(error);
}

BatchQueue::BatchQueue(int64_t max_batch_tokens, Runner runner, Metrics* metrics)
    : max_batch_tokens_(max_batch_tokens), runner_(std::move(runner)), metrics_(metrics) {
  thread_ = std::thread([this] { worker(); });
}

BatchQueue::~BatchQueue() { stop(); }

void BatchQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {
std::exception_ptr client_gone_error() {
  return std::make_exception_ptr(
      ApiError(499, "client_closed_request", "the client closed the connection before the request's batch ran"));
}
}  // namespace

void BatchQueue::run(std::vector<Task>& tasks, std::function<bool()> client_gone) {
  if (tasks.empty()) return;
  if (client_gone && client_gone()) std::rethrow_exception(client_gone_error());
  auto state = std::make_shared<RequestState>();
  state->remaining = (int64_t)tasks.size();
  state->client_gone = std::move(client_gone);
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw std::runtime_error("the server is shutting down");
    for (Task& t : tasks) {
      t.state = state;
      t.queued = now;
      queue_.push_back(&t);
    }
    if (metrics_) metrics_->set_queue_size((int64_t)queue_.size());
  }
  cv_.notify_one();
  state->wait();
}

void BatchQueue::worker() {
  for (;;) {
    std::vector<Task*> batch;
    std::vector<std::shared_ptr<RequestState>> dropped;  // one entry per dropped task
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      // Requests whose client has gone lose their queued tasks (their inference would be for nobody).
      for (auto it = queue_.begin(); it != queue_.end();) {
        RequestState& st = *(*it)->state;
        if (st.client_gone && !st.abandoned) st.abandoned = st.client_gone();
        if (st.abandoned) {
          dropped.push_back((*it)->state);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& st : dropped) st->finish(client_gone_error());
    dropped.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty()) {
        if (metrics_) metrics_->set_queue_size(0);
        continue;
      }
      // The oldest task always goes; later ones with its key join while inputs x longest <= max_batch_tokens.
      const int64_t key = queue_.front()->key;
      int64_t longest = 0;
      for (auto it = queue_.begin(); it != queue_.end();) {
        Task* t = *it;
        const int64_t l = std::max(longest, t->tokens);
        if (t->key == key && (batch.empty() || (int64_t)(batch.size() + 1) * l <= max_batch_tokens_)) {
          batch.push_back(t);
          longest = l;
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      if (metrics_) metrics_->set_queue_size((int64_t)queue_.size());
    }
    const auto start = std::chrono::steady_clock::now();
    int64_t longest = 0;
    for (Task* t : batch) {
      longest = std::max(longest, t->tokens);
      if (metrics_) metrics_->observe_queue(std::chrono::duration<double>(start - t->queued).count());
    }
    std::exception_ptr err;
    try {
      runner_(batch);
    } catch (...) {
      err = std::current_exception();
    }
    if (metrics_) {
      metrics_->observe_inference(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      metrics_->observe_batch((int64_t)batch.size(), (int64_t)batch.size() * longest);
    }
    for (Task* t : batch) {
      auto s = t->state;  // the request may return (and free the task) as soon as finish() runs
      s->finish(err);
    }
  }
}

}  // namespace tfm::serve
