// The modern training recipe for transformer_seq2seq on a real corpus (Multi30k): SentencePiece subwords,
// token-count batches with length bucketing, label-smoothed cross-entropy (mean over valid target tokens),
// Adam(beta2 = 0.98) or AdamW with linear warmup + inverse-square-root decay, gradient clipping, validation loss
// and BLEU after every epoch, the best model kept, early stopping, and crash-safe checkpoints that resume
// bit-exactly.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/optim.h"
#include "nn/params.h"

namespace tfm {

// One run, as read from a JSON config file (configs/multi30k-en-fr.json) with command-line overrides. Paths of
// data files are relative to data_dir unless absolute.
struct RecipeConfig {
  std::string data_dir;  // default: $TFM_DATA_DIR or ../shared/data
  std::string train_src = "multi30k/train.en.gz", train_tgt = "multi30k/train.fr.gz";
  std::string valid_src = "multi30k/val.en.gz", valid_tgt = "multi30k/val.fr.gz";
  // The direction, written to the model's config.json (what tfm serve offers). "": the language suffix of
  // train_src / train_tgt (train.en.gz: "en"), else none.
  std::string source_lang, target_lang;
  int64_t train_limit = 0;   // use only the first N training pairs (0 = all)
  int64_t valid_limit = 0;   // use only the first N validation pairs (0 = all)
  // subwords
  int64_t vocab_size = 8000;
  std::string subword_type = "unigram";
  // model (transformer_seq2seq keys)
  int64_t num_hiddens = 256, num_layers = 3, num_heads = 4, ffn_num_hiddens = 1024;
  double dropout = 0.1;
  bool norm_first = true, shared_embeddings = true, attention_bias = true;
  std::string activation = "relu";
  int64_t max_len = 128;     // longest sequence (subword tokens incl. <eos>); longer ones are truncated
  int64_t num_steps = 80;    // decoding limit written to config.json
  // optimisation
  int64_t max_tokens = 4096; // source + target tokens (with padding) per batch
  int64_t epochs = 10;
  double lr = 1e-3;          // peak learning rate, reached after warmup_steps
  int64_t warmup_steps = 1000;
  double beta1 = 0.9, beta2 = 0.98, adam_eps = 1e-9, weight_decay = 0.0;
  bool adamw = false;
  float label_smoothing = 0.1f;
  double clip_norm = 1.0;
  uint64_t seed = 1;
  int64_t patience = 3;          // stop after this many epochs without a better validation BLEU
  double time_limit_minutes = 0; // stop (after a checkpoint) when exceeded; 0 = none
  int64_t checkpoint_every = 200;  // optimizer steps between checkpoints (and at each epoch end)
  int64_t stop_after_steps = 0;    // stop once the run has made this many optimizer steps in all, counted from its
                                   // start also after a resume (0 = no limit)
  int threads = 0;
  // "fp32", or "bf16": the Linear products of training take bf16 inputs and weights (fp32 accumulation and
  // outputs; fp32 master weights, gradients, optimizer state and reductions). bf16 needs a CPU with bf16
  // instructions (AVX512_BF16 or AMX); elsewhere the run is refused before it starts.
  std::string precision = "fp32";
  // Resume only, not a train_config.json key: continue the run to this many epochs instead of its saved `epochs`
  // (0 = keep), so a finished run can be extended. train_config.json is rewritten with the new value.
  int64_t resume_epochs = 0;

