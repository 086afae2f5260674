// serve/batch_queue: batches formed round robin over waiting requests within the padded and real token budgets
// (issue 24 item 5: no waiting behind a long request's batches).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "serve/batch_queue.h"
#include "serve/metrics.h"

using namespace tfm::serve;

namespace {

// The tasks of one request, each tagged (ids[0]) with the request's tag.
std::vector<Task> tasks_of(int64_t tag, int n, int64_t tokens) {
  std::vector<Task> v(n);
  for (Task& t : v) {
    t.ids = {tag};
    t.tokens = tokens;
  }
  return v;
}

int64_t queue_size(const Metrics& m) {
  const std::string r = m.render();
  const std::string key = "\ntfm_queue_size ";
  const size_t at = r.find(key);
  return at == std::string::npos ? -1 : std::stoll(r.substr(at + key.size()));
}

template <class F>
bool eventually(F&& f) {
  for (int i = 0; i < 2000; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// A runner that records each batch's tags and holds the first batch until released.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> padded;  // inputs x longest, per batch
  std::vector<int64_t> real;
  void operator()(std::vector<Task*>& b) {
    std::unique_lock<std::mutex> lock(mu);
    std::vector<int64_t> tags;
    int64_t longest = 0, sum = 0;
    for (Task* t : b) {
      tags.push_back(t->ids[0]);
      longest = std::max(longest, t->tokens);
      sum += t->tokens;
      t->text = "ran";
    }
    batches.push_back(tags);
    padded.push_back((int64_t)b.size() * longest);
    real.push_back(sum);
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return batches.size();
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
};

}  // namespace

TEST(BatchQueue, ShortRequestJoinsTheNextBatchNotAfterALongOnesBatches) {
  Recorder rec;
  Metrics met;
  // 16 padded tokens a batch: 4 inputs of 4 tokens.
  BatchQueue q(16, [&](std::vector<Task*>& b) { rec(b); }, &met, 0);
  std::vector<Task> a = tasks_of(1, 1, 4), b = tasks_of(2, 10, 4), c = tasks_of(3, 1, 4);
  std::thread ta([&] { q.run(a); });
  ASSERT_TRUE(eventually([&] { return rec.count() == 1; }));  // a runs and holds the worker
  std::thread tb([&] { q.run(b); });
  ASSERT_TRUE(eventually([&] { return queue_size(met) == 10; }));
  std::thread tc([&] { q.run(c); });
  ASSERT_TRUE(eventually([&] { return queue_size(met) == 11; }));
  rec.release();
  ta.join(), tb.join(), tc.join();
  ASSERT_GE(rec.batches.size(), 2u);
  EXPECT_EQ(rec.batches[0], std::vector<int64_t>{1});
  // Round robin: b's oldest, c's only input, then b's next ones: c is in the batch right after the running one
  // (first come first served would put it after all three of b's batches).
  EXPECT_EQ(rec.batches[1], (std::vector<int64_t>{2, 3, 2, 2}));
  size_t total = 0;
  for (size_t i = 0; i < rec.batches.size(); ++i) {
    EXPECT_LE(rec.padded[i], 16) << "batch " << i;
    total += rec.batches[i].size();
  }
  EXPECT_EQ(total, 12u);
  for (const std::vector<Task>* v : {&a, &b, &c})
    for (const Task& t : *v) EXPECT_EQ(t.text, "ran");
}

TEST(BatchQueue, RealTokenCapSplitsBatchesAndAnOversizedInputRunsAlone) {
  Recorder rec;
  rec.released = true;
  Metrics met;
  // Padded budget large, real tokens at most 10 a batch: 4-token inputs go two by two; a 30-token input alone.
  BatchQueue q(1000, [&](std::vector<Task*>& b) { rec(b); }, &met, 10);
  std::vector<Task> a = tasks_of(1, 5, 4);
  q.run(a);
  std::vector<Task> big = tasks_of(2, 1, 30);
  q.run(big);
  ASSERT_EQ(rec.batches.size(), 4u);
  EXPECT_EQ(rec.real, (std::vector<int64_t>{8, 8, 4, 30}));
}

TEST(BatchQueue, RunnerErrorReachesEveryRequestOfTheBatch) {
  Recorder rec;
  Metrics met;
  std::atomic<int> calls{0};
  BatchQueue q(
      64,
      [&](std::vector<Task*>& b) {
        if (calls++ == 0) {  // the first batch holds the worker until both later requests wait
          rec(b);
          return;
        }
        throw std::runtime_error("model failed");
      },
      &met, 0);
  std::vector<Task> first = tasks_of(1, 1, 4), x = tasks_of(2, 1, 4), y = tasks_of(3, 1, 4);
  std::thread t0([&] { q.run(first); });
  ASSERT_TRUE(eventually([&] { return rec.count() == 1; }));
  std::string ex, ey;
  std::thread tx([&] {
    try {
      q.run(x);
    } catch (const std::exception& e) {
      ex = e.what();
    }
  });
  ASSERT_TRUE(eventually([&] { return queue_size(met) == 1; }));
  std::thread ty([&] {
    try {
      q.run(y);
    } catch (const std::exception& e) {
      ey = e.what();
    }
  });
  ASSERT_TRUE(eventually([&] { return queue_size(met) == 2; }));
  rec.release();
  t0.join(), tx.join(), ty.join();
  EXPECT_EQ(calls.load(), 2);  // x and y ran as one batch
  EXPECT_EQ(ex, "model failed");
  EXPECT_EQ(ey, "model failed");
}

TEST(BatchQueue, RunTimesCountEachOfARequestsBatchesOnce) {
  // Each batch sleeps 30 ms. The bounds below hold whatever the machine's speed: a batch lasts at least its
  // sleep, and a request's queue and model times add up to at most the time run() took.
  constexpr double kBatch = 0.030;
  Metrics met;
  std::atomic<int> batches{0};
  BatchQueue q(
      16,
      [&](std::vector<Task*>&) {
        ++batches;
        std::this_thread::sleep_for(std::chrono::duration<double>(kBatch));
      },
      &met, 0);
  auto timed = [&](std::vector<Task>& tasks, double& wall) {
    const auto t0 = std::chrono::steady_clock::now();
    const RunTimes t = q.run(tasks);
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return t;
  };
  // Three inputs of 4 tokens: one batch, counted once (three times would exceed the wall time).
  std::vector<Task> one = tasks_of(1, 3, 4);
  double wall = 0;
  RunTimes t = timed(one, wall);
  EXPECT_EQ(batches.load(), 1);
  EXPECT_GE(t.inference_s, kBatch);
  EXPECT_GE(t.queue_s, 0.0);
  EXPECT_LE(t.inference_s + t.queue_s, wall + 1e-6);
  // Six inputs: two batches (4 + 2), both counted.
  std::vector<Task> two = tasks_of(2, 6, 4);
  t = timed(two, wall);
  EXPECT_EQ(batches.load(), 3);
  EXPECT_GE(t.inference_s, 2 * kBatch);
  EXPECT_LE(t.inference_s + t.queue_s, wall + 1e-6);
}
