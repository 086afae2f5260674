#include "dist/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

#ifdef TFM_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // only the C API is used
#include <mpi.h>
#endif
#ifdef TFM_MPI_LAZY
#include <atomic>

#include "core/shared_library.h"
#endif

namespace tfm::dist {

uint64_t fnv1a(const void* data, int64_t bytes) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void Communicator::broadcast(std::string& s, int root) {
  int64_t n = (int64_t)s.size();
  broadcast(&n, sizeof n, root);
  if (rank() != root) s.resize((size_t)n);
  if (n > 0) broadcast(s.data(), n, root);
}

BucketedAllReduce::BucketedAllReduce(Communicator& comm, float* data, int64_t n, int64_t bucket_elements)
    : comm_(comm), data_(data), n_(n), bucket_(bucket_elements), next_end_(n) {
  if (bucket_elements < 1 || bucket_elements > Communicator::chunk_elements())
    throw std::invalid_argument("BucketedAllReduce: bucket_elements " + std::to_string(bucket_elements) +
                                " is outside [1, " + std::to_string(Communicator::chunk_elements()) + "]");
}

void BucketedAllReduce::ready_from(int64_t offset) {
  if (comm_.world_size() == 1) return;
  // Whole buckets of [offset, n) that have not started: bucket k covers [n - (k + 1) b, n - k b), clipped at 0.
  while (next_end_ > 0 && std::max<int64_t>(next_end_ - bucket_, 0) >= offset) {
    const int64_t begin = std::max<int64_t>(next_end_ - bucket_, 0);
    comm_.start_all_reduce_sum(data_ + begin, next_end_ - begin);
    next_end_ = begin;
  }
  comm_.progress();
}

void BucketedAllReduce::finish() {
  if (comm_.world_size() == 1) return;
  ready_from(0);
  comm_.wait_all();
}

namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void start_all_reduce_sum(float*, int64_t) override {}
  void progress() override {}
  void wait_all() override {}
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code, const std::string& message) override {
    std::fprintf(stderr, "tfm: error: %s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(code);
  }
  void send(const void*, int64_t, int dest, int, double) override {
    throw std::logic_error("send to rank " + std::to_string(dest) + ": this process is the only rank");
  }
  void receive(void*, int64_t, int source, int, double) override {
    throw std::logic_error("receive from rank " + std::to_string(source) + ": this process is the only rank");
  }
  void post_progress(int64_t, bool) override {}
  bool poll_progress(std::vector<int64_t>&, std::vector<char>&) override { return false; }
};

#ifdef TFM_MPI_LAZY
// Open MPI (and its ~7 dependencies) is opened when a process started by mpirun first needs its communicator
// (core/shared_library.h), so that a process run without mpirun never loads it. RTLD_GLOBAL: Open MPI's
// components (plug-ins it opens itself) resolve their symbols in it. TFM_MPI_SONAME: the SONAME of the libmpi
// the build compiled against (CMakeLists.txt sets TFM_MPI_LAZY for Open MPI only).
const SharedLibrary& mpi_library() {
  static const SharedLibrary lib(TFM_MPI_SONAME, "runs under mpirun", /*global=*/true);
  return lib;
}
TFM_LAZY_FUNCTION(mpi_library(), MPI_Init_thread);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Comm_set_errhandler);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Comm_rank);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Comm_size);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Finalized);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Finalize);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Iallreduce);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Testall);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Ibcast);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Ibarrier);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Abort);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Isend);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Irecv);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Test);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Iprobe);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Recv);
TFM_LAZY_FUNCTION(mpi_library(), MPI_Error_string);

// Open MPI's predefined handles are addresses of objects in the library: mpi.h defines MPI_COMM_WORLD as
// &(ompi_mpi_comm_world) cast to MPI_Comm, MPI_FLOAT as &(ompi_mpi_float), and so on. These objects of the same
// names, found before the header's declarations, give that address from the opened library instead.
class LazyObject {
 public:
  explicit LazyObject(const char* name) : name_(name) {}
  void* operator&() const {
    void* p = addr_.load(std::memory_order_acquire);
    if (!p) {
      p = mpi_library().symbol(name_);
      addr_.store(p, std::memory_order_release);
    }
    return p;
  }

 private:
  const char* name_;
  mutable std::atomic<void*> addr_{nullptr};
};
const LazyObject ompi_mpi_comm_world{"ompi_mpi_comm_world"};
const LazyObject ompi_mpi_byte{"ompi_mpi_byte"};
const LazyObject ompi_mpi_float{"ompi_mpi_float"};
const LazyObject ompi_mpi_double{"ompi_mpi_double"};
const LazyObject ompi_mpi_int64_t{"ompi_mpi_int64_t"};
const LazyObject ompi_mpi_op_sum{"ompi_mpi_op_sum"};
const LazyObject ompi_mpi_errors_return{"ompi_mpi_errors_return"};
const LazyObject ompi_request_null{"ompi_request_null"};
#endif

