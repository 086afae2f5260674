/// @file tfm/train.h
/// Training a transformer_seq2seq with the subword recipe (`tfm train --config`): SentencePiece, token batches,
/// label smoothing, warmup + inverse-sqrt decay, validation BLEU every epoch, the best model kept, checkpoints.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tfm {

/// What a progress callback receives: after every optimizer step (epoch_end false) and after each epoch's
/// validation (epoch_end true).
struct TrainProgress {
  bool epoch_end = false;
  int64_t epoch = 0, epochs = 0;      ///< current epoch (1-based) of the configured number
  int64_t batch = 0, num_batches = 0; ///< batches done in this epoch (1-based) of the epoch's total
  int64_t step = 0;                   ///< optimizer steps so far, over the whole run
  double train_loss = 0;              ///< mean cross-entropy per target token over this epoch so far (nats)
  double lr = 0;                      ///< learning rate of the last step
  double tokens_per_sec = 0;          ///< target tokens per second in this epoch
  double valid_loss = 0, valid_bleu = 0;  ///< epoch_end only: validation loss (nats/token) and BLEU (percent)
};

struct TrainRunOptions {
  bool resume = false;  ///< continue the run in out_dir from its checkpoint (config_path may then be empty)
  int threads = 0;      ///< OpenMP / BLAS threads (0 = all cores); results are bit-exact for equal threads
  /// Config keys to override, as `tfm train --set key=value`: each value is parsed as JSON (numbers,
  /// true/false), else taken as a string. With resume only epochs (extends the run), stop_after_steps (steps in
  /// all, from the run's start) and time_limit_minutes apply; train_config.json is rewritten with them.
  std::vector<std::pair<std::string, std::string>> overrides;
  bool print_progress = false;  ///< the CLI's progress lines on stderr
  /// Called on the training thread; an exception thrown from it stops training and propagates (the last
  /// checkpoint stays valid).
  std::function<void(const TrainProgress&)> progress;
};

struct TrainSummary {
  double best_valid_bleu = 0;  ///< percent
  int64_t best_epoch = 0, epochs_run = 0, steps = 0;
  double seconds = 0, tokens_per_sec = 0;
  bool stopped_early = false;  ///< early stopping, time or step limit
};

/// Trains into `out_dir` (new or empty; resume: the run's folder) from the JSON recipe at `config_path`
/// (configs/multi30k-en-fr.json; keys of RecipeConfig; data paths relative to data_dir, default $TFM_DATA_DIR or
/// ../shared/data). Writes spm.model, config.json + model.safetensors (best epoch; loadable by tfm::Translator),
/// train_config.json, checkpoint.safetensors, train_log.csv, loss.png. Throws tfm::FileNotFoundError for a
/// missing config or data file, std::invalid_argument for an override that resume cannot apply,
/// std::runtime_error for a bad config, a non-empty out_dir, a corrupt checkpoint or divergence.
TrainSummary train(const std::string& config_path, const std::string& out_dir, const TrainRunOptions& options = {});

}  // namespace tfm
