// One queue in front of the model: concurrent requests put their inputs in; one worker thread takes inputs with
// the same key (same operation and options) into batches of at most max_batch_tokens padded tokens
// (inputs x longest input) and at most max_real_tokens real tokens, and runs them. A request whose inputs do not
// fit one batch is split across batches. Batches are formed round robin over the waiting requests (one input of
// each per round, oldest request first), so a request queued behind a long one waits for at most one running
// batch, not for all of the long one's; the real-token cap bounds how long that running batch takes (the encoder
// runs unpadded: a batch costs about its real tokens).
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
  // Seconds the model ran batches holding this request's tasks (each batch counted once).
  double inference_s = 0;
  int64_t last_batch = -1;  // the batch last counted in inference_s
  // One task done: batch is the worker's batch number, batch_s how long that batch ran.
  void finish(std::exception_ptr e, int64_t batch = -1, double batch_s = 0);
  void wait();
};

// Where a request's time in BatchQueue::run went, in seconds: queue_s waiting (for a batch to start, or between
// its batches), inference_s in the batches that ran its tasks.
struct RunTimes {
  double queue_s = 0, inference_s = 0;
};

// What a batch runs: tasks batch together only with equal keys. An embedding server never makes translation keys
// and vice versa.
struct BatchKey {
  enum class Op : uint8_t {
    None,
    Embed,       // pooled embeddings, with the prompt of prompt_slot (a Pooling may exclude the prompt)
    EmbedAll,    // every token's embedding
    Attention,   // the web page's attention maps
    Logits,      // a sequence-classification head
    Sparse,      // SPLADE of a masked-LM head
    Translate,   // one batch per language pair and beam size
    Generation,  // the tasks of one /translate request with generation fields (its options kept by the server)
  };
  Op op = Op::None;
  int64_t prompt_slot = 0;  // Embed: the request's prompt (0: the server's own)
  int64_t pair = 0;         // Translate: index of the language pair served
  int64_t beam_size = 0;    // Translate, Attention (0: the model's default)
  int64_t generation = 0;   // Generation: the request's id
  bool operator==(const BatchKey&) const = default;
};

// One input of one request.
struct Task {
  BatchKey key;                     // tasks batch together only with the same key
  int64_t tokens = 0;               // sequence length, padding excluded
  std::vector<int64_t> ids, token_type_ids;
  std::string target_prefix;        // translation: the text the translation starts with ("" = none)
  // Results, written by the runner.
  std::vector<float> vector;        // pooled embedding [D] or token embeddings [tokens, H]
  std::string text;                 // translation
  std::vector<std::string> alternatives;  // translation with num_hypotheses > 1: the 2nd.. best hypotheses
  std::string json;                 // attention (web page)
  std::shared_ptr<RequestState> state;
  std::chrono::steady_clock::time_point queued;
};

class BatchQueue {
 public:
  // runner(batch): fills each task's results or throws (the error goes to every request in the batch).
  using Runner = std::function<void(std::vector<Task*>& batch)>;
  // max_real_tokens: the real-token cap of a batch (0: max_batch_tokens); kMaxRealTokens by default: past ~2k
  // rows a GEMM gains no more speed from a taller batch, and a taller batch only makes newcomers wait longer.
  static constexpr int64_t kMaxRealTokens = 2048;
  BatchQueue(int64_t max_batch_tokens, Runner runner, Metrics* metrics, int64_t max_real_tokens = kMaxRealTokens);
  ~BatchQueue();  // stop()
  // Queues the tasks (all of one request) and blocks until every one has run. Rethrows the first error.
  // client_gone (optional): checked before queueing and whenever a batch is formed; when it answers true, the
  // request's tasks that have not run are dropped and run() throws ApiError 499 "client_closed_request".
  RunTimes run(std::vector<Task>& tasks, std::function<bool()> client_gone = {});
  // Finishes the queued tasks, then stops the worker.
  void stop();
  int64_t max_batch_tokens() const { return max_batch_tokens_; }

 private:
  void worker();
  std::vector<Task*> take_batch();  // the next batch, removed from queue_ (non-empty queue_; mu_ held)
  const int64_t max_batch_tokens_;
  const int64_t max_real_tokens_;
  Runner runner_;
  Metrics* metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task*> queue_;
  int64_t batches_ = 0;  // batches run (worker thread only)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tfm::serve