  // Throws std::runtime_error "<file>: unknown key 'k'" / "<file>: key 'k' must be ...".
  static RecipeConfig from_json(const nlohmann::json& j, const std::string& file);
  // The keys from_json accepts (for --set).
  static const std::vector<std::string>& known_keys();
  nlohmann::json to_json() const;
};

struct RecipeResult {
  double best_valid_bleu = 0;
  int64_t best_epoch = 0, epochs_run = 0, steps = 0;
  double seconds = 0, train_tokens_per_sec = 0;
  double invocation_seconds = 0;  // this call's wall time (`seconds` adds the resumed runs' before it)
  // Target tokens per second of this invocation's training steps alone (batch, forward, backward, all-reduce,
  // update), without the subword training, data encoding, validation and checkpoints that `seconds` includes.
  double step_tokens_per_sec = 0;
  bool stopped_early = false;
  int stopped_by_signal = 0;
  int64_t stopped_in_epoch = 0;  // the epoch a step / time limit or a signal cut short (0: none was)  // SIGINT / SIGTERM when request_training_stop() ended the run (checkpoint saved)
};

// Asks a running train_recipe to stop after the optimizer step in progress: it saves a checkpoint, says how to
// resume and returns with stopped_by_signal = signo. Async-signal-safe (one atomic store): `tfm train` calls it
// from its SIGINT / SIGTERM handler. Under mpirun every rank stops at the same step once any rank got the request.
void request_training_stop(int signo);
// The pending request's signal number (0: none); it stays set, so a later run in the process stops too.
int training_stop_requested();

// Data parallel under mpirun (dist::world()): rank 0 trains the subword model and initialises (or restores) the
// weights and broadcasts both; each step every rank computes the gradients of its work-balanced shard of the
// same global batch (dist::shard_range_padded; max_tokens counts the whole batch, so the schedule does not depend on
// world_size), divided by the global batch's target tokens, and one all-reduce sums them; clipping and the
// update follow on every rank. Dropout masks are keyed by (seed, step, sentence). Only rank 0 reads out_dir
// and writes files; it validates, and the others receive the result. Resuming with another world_size is
// allowed: the global batches and masks are the same, so the run continues within floating-point tolerance of
// the original (bit-exact only with the same machine, threads and world_size).
// Trains into out_dir: spm.model, config.json + model.safetensors (the best epoch), train_config.json,
// checkpoint.safetensors (latest state), train_log.csv and loss.png. With resume = true, continues from
// out_dir/checkpoint.safetensors and out_dir/train_config.json and reaches the same weights bit for bit as an
// uninterrupted run (same threads), train_log.csv and loss.png included (the checkpoint keeps the running loss
// of the epoch in progress). Throws std::runtime_error on bad data/config, a corrupt checkpoint, or a non-finite
// loss (after keeping the last good checkpoint); "training data not found: <path> ('<file>' relative to data_dir
// <dir>, <where data_dir came from>); ..." before writing anything when a data file is missing. A fresh run that
// throws before its first checkpoint removes the files it wrote (and out_dir if it created it), so that the same
// call can be retried.
RecipeResult train_recipe(const RecipeConfig& config, const std::string& out_dir, bool resume, bool progress = true);

// What train_recipe reports to a callback: after every optimizer step (epoch_end false) and after each epoch's
// validation (epoch_end true). Losses in nats per target token, BLEU in percent.
struct RecipeProgress {
  bool epoch_end = false;
  int64_t epoch = 0, epochs = 0, batch = 0, num_batches = 0, step = 0;  // batch: done in this epoch (1-based)
  double train_loss = 0, lr = 0, tokens_per_sec = 0;                   // this epoch so far
  double valid_loss = 0, valid_bleu = 0;                               // epoch_end only
};
// train_recipe with a progress callback, called on the training thread; an exception thrown by it stops the run
// and propagates (checkpoints written so far stay valid).
RecipeResult train_recipe(const RecipeConfig& config, const std::string& out_dir, bool resume, bool progress,
                          const std::function<void(const RecipeProgress&)>& on_progress);

// What a checkpoint restores besides parameters and Adam moments: the position in the data and the run's history.
struct TrainState {
  int64_t step = 0, epoch = 1, batch_pos = 0;  // next batch: order(epoch)[batch_pos]
  int64_t bad_epochs = 0, best_epoch = 0, tokens = 0;
  double best_bleu = -1, elapsed = 0;          // elapsed: seconds of training before this invocation
  nlohmann::json log = nlohmann::json::array();  // one object per finished epoch
  std::string dropout_rng;                     // Rng::state() of the dropout generator
  // The epoch in progress so far (its batches before batch_pos), so that its train_log.csv row after a resume
  // equals an uninterrupted run's: sum of token losses, target tokens, seconds of training.
  double epoch_loss = 0, epoch_seconds = 0;
  int64_t epoch_tokens = 0;
  int64_t world_size = 1;                      // ranks that wrote it (absent in older checkpoints: 1)
};

// Reads checkpoint.safetensors ("model.<name>" tensors, "optim.exp_avg", "optim.exp_avg_sq", metadata "state")
// into params and adam and returns the state, validated against an epoch of num_batches batches. Throws
// std::runtime_error "<path>: corrupt checkpoint: ..." on any missing, mistyped, mis-sized or out-of-range item.
TrainState read_checkpoint(const std::string& path, nn::ParamStore& params, Adam& adam, int64_t num_batches);

// learning rate at optimizer step `step` (1-based): lr * min(step / warmup, sqrt(warmup / step)).
double inverse_sqrt_lr(double peak, int64_t warmup, int64_t step);

}  // namespace tfm
