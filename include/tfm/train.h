/// @file tfm/train.h
/// Training a transformer_seq2seq: the subword recipe (`tfm train --config`: SentencePiece, token batches, label
/// smoothing, warmup + inverse-sqrt decay, validation BLEU every epoch, the best model kept, checkpoints; data
/// parallel under mpirun) and d2l.ai's word-level trainer (`tfm train --data`, document 002).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tfm/process_group.h"

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
  int threads = 0;      ///< OpenMP threads (0 = OMP_NUM_THREADS, else all cores); results are bit-exact for equal threads
  /// Config keys to override, as `tfm train --set key=value`: each value is parsed as JSON (numbers,
  /// true/false), else taken as a string. With resume only epochs (extends the run), stop_after_steps (steps in
  /// all, from the run's start) and time_limit_minutes apply; train_config.json is rewritten with them.
  std::vector<std::pair<std::string, std::string>> overrides;
  bool print_progress = false;  ///< the CLI's progress lines on stderr
  /// How error messages name the configuration ("" = config_path, or "overrides" without one), e.g. "command line"
  /// or "recipe.json with --set".
  std::string config_name;
  /// Called on the training thread; an exception thrown from it stops training and propagates (the last
  /// checkpoint stays valid).
  std::function<void(const TrainProgress&)> progress;
};


/// The keys a recipe config may set (for `--set` validation and messages), "comment" included.
std::vector<std::string> recipe_keys();

struct TrainSummary {
  double best_valid_bleu = 0;  ///< percent
  int64_t best_epoch = 0, epochs_run = 0, steps = 0;
  double seconds = 0, tokens_per_sec = 0;  ///< seconds: the whole run's, the invocations it was resumed from included
  double invocation_seconds = 0;           ///< this call's wall seconds (less than `seconds` after a resume)
  /// target tokens per second of the training steps alone (this invocation's; tokens_per_sec is over `seconds`,
  /// which also counts the subword training, data encoding, validation and checkpoints)
  double step_tokens_per_sec = 0;
  bool stopped_early = false;  ///< early stopping, time or step limit, or a stop request
  int stopped_by_signal = 0;   ///< the signal number given to request_train_stop when it ended the run, else 0
  int64_t stopped_in_epoch = 0;  ///< the epoch a step / time limit or a stop request cut short (0: none was)
};

/// Asks a running train() to stop after the optimizer step in progress: it saves a checkpoint, prints how to
/// resume (stderr, rank 0) and returns with stopped_by_signal = signo. Async-signal-safe (one atomic store), so a
/// SIGINT / SIGTERM handler may call it; under mpirun every rank stops at the same step. The request stays set.
void request_train_stop(int signo);

/// Trains into `out_dir` (new or empty; resume: the run's folder) from the JSON recipe at `config_path`
/// (configs/multi30k-en-fr.json; keys of RecipeConfig; data paths relative to data_dir, default $TFM_DATA_DIR or
/// ../shared/data). Writes spm.model, config.json + model.safetensors (best epoch; loadable by tfm::Translator),
/// train_config.json, checkpoint.safetensors, train_log.csv, loss.png. Throws tfm::FileNotFoundError for a
/// missing config or data file (checked before anything is written: "training data not found: PATH: no such file
/// (where it was looked for); how to point data_dir at it"), std::invalid_argument for an override that resume cannot apply,
/// std::runtime_error for a bad config, a non-empty out_dir, a corrupt checkpoint or divergence. Under mpirun
/// (world_size > 1) an error ends every rank with its message (the others would wait in a collective).
TrainSummary train(const std::string& config_path, const std::string& out_dir, const TrainRunOptions& options = {});

/// d2l.ai's train_seq2seq on a 'source<TAB>target' corpus (fra.txt), word vocabularies, Adam, gradient clipping.
struct D2lTrainOptions {
  std::string data;              ///< corpus file (fra.txt format; .gz accepted)
  std::string out;               ///< output folder: created, or empty (see overwrite)
  int64_t num_examples = 600;    ///< d2l reads lines 0..num_examples (0 = all)
  int64_t num_steps = 10;        ///< tokens per sequence (truncate / pad)
  int64_t num_hiddens = 32, num_layers = 2, num_heads = 4, ffn_num_hiddens = 64;
  double dropout = 0.1;
  int64_t batch_size = 64;       ///< sequences per minibatch
  double lr = 0.005;             ///< Adam learning rate
  int64_t epochs = 200;
  uint64_t seed = 0;             ///< initialisation, dropout and batch order
  float label_smoothing = 0.0f;  ///< of the cross-entropy (0 = d2l)
  bool progress = true;          ///< progress bar on stderr
  bool overwrite = false;        ///< train into an `out` folder that already holds files (its model files are replaced)
  /// The direction trained, written to config.json as source_lang / target_lang (the languages `tfm serve` offers).
  /// Both empty: read from a Tatoeba file name as manythings.org names them (English, TAB, the language of the
  /// name: fra.txt -> en, fr; deu.txt -> en, de), else none is written. Give both or neither.
  std::string source_lang, target_lang;
  int threads = 0;               ///< OpenMP threads (0 = OMP_NUM_THREADS, else all cores); bit-exact for equal threads
};

struct D2lTrainSummary {
  double loss = 0;            ///< last epoch: d2l's reported loss (sum of sequence losses / valid tokens)
  double token_loss = 0;      ///< last epoch: mean cross-entropy per valid target token (nats)
  double tokens_per_sec = 0;  ///< valid target tokens per second over the whole run
  double seconds = 0;
  int64_t epochs_run = 0;
  std::string source_lang, target_lang;  ///< the direction written to config.json ("": none was known)
};

/// Trains from scratch and writes out/{config.json, model.safetensors, src_vocab.txt, tgt_vocab.txt, train_log.csv,
/// loss.png} (each atomically; loadable by tfm::Translator). Deterministic for a given seed and thread count.
/// Throws std::invalid_argument for bad options (an `out` folder that holds files, unless overwrite) and under
/// mpirun (one process only), std::runtime_error for unreadable data and a non-finite loss (the message names the
/// epoch; the last good weights are saved first).
D2lTrainSummary train_d2l(const D2lTrainOptions& options);

}  // namespace tfm
