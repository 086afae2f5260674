// tfm train: train the d2l encoder-decoder Transformer on a 'source<TAB>target' corpus.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "train/trainer.h"

namespace tfm::cli {

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto threads = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a transformer_seq2seq (document 002, d2l.ai) English -> French on a fra.txt-style corpus; "
               "writes the model folder, train_log.csv and loss.png into --out");
  cmd->add_option("--data", o->data, "Corpus: one 'source<TAB>target' pair a line (fra.txt; .gz accepted)")
      ->required();
  cmd->add_option("--out", o->out, "Output folder (created)")->required();
  cmd->add_option("--num-examples", o->num_examples, "Read lines 0..N of the corpus as d2l does (0 = all)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--num-steps", o->num_steps, "Tokens per sequence (truncate/pad)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-hiddens", o->num_hiddens, "Model width")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--num-layers", o->num_layers, "Encoder and decoder blocks")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-heads", o->num_heads, "Attention heads")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--ffn-num-hiddens", o->ffn_num_hiddens, "Position-wise FFN width")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dropout", o->dropout, "Dropout probability")->capture_default_str()->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--batch-size", o->batch_size, "Sequences per minibatch")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--lr", o->lr, "Adam learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--epochs", o->epochs, "Passes over the data")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seed", o->seed, "Seed of initialisation, dropout and batch order")->capture_default_str();
  cmd->add_option("--label-smoothing", o->label_smoothing, "Label smoothing of the cross-entropy (0 = d2l)")
      ->capture_default_str()->check(CLI::Range(0.0, 0.99));
  cmd->add_flag("!--no-progress", o->progress, "Do not print the progress bar");
  add_threads_option(cmd, *threads);
  cmd->callback([o] {
    TrainResult r = train_seq2seq(*o);
    std::printf("trained %lld epochs in %.1f s: loss %.4f (mean per token %.4f), %.0f tokens/s; model in %s\n",
                (long long)r.epochs_run, r.seconds, r.loss, r.token_loss, r.tokens_per_sec, o->out.c_str());
  });
}

}  // namespace tfm::cli
