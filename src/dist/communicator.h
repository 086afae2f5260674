// Communicator: the collectives data-parallel training needs (rank, world_size, in-place all-reduce sums,
// broadcast, barrier, abort), over Open MPI when the process was started by mpirun and tfm was built with
// TFM_MPI, otherwise a one-process implementation (rank 0 of 1; every collective is a no-op).
//
// Every blocking call has a deadline (timeout_seconds(), default 600 s, env TFM_COLLECTIVE_TIMEOUT): a peer that
// hangs (or a rank stuck far behind) ends the whole job with a one-line message and MPI_Abort (exit code 3), so
// a job never waits forever. A rank that dies is detected by mpirun itself, which then ends every rank.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tfm::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // data[n] = sum over ranks of each rank's data[n], in place; sent in chunks of at most chunk_elements() so
  // counts stay far below MPI's int limit. Every rank must call with the same n. With two ranks the sum is
  // a + b on both (commutative), so replicas stay bit-identical.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  // Non-blocking all_reduce_sum of float data[n], n <= chunk_elements(): starts the sum (every rank must start
  // the same sums in the same order) and returns at once; data must stay untouched until wait_all(). MPI moves
  // non-blocking collectives on only inside MPI calls, so progress() (cheap, never blocks) should be called now
  // and then while computing; wait_all() blocks until every started sum is done (deadline as for the blocking
  // calls). The sums are those all_reduce_sum makes of the same ranges. One process: all three do nothing.
  virtual void start_all_reduce_sum(float* data, int64_t n) = 0;
  virtual void progress() = 0;
  virtual void wait_all() = 0;
  // Rank `root`'s bytes[n] copied to every rank (n must agree on every rank).
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Prints "tfm: error: <message>" (rank-prefixed when world_size > 1) and ends every rank with `code`.
  [[noreturn]] virtual void abort(int code, const std::string& message) = 0;

  // Point to point, for batch jobs that gather their results on rank 0 (tfm embed / translate under mpirun):
  // bytes[n] to rank `dest` / from rank `source`, matched by `tag` (>= 0, below kProgressTag), in chunks of at
  // most chunk_elements() bytes. Both block until done or until wait_s seconds pass (<= 0: timeout_seconds()),
  // then abort the job with a message. The one-process communicator has no peer and throws std::logic_error.
  virtual void send(const void* data, int64_t bytes, int dest, int tag, double wait_s = 0) = 0;
  virtual void receive(void* data, int64_t bytes, int source, int tag, double wait_s = 0) = 0;

  // Progress of a batch job, summed on rank 0. A rank other than 0 reports its count of work done now and then
  // with post_progress (non-blocking: a report is skipped while the previous one is still in flight; the
  // `final` one waits for every earlier one and is always sent, blocking). Rank 0 calls poll_progress, which
  // takes every report that has arrived without blocking: latest[r] is rank r's latest count (latest must have
  // world_size() entries; entry 0 is left alone) and final[r] whether its final report came. Returns whether any
  // report arrived. Both are no-ops with one process (and post_progress on rank 0).
  virtual void post_progress(int64_t done, bool final) = 0;
  virtual bool poll_progress(std::vector<int64_t>& latest, std::vector<char>& final) = 0;
  static constexpr int kProgressTag = 1 << 14;

  void all_reduce_sum(std::vector<float>& v) { all_reduce_sum(v.data(), (int64_t)v.size()); }
  void all_reduce_sum(std::vector<double>& v) { all_reduce_sum(v.data(), (int64_t)v.size()); }
  // Broadcasts a string of any length (its size first).
  void broadcast(std::string& s, int root);
  void broadcast(std::vector<float>& v, int root) { broadcast(v.data(), (int64_t)(v.size() * sizeof(float)), root); }

  double timeout_seconds() const { return timeout_s_; }
  void set_timeout_seconds(double s) { timeout_s_ = s; }
  static int64_t chunk_elements() { return int64_t(1) << 24; }  // 64 MiB of floats per collective call

 protected:
  double timeout_s_ = 600;
};

// Sums a flat buffer (a model's gradients) over the ranks in buckets started while it is still being written, as
// PyTorch DDP's reducer does: the backward pass completes gradients from the last parameters to the first, so
// the buffer is cut from its end into buckets of bucket_elements (the last, lowest one shorter), and each bucket's
// sum starts as soon as ready_from() says it is final, overlapping the rest of the backward pass. Bucket bounds
// depend only on n and bucket_elements, so every rank starts the same sums in the same order whenever its own
// backward pass reaches them. Each element is summed once over the ranks, as one all_reduce_sum of the whole
// buffer sums it (with 2 ranks a + b: bit-identical; with more, the library may associate the sum differently
// for a bucket than for the whole buffer, the same on every rank).
class BucketedAllReduce {
 public:
  // data[n] is summed; bucket_elements in [1, Communicator::chunk_elements()] (std::invalid_argument otherwise).
  BucketedAllReduce(Communicator& comm, float* data, int64_t n, int64_t bucket_elements);
  // data[offset, n) is final on this rank: starts every not yet started bucket inside it (highest first) and
  // lets started ones progress. offset may only decrease from call to call.
  void ready_from(int64_t offset);
  // Starts the remaining buckets and waits for all: data then holds the sums.
  void finish();

 private:
  Communicator& comm_;
  float* data_;
  int64_t n_, bucket_, next_end_;  // buckets [.., next_end_) are not started yet
};

// The process-wide communicator: MPI (initialised on first use, finalised at exit) when built with MPI and
// launched by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK set), else the one-process implementation.
Communicator& world();
// Whether this build has the MPI implementation (CMake option TFM_MPI).
bool built_with_mpi();

// 64-bit FNV-1a hash of bytes, e.g. to compare parameter replicas across ranks.
uint64_t fnv1a(const void* data, int64_t bytes);

}  // namespace tfm::dist
