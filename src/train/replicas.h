// In-process data parallelism for training transformer_seq2seq: one step's batch split into shards
// that run at once, each on its own thread and its own copy of the model, every op of a shard on that one thread.
//
// A small model's ops are too small to share between threads (the d2l default: a few hundred kernels of 5-100 us
// per step, core/threading.h runs them serially), but its sentences are independent: with T threads a step opens
// one OpenMP region, shard s runs forward and backward on replica s (shard 0 on the model itself), and the
// replicas' parameter gradients are added into the model's element by element in shard order. The sum of the
// shards' gradients is the batch's (both losses the trainers use add over sentences: d2l's per-sequence mean, and
// the token mean over a given global denominator), up to float summation order; the result is deterministic for
// a given thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "models/seq2seq.h"

namespace tfm {

// How many shards a step of `rows` sentences runs as: the calling thread's OpenMP thread count, at most `rows`;
// 1 (the model alone, op-level threads) for a Hugging Face family (its replicas would need its loaded extras) or
// when the environment sets TFM_TRAIN_REPLICAS=0 (for measuring one against the other).
int replica_shards(const Seq2SeqModel& model, int64_t rows);

class ReplicaSet {
 public:
  explicit ReplicaSet(Seq2SeqModel& model) : model_(model) {}
  Seq2SeqModel& model() const { return model_; }
  // Runs shard(s, m) for s in [0, shards) on up to `shards` threads, each running its ops serially: m is the
  // model for s = 0 (its gradients are added to, as forward_backward does) and for s > 0 a replica (same config
  // and precision, created on first use) holding the model's current parameters and zero gradients. Then adds
  // every replica's gradients into the model's (for each element in shard order) and returns the shards' loss
  // results summed in shard order. An exception from a shard is rethrown (the lowest shard's) once all shards
  // have ended; the model's gradients are then unspecified.
  LossResult run(int shards, const std::function<LossResult(int shard, Seq2SeqModel& m)>& shard);

 private:
  Seq2SeqModel& model_;
  std::vector<std::unique_ptr<Seq2SeqModel>> replicas_;  // replicas_[s - 1] runs shard s
};

}  // namespace tfm
