// tfm::process_group and tfm::group over dist::world() (include/tfm/process_group.h).
#include "tfm/process_group.h"

#include <cstdlib>
#include <vector>

#include "dist/communicator.h"
#include "dist/shard.h"

namespace tfm {

ProcessGroup process_group() { return ProcessGroup{dist::world().rank(), dist::world().world_size()}; }

namespace group {

std::pair<int64_t, int64_t> shard(const std::vector<int64_t>& weights, int rank) {
  const dist::Communicator& c = dist::world();
  return dist::shard_range(weights, c.world_size(), rank < 0 ? c.rank() : rank);
}

void abort(int code, const std::string& message) {
  dist::world().abort(code, message);
  std::_Exit(code);  // not reached (Communicator::abort does not return)
}

void barrier() { dist::world().barrier(); }

bool all(bool ok) {
  // The count of failed ranks; small whole numbers are exact in double.
  double failed = ok ? 0 : 1;
  dist::world().all_reduce_sum(&failed, 1);
  return failed == 0;
}

void send(const void* data, int64_t bytes, int dest, int tag, double wait_s) {
  dist::world().send(data, bytes, dest, tag, wait_s);
}
void receive(void* data, int64_t bytes, int source, int tag, double wait_s) {
  dist::world().receive(data, bytes, source, tag, wait_s);
}

namespace {
struct Reports {
  std::vector<int64_t> latest;
  std::vector<char> final;
};
Reports& reports() {
  static Reports r;
  return r;
}
}  // namespace

void report_progress(int64_t done, bool final) { dist::world().post_progress(done, final); }

int64_t progress_sum(int64_t own, int* finished) {
  dist::Communicator& c = dist::world();
  Reports& r = reports();
  r.latest.resize((size_t)c.world_size(), 0);
  r.final.resize((size_t)c.world_size(), 0);
  c.poll_progress(r.latest, r.final);
  int64_t sum = own;
  int n = 0;
  for (int k = 1; k < c.world_size(); ++k) sum += r.latest[(size_t)k], n += r.final[(size_t)k] ? 1 : 0;
  if (finished) *finished = n;
  return sum;
}

}  // namespace group
}  // namespace tfm
