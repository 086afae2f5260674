// One queue in front of the model: concurrent requests put their inputs in; one worker thread takes inputs with
// the same key (same operation and options) into batches of at most max_batch_tokens padded tokens
// (inputs x longest input) and runs them. A request whose inputs do not fit one batch is split across batches.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/metrics.h"

namespace tfm::serve {

// What a request waits on: how many of its tasks are still open and the first error.
struct RequestState {
  std::mutex mu;
  std::condition_variable cv;
  int64_t remaining = 0;
  std::exception_ptr error;
  // Whether the client has gone (serve/connection.h); called by the worker only. Once true, the request's tasks
  // still queued are dropped without running.
  std::function<bool()> client_gone;
  bool abandoned = false;
  void finish(std::exception_ptr e);
  void wait();
};

// One input of one request.
struct Task {
  int64_t key = 0;                  // tasks batch together only with the same key
  int64_t tokens = 0;               // sequence length, padding excluded
  std::vector<int64_t> ids, token_type_ids;
  std::string target_prefix;        // translation: the text the translation starts with ("" = none)
  // Results, written by the runner.
  std::vector<float> vector;        // pooled embedding [D] or token embeddings [tokens, H]
  std::string text;                 // translation
  std::string json;                 // attention (web page)
  std::shared_ptr<RequestState> state;
  std::chrono::steady_clock::time_point queued;
};

class BatchQueue {
 public:
  // runner(batch): fills each task's results or throws (the error goes to every request in the batch).
  using Runner = std::function<void(std::vector<Task*>& batch)>;
  BatchQueue(int64_t max_batch_tokens, Runner runner, Metrics* metrics);
  ~BatchQueue();  // stop()
  // Queues the tasks (all of one request) and blocks until every one has run. Rethrows the first error.
  // client_gone (optional): checked before queueing and whenever a batch is formed; when it answers true, the
  // request's tasks that have not run are dropped and run() throws ApiError 499 "client_closed_request".
  void run(std::vector<Task>& tasks, std::function<bool()> client_gone = {});
  // Finishes the queued tasks, then stops the worker.
  void stop();
  int64_t max_batch_tokens() const { return max_batch_tokens_; }

 private:
  void worker();
  const int64_t max_batch_tokens_;
  Runner runner_;
  Metrics* metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task*> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tfm::serve
