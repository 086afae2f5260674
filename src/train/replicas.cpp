#include "train/replicas.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "core/profile.h"
#include "core/threading.h"

namespace tfm {

int replica_shards(const Seq2SeqModel& model, int64_t rows) {
  static const bool enabled = [] {
    const char* e = std::getenv("TFM_TRAIN_REPLICAS");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  if (!enabled || model.config().family != "d2l" || rows < 2) return 1;
  return (int)std::min<int64_t>(get_num_threads(), rows);
}

LossResult ReplicaSet::run(int shards, const std::function<LossResult(int shard, Seq2SeqModel& m)>& shard) {
  shards = std::max(shards, 1);
  while ((int)replicas_.size() < shards - 1) {
    replicas_.push_back(std::make_unique<Seq2SeqModel>(model_.config()));
    replicas_.back()->set_precision(model_.precision());
  }
  std::vector<LossResult> results(shards);
  std::vector<std::exception_ptr> errors(shards);
  std::vector<float>& g0 = model_.params().all_grad();
  const std::vector<float>& p0 = model_.params().all_data();
  const int64_t n = (int64_t)g0.size();
#pragma omp parallel num_threads(shards)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t lo = n * tid / nt, hi = n * (tid + 1) / nt;
    {
      // The model's current parameters into every replica, each thread copying its slice of the flat buffer.
      OpTimer t("step: replica copy");
      for (int s = 1; s < shards; ++s)
        std::memcpy(replicas_[s - 1]->params().all_data().data() + lo, p0.data() + lo, sizeof(float) * (hi - lo));
    }
#pragma omp barrier
    {
      SerialScope serial;  // every op of a shard on its thread (oneDNN too)
      for (int s = tid; s < shards; s += nt) {
        try {
          results[s] = shard(s, s == 0 ? model_ : *replicas_[s - 1]);
        } catch (...) {
          errors[s] = std::current_exception();
        }
      }
    }
#pragma omp barrier
    OpTimer t("step: replica gradient sum");
    // The gradient sum, each thread over its slice of the flat buffer: g0 += g1, then += g2, ...; each replica's
    // gradients are zeroed as they are read (their cache lines are at hand), ready for the next step: a replica's
    // gradients are zero whenever no run is in progress (a new model's are, and this pass runs after a failed
    // shard too).
    float* __restrict dst = g0.data();
    for (int s = 1; s < shards; ++s) {
      float* __restrict src = replicas_[s - 1]->params().all_grad().data();
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        dst[i] += src[i];
        src[i] = 0.0f;
      }
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  LossResult sum;
  for (const LossResult& r : results) {
    sum.loss_sum += r.loss_sum;
    sum.token_loss_sum += r.token_loss_sum;
    sum.num_tokens += r.num_tokens;
  }
  return sum;
}

}  // namespace tfm
