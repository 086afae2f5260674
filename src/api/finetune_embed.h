// tfm::finetune's pieces shared by its tasks (the training loop, data-parallel under mpirun, and its checkpoints,
// in api/finetune.cpp), and the embed task (api/finetune_embed.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "nn/params.h"
#include "tfm/finetune.h"
#include "train/finetune.h"

namespace tfm::api {

// TrainingArguments' optimizer and schedule fields of `o` for a run of total_steps optimizer steps: warmup_steps,
// else ceil(warmup_ratio * total_steps); the config's dropouts (training_dropouts) and o.seed.
FinetuneHyperparameters finetune_hyperparameters(const FinetuneOptions& o, int64_t total_steps,
                                                 const TrainingDropouts& dropouts);

// Optimizer steps an epoch: ceil(ceil(examples / o.batch_size) / o.gradient_accumulation_steps).
int64_t finetune_steps_per_epoch(const FinetuneOptions& o, int64_t examples);

// One evaluation: train_log.csv's eval columns by name, in the task's column order, and what picks the best epoch.
struct EvalResult {
  std::vector<std::pair<std::string, double>> metrics;
  double loss = 0, accuracy = 0, macro_f1 = 0;
  double score = 0;  // higher is better: the best epoch has the highest score,
  double tie = 0;    // and among equal scores the highest tie (the lower loss: tie = -loss)
};

// What the training loop (run_finetune_loop) needs of a task. The functions run on every rank unless said.
struct FinetuneTask {
  nn::ParamStore* params = nullptr;
  FinetuneOptimizer* optimizer = nullptr;
  Rng* dropout_rng = nullptr;             // the trainer's dropout generator (keyed by row while the loop runs)
  int64_t num_examples = 0;               // training examples: the loop shuffles and batches their indices
  std::vector<std::string> eval_columns;  // train_log.csv's eval columns (EvalResult::metrics' names, in order)
  bool has_eval = false;
  // Forward and backward of this rank's share of the global micro-batch of examples `idx` (in batch order):
  // adds scale * the gradient of the micro-batch's loss that the share accounts for to params' gradients
  // (summed over ranks, the micro-batch's gradient), and returns that share of its loss (summed over ranks, the
  // micro-batch's loss). Every rank is called, also when its share is empty. data_rng: the data's randomness
  // (mlm masking), drawn alike on every rank; keys: this micro-batch's dropout keys (key set by the loop; the
  // task sets rows to an id per row of its forward, the example and column, and calls to 0 before it).
  std::function<double(const std::vector<int64_t>& idx, float scale, Rng& data_rng, RowKeys& keys)> micro_step;
  std::function<EvalResult()> evaluate;  // rank 0 only
  std::function<void()> write_model;     // rank 0 only: the model folder from the current parameters
};

// The options a training state must have been written with to be resumed.
nlohmann::json run_fingerprint(const FinetuneOptions& o, int64_t train_examples, const std::vector<std::string>& labels);

// The Hugging Face Trainer's loop over `task`, shared by every task: a shuffle per epoch from o.seed, micro-batches
// of o.batch_size examples, o.gradient_accumulation_steps of them per optimizer step (each loss divided by the
// step's number of micro-batches), FinetuneOptimizer, evaluation after each epoch and the best epoch's model
// written, train_log.csv and loss.png, the training state saved at each epoch's end and every o.save_steps steps
// and resumed with o.resume (bit for bit on the same machine, thread count and world size). Fills summary's steps,
// final_train_loss, best_* and resumed_from_step.
//
// Data parallel under mpirun (dist::world()), as the seq2seq recipe (train/recipe.h): --batch-size is the global
// micro-batch, whatever the world size; each rank computes the share of it that dist::shard_range gives it by
// token count, the gradients are summed by one all-reduce per optimizer step, and clipping and AdamW run on every
// rank on the same sums, so replicas stay identical. Dropout masks are keyed by (seed, step, micro-batch, example)
// (RowKeys), not drawn in sequence, so they do not depend on which rank holds an example. Only rank 0 reads and
// writes o.out_dir (the state to resume, which it broadcasts, the model folder, the logs), evaluates (the others
// receive the metrics) and calls o.progress. The result equals one process on the same global batches within
// floating-point reduction tolerance.
void run_finetune_loop(const FinetuneOptions& o, const FinetuneTask& task, const nlohmann::json& fingerprint,
                       FinetuneSummary& summary);

// scipy.stats.pearsonr(a, b)[0], a and b [N] (0 when either is constant).
double pearson(const std::vector<double>& a, const std::vector<double>& b);
// scipy.stats.spearmanr(a, b)[0]: the Pearson correlation of the ranks, ties given their average rank
// (scipy.stats.rankdata).
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// finetune() for task "embed" (see tfm/finetune.h), after the options, the data files and the output folder have
// been checked and the threads set.
FinetuneSummary finetune_embed(const std::string& model_dir, const FinetuneOptions& o);

}  // namespace tfm::api
