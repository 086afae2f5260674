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

std::pair<int64_t, int64_t> shard_range_padded(const std::vector<int64_t>& src_len,
                                               const std::vector<int64_t>& tgt_len, double src_cost,
                                               double tgt_cost, int world_size, int rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("shard_range_padded: rank " + std::to_string(rank) + " outside world_size " +
                                std::to_string(world_size));
  if (src_len.size() != tgt_len.size())
    throw std::invalid_argument("shard_range_padded: " + std::to_string(src_len.size()) + " source lengths but " +
                                std::to_string(tgt_len.size()) + " target lengths");
  if (!(src_cost > 0) || !(tgt_cost > 0)) throw std::invalid_argument("shard_range_padded: costs must be positive");
  for (size_t i = 0; i < src_len.size(); ++i)
    if (src_len[i] < 0 || tgt_len[i] < 0) throw std::invalid_argument("shard_range_padded: negative length");
  const int64_t n = (int64_t)src_len.size();
  // Padded cost of rows [b, e), and that of the rest [b, n) (by suffix maxima, computed once).
  std::vector<int64_t> suffix_src(n + 1, 0), suffix_tgt(n + 1, 0);
  for (int64_t i = n - 1; i >= 0; --i) {
    suffix_src[i] = std::max(suffix_src[i + 1], src_len[i]);
    suffix_tgt[i] = std::max(suffix_tgt[i + 1], tgt_len[i]);
  }
  auto cost = [&](int64_t rows, int64_t ls, int64_t lt) { return (double)rows * (src_cost * ls + tgt_cost * lt); };
  int64_t begin = 0;
  for (int r = 0; r < world_size; ++r) {
    int64_t end = n;
    if (r < world_size - 1) {
      // The boundary that minimises the larger of this shard's cost and the rest's (padded as one shard) spread
      // over the remaining ranks: for two ranks the best split there is.
      const int left = world_size - r - 1;
      double best = cost(n - begin, suffix_src[begin], suffix_tgt[begin]) / left;  // an empty shard
      int64_t ls = 0, lt = 0;
      end = begin;
      for (int64_t e = begin + 1; e <= n; ++e) {
        ls = std::max(ls, src_len[e - 1]), lt = std::max(lt, tgt_len[e - 1]);
        const double worst = std::max(cost(e - begin, ls, lt), cost(n - e, suffix_src[e], suffix_tgt[e]) / left);
        if (worst < best) best = worst, end = e;
      }
    }
    if (r == rank) return {begin, end};
    begin = end;
  }
  return {n, n};  // not reached
}

}  // namespace tfm::dist