#ifdef TFM_HAVE_MPI
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    // Errors come back as codes (turned into an abort with a message) instead of MPI's default handler.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    std::atexit([] {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin) MPI_Finalize();
    });
  }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  void all_reduce_sum(float* data, int64_t n) override { reduce(data, n, MPI_FLOAT, sizeof(float)); }
  void all_reduce_sum(double* data, int64_t n) override { reduce(data, n, MPI_DOUBLE, sizeof(double)); }
  void start_all_reduce_sum(float* data, int64_t n) override {
    if (n > chunk_elements()) throw std::invalid_argument("start_all_reduce_sum: more than chunk_elements()");
    pending_.push_back(MPI_REQUEST_NULL);
    check(MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &pending_.back()),
          "all-reduce");
  }
  void progress() override {
    if (pending_.empty()) return;
    int done = 0;
    check(MPI_Testall((int)pending_.size(), pending_.data(), &done, MPI_STATUSES_IGNORE), "all-reduce");
    if (done) pending_.clear();
  }
  void wait_all() override {
    for (MPI_Request& r : pending_) wait(r, "all-reduce");
    pending_.clear();
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    for (int64_t off = 0; off < bytes; off += chunk_elements()) {
      const int count = (int)std::min<int64_t>(chunk_elements(), bytes - off);
      MPI_Request req;
      check(MPI_Ibcast((char*)data + off, count, MPI_BYTE, root, MPI_COMM_WORLD, &req), "broadcast");
      wait(req, "broadcast");
    }
  }
  void barrier() override {
    MPI_Request req;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "barrier");
    wait(req, "barrier");
  }
  [[noreturn]] void abort(int code, const std::string& message) override {
    std::fprintf(stderr, "tfm: error: rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  void send(const void* data, int64_t bytes, int dest, int tag, double wait_s) override {
    for (int64_t off = 0; off < bytes || off == 0; off += chunk_elements()) {
      const int count = (int)std::min<int64_t>(chunk_elements(), bytes - off);
      MPI_Request req;
      check(MPI_Isend((const char*)data + off, count, MPI_BYTE, dest, tag, MPI_COMM_WORLD, &req), "send");
      wait(req, "send", wait_s);
      if (bytes == 0) break;
    }
  }
  void receive(void* data, int64_t bytes, int source, int tag, double wait_s) override {
    for (int64_t off = 0; off < bytes || off == 0; off += chunk_elements()) {
      const int count = (int)std::min<int64_t>(chunk_elements(), bytes - off);
      MPI_Request req;
      check(MPI_Irecv((char*)data + off, count, MPI_BYTE, source, tag, MPI_COMM_WORLD, &req), "receive");
      wait(req, "receive", wait_s);
      if (bytes == 0) break;
    }
  }
  void post_progress(int64_t done, bool final) override {
    if (rank_ == 0) return;
    if (progress_pending_) {
      int finished = 0;
      check(MPI_Test(&progress_req_, &finished, MPI_STATUS_IGNORE), "progress report");
      if (!finished && !final) return;  // the previous report is still in flight: skip this one
      if (!finished) wait(progress_req_, "progress report");
      progress_pending_ = false;
    }
    progress_msg_[0] = done;
    progress_msg_[1] = final ? 1 : 0;
    check(MPI_Isend(progress_msg_, 2, MPI_INT64_T, 0, kProgressTag, MPI_COMM_WORLD, &progress_req_), "progress report");
    progress_pending_ = true;
    if (final) {
      wait(progress_req_, "progress report");
      progress_pending_ = false;
    }
  }
  bool poll_progress(std::vector<int64_t>& latest, std::vector<char>& final) override {
    if (rank_ != 0) return false;
    latest.resize((size_t)size_, 0);
    final.resize((size_t)size_, 0);
    bool any = false;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      check(MPI_Iprobe(MPI_ANY_SOURCE, kProgressTag, MPI_COMM_WORLD, &flag, &st), "progress poll");
      if (!flag) return any;
      int64_t msg[2] = {0, 0};
      check(MPI_Recv(msg, 2, MPI_INT64_T, st.MPI_SOURCE, kProgressTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "progress poll");
      latest[(size_t)st.MPI_SOURCE] = msg[0];
      if (msg[1]) final[(size_t)st.MPI_SOURCE] = 1;
      any = true;
    }
  }

 private:
  void reduce(void* data, int64_t n, MPI_Datatype type, size_t elem) {
    for (int64_t off = 0; off < n; off += chunk_elements()) {
      const int count = (int)std::min<int64_t>(chunk_elements(), n - off);
      MPI_Request req;
      check(MPI_Iallreduce(MPI_IN_PLACE, (char*)data + off * elem, count, type, MPI_SUM, MPI_COMM_WORLD, &req),
            "all-reduce");
      wait(req, "all-reduce");
    }
  }
  void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    abort(3, std::string(what) + " failed: " + std::string(text, len));
  }
  // Non-blocking collective + polling: the deadline turns a hung peer into an abort instead of a hang, and the
  // short sleeps leave the core to the peer when ranks share cores (--oversubscribe).
  void wait(MPI_Request& req, const char* what, double wait_s = 0) {
    const double limit = wait_s > 0 ? wait_s : timeout_s_;
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (spins > 2000) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit)
          abort(3, std::string(what) + ": no answer from the other ranks for " + std::to_string((int)limit) +
                       " s (a rank hung or died; TFM_COLLECTIVE_TIMEOUT sets the limit); ending the job");
      }
    }
  }
  int rank_ = 0, size_ = 1;
  MPI_Request progress_req_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> pending_;  // started non-blocking sums, in start order
  bool progress_pending_ = false;
  int64_t progress_msg_[2] = {0, 0};
};
#endif

bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK"); }

}  // namespace

bool built_with_mpi() {
#ifdef TFM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Communicator& world() {
  static std::unique_ptr<Communicator> comm = [] {
    std::unique_ptr<Communicator> c;
#ifdef TFM_HAVE_MPI
    if (launched_by_mpirun()) c = std::make_unique<MpiCommunicator>();
#endif
    if (!c) c = std::make_unique<SingleProcess>();
    if (const char* t = std::getenv("TFM_COLLECTIVE_TIMEOUT")) {
      char* end = nullptr;
      double s = std::strtod(t, &end);
      if (end == t || *end || !(s > 0)) c->abort(2, std::string("TFM_COLLECTIVE_TIMEOUT='") + t + "' is not a positive number of seconds");
      c->set_timeout_seconds(s);
    }
    return c;
  }();
  return *comm;
}

}  // namespace tfm::dist
