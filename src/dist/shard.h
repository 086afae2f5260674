// How data-parallel training splits one global batch across ranks: a pure function of the batch (its rows in
// order, with their token counts), world_size and rank, so the global batch, and hence the update, is the same
// whatever world_size is. Rows stay contiguous (batches are length-sorted, so shards pad little).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace tfm::dist {

// The half-open range [begin, end) of rows that `rank` computes. Row i goes to rank
// floor((tokens before i + tokens[i] / 2) * world_size / total tokens), clamped to world_size - 1: shards are
// disjoint, cover every row, are balanced by token count, and may be empty (fewer rows than ranks).
// Throws std::invalid_argument for world_size < 1, rank outside [0, world_size) or a negative token count.
std::pair<int64_t, int64_t> shard_range(const std::vector<int64_t>& tokens, int world_size, int rank);

}  // namespace tfm::dist
