// Training loop for transformer_seq2seq on a d2l-style 'source<TAB>target' corpus (document 002's train_seq2seq).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/seq2seq.h"
#include "text/nmt_data.h"
#include "train/optim.h"
#include "train/replicas.h"

namespace tfm {

struct TrainOptions {
  std::string data;           // corpus file (fra.txt format; .gz accepted)
  std::string out;            // output folder: model files, train_log.csv, loss.png
  int64_t num_examples = 600; // d2l reads lines 0..num_examples (0 = all)
  int64_t num_steps = 10;
  int64_t num_hiddens = 32, num_layers = 2, num_heads = 4, ffn_num_hiddens = 64;
  double dropout = 0.1;
  int64_t batch_size = 64;
  double lr = 0.005;
  int64_t epochs = 200;
  uint64_t seed = 0;
  double grad_clip = 1.0;     // global-norm clipping threshold theta
  float label_smoothing = 0.0f;
  bool progress = true;       // progress bar on stderr
  bool overwrite = false;     // allow an `out` folder that already holds files (its model files are replaced)
  // The direction trained, written to config.json as source_lang / target_lang (what tfm serve offers); "": none.
  std::string source_lang, target_lang;
};

// Throws std::invalid_argument for bad options, including an `out` folder that is not empty unless
// `overwrite`; std::runtime_error for unreadable data and on a non-finite loss (the last good weights are saved).
struct TrainResult {
  double loss = 0;           // last epoch: d2l's reported loss = sum of sequence losses / valid tokens
  double token_loss = 0;     // last epoch: mean cross-entropy per valid target token
  double tokens_per_sec = 0; // valid target tokens per second over the whole run
  double seconds = 0;
  int64_t epochs_run = 0;
};

// Trains from scratch and writes DIR/{config.json, model.safetensors, src_vocab.txt, tgt_vocab.txt,
// train_log.csv, loss.png} (each atomically). Deterministic for a given seed and thread count.
// Throws std::runtime_error on bad data or options, and when the loss becomes non-finite: the message names the
// epoch, and the last good weights (end of the previous epoch) are saved first.
TrainResult train_seq2seq(const TrainOptions& options);

// One optimisation step of train_seq2seq's loop (the seam the tests drive with a fixed batch): rows `rows` of
// `arrays` trimmed to their longest valid source / target, decoder input <bos> (bos_id) + labels[:, :-1], d2l's
// loss (per-sequence mean over num_steps, summed), backward, clipping to options.grad_clip, one Adam step.
// Returns the batch's loss before the step; when it is not finite nothing is updated (the caller stops).
// Matches d2lnmt.train_seq2seq's loop body; `buffers` is reused across calls.
// With more than one OpenMP thread the rows run as that many shards at once (train/replicas.h, contiguous runs of
// `rows`, each trimmed to its own longest source / target): the same gradients up to float summation order.
// Dropout masks then come from dropout_rng for shard 0 and from generators seeded by one draw of it each for the
// others, so a run is deterministic for a given seed and thread count.
struct TrainBatchBuffers {
  struct Shard {
    std::vector<int64_t> src, src_vl, dec, lab, tgt_vl;
  };
  std::vector<Shard> shards;
  std::vector<Rng> shard_rngs;
  std::unique_ptr<ReplicaSet> replicas;
};
LossResult train_step(Seq2SeqModel& model, Adam& adam, const NmtArrays& arrays, const std::vector<int64_t>& rows,
                      int64_t bos_id, const TrainOptions& options, Rng* dropout_rng, TrainBatchBuffers& buffers);

}  // namespace tfm
