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

// The same for rows that a rank pads to its own longest source and target (a seq2seq shard of B rows costs about
// B * (src_cost * longest source + tgt_cost * longest target), src_cost / tgt_cost being the work per padded
// token): contiguous shards, in rank order; rank r's end is the boundary that minimises the larger of its padded
// cost and the cost of the rows left (padded as one shard) divided by the ranks left, so two ranks get the split
// with the smallest larger share. A pure function of its arguments, like shard_range; shards
// may be empty. Balancing the padded work rather than the token count matters when one side costs more per
// token (a target token also pays for the output projection over the vocabulary) or when the rows of a batch
// differ in length. Throws std::invalid_argument as shard_range does, for src_len and tgt_len of different
// sizes, and for a cost that is not positive.
std::pair<int64_t, int64_t> shard_range_padded(const std::vector<int64_t>& src_len,
                                               const std::vector<int64_t>& tgt_len, double src_cost,
                                               double tgt_cost, int world_size, int rank);

}  // namespace tfm::dist
