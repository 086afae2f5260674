#include "serve/batch_queue.h"

#include <algorithm>

#include "serve/requests.h"
#include "tfm/pipeline.h"

namespace tfm::serve {

void RequestState::finish(std::exception_ptr e, int64_t batch, double batch_s) {
  std::lock_guard<std::mutex> lock(mu);
  if (e && !error) error = e;
  if (batch >= 0 && batch != last_batch) {
    inference_s += batch_s;
    last_batch = batch;
  }
  if (--remaining == 0) cv.notify_all();
}

void RequestState::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return remaining == 0; });
  if (error) std::rethrow_exception(error);
}

BatchQueue::BatchQueue(int64_t max_batch_tokens, Runner runner, Metrics* metrics, int64_t max_real_tokens)
    : max_batch_tokens_(max_batch_tokens),
      max_real_tokens_(max_real_tokens > 0 ? max_real_tokens : max_batch_tokens),
      runner_(std::move(runner)),
      metrics_(metrics) {
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

RunTimes BatchQueue::run(std::vector<Task>& tasks, std::function<bool()> client_gone) {
  if (tasks.empty()) return {};
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
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - now).count();
  return {std::max(0.0, total - state->inference_s), state->inference_s};
}

std::vector<Task*> BatchQueue::take_batch() {
  // Requests in the order of their oldest queued task, each with its tasks of the batch's key, oldest first.
  const BatchKey key = queue_.front()->key;
  std::vector<std::pair<RequestState*, std::vector<size_t>>> requests;
  for (size_t i = 0; i < queue_.size(); ++i) {
    Task* t = queue_[i];
    if (t->key != key) continue;
    auto it = std::find_if(requests.begin(), requests.end(), [&](const auto& r) { return r.first == t->state.get(); });
    if (it == requests.end()) {
      requests.push_back({t->state.get(), {}});
      it = requests.end() - 1;
    }
    it->second.push_back(i);
  }
  // Round robin over the requests, one task each per round: a short request queued behind a long one joins the
  // next batch instead of waiting for all of the long one's batches. A request stops contributing at its first
  // task that does not fit (its tasks keep their order); the oldest task always goes.
  std::vector<Task*> batch;
  std::vector<bool> taken(queue_.size(), false), done(requests.size(), false);
  BatchLimits limits;  // the library's rule of what fits a batch (tfm/pipeline.h)
  limits.max_tokens = max_batch_tokens_;
  limits.max_real_tokens = max_real_tokens_;
  BatchBudget budget(limits);
  for (size_t round = 0;; ++round) {
    bool added = false;
    for (size_t r = 0; r < requests.size(); ++r) {
      if (done[r] || round >= requests[r].second.size()) continue;
      const size_t i = requests[r].second[round];
      Task* t = queue_[i];
      if (!budget.fits(t->tokens)) {
        done[r] = true;
        continue;
      }
      batch.push_back(t);
      taken[i] = true;
      budget.add(t->tokens);
      added = true;
    }
    if (!added) break;
  }
  std::deque<Task*> rest;
  for (size_t i = 0; i < queue_.size(); ++i)
    if (!taken[i]) rest.push_back(queue_[i]);
  queue_.swap(rest);
  return batch;
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
      // Each request is asked once per scan (a request of many inputs has many queued tasks).
      std::vector<const RequestState*> asked;
      for (auto it = queue_.begin(); it != queue_.end();) {
        RequestState& st = *(*it)->state;
        if (st.client_gone && !st.abandoned && std::find(asked.begin(), asked.end(), &st) == asked.end()) {
          asked.push_back(&st);
          st.abandoned = st.client_gone();
        }
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
      batch = take_batch();
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
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (metrics_) {
      metrics_->observe_inference(seconds);
      metrics_->observe_batch((int64_t)batch.size(), (int64_t)batch.size() * longest);
    }
    const int64_t number = batches_++;
    for (Task* t : batch) {
      auto s = t->state;  // the request may return (and free the task) as soon as finish() runs
      s->finish(err, number, seconds);
    }
  }
}

}  // namespace tfm::serve
