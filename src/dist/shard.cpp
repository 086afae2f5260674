#include "dist/shard.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tfm::dist {

std::pair<int64_t, int64_t> shard_range(const std::vector<int64_t>& tokens, int world_size, int rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("shard_range: rank " + std::to_string(rank) + " outside world_size " +
                                std::to_string(world_size));
  long double total = 0;
  for (int64_t t : tokens) {
    if (t < 0) throw std::invalid_argument("shard_range: negative token count");
    total += (long double)t;
  }
  const int64_t n = (int64_t)tokens.size();
  auto owner = [&](int64_t i, long double before) -> int {
    if (total <= 0) return (int)((i * world_size) / std::max<int64_t>(n, 1));  // all empty rows: split by count
    int r = (int)((before + (long double)tokens[i] / 2) * world_size / total);
    return r < world_size ? r : world_size - 1;
  };
  int64_t begin = n, end = n;
  long double before = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int r = owner(i, before);
    if (r == rank && begin == n) begin = i;
    if (r > rank) {
      end = i;
      break;
    }
    before += (long double)tokens[i];
  }
  if (begin == n) return {end, end};  // empty shard
  return {begin, end};
}

}  // namespace tfm::dist
