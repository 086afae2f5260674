// Entity-level scores of sequence labelling as seqeval computes them (the metric of transformers' run_ner):
// chunks of IOB / IOB2 / IOBES tags by seqeval's default (lenient, non-strict) rules, micro-averaged.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace tfm {

// seqeval.metrics.sequence_labeling.get_entities (prefix tags, suffix=False): the sentences joined with an "O"
// between them, each chunk as (type, begin, end) with begin/end inclusive offsets into that joined sequence. A
// tag's prefix is its first character (B, I, E, S, O) and its type what follows the first '-' ("_" when none);
// a chunk ends and starts by seqeval's end_of_chunk / start_of_chunk (e.g. "I-PER" after "O" starts a chunk, a
// change of type ends one).
std::vector<std::tuple<std::string, int64_t, int64_t>> seqeval_entities(const std::vector<std::vector<std::string>>& seqs);

struct SeqevalScores {
  double precision = 0, recall = 0, f1 = 0;  // micro averages over entities; 0 where undefined (zero_division)
  int64_t true_entities = 0, pred_entities = 0, correct = 0;
};
// seqeval precision_score / recall_score / f1_score (average="micro", mode=None) of `pred` against `gold`
// (sentences of tags; the two must have the same shape, not checked).
SeqevalScores seqeval_scores(const std::vector<std::vector<std::string>>& gold,
                             const std::vector<std::vector<std::string>>& pred);

}  // namespace tfm
