// tfm train: train the d2l encoder-decoder Transformer on a 'source<TAB>target' corpus.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "cli_util.h"
#include "commands.h"
#include "io/json_util.h"
#include "tfm/train.h"

namespace tfm::cli {

namespace {
// Ctrl-C / SIGTERM while training: the signals are blocked in every training thread and taken by this thread with
// sigwait (no handler interrupts the computing threads: a handler run on a kernel's stack corrupted its heap). The
// first asks training to stop after the step in progress; a second ends tfm at once (exit 128 + signal).
void watch_stop_signals(sigset_t set) {
  int sig = 0;
  if (sigwait(&set, &sig) != 0) return;
  request_train_stop(sig);
  if (sigwait(&set, &sig) != 0) return;
  std::fprintf(stderr, "\n%s again: stopping at once\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::_Exit(128 + sig);
}
}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<D2lTrainOptions>();
  auto threads = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a transformer_seq2seq (document 002, d2l.ai) English -> French on a fra.txt-style corpus; "
               "writes the model folder, train_log.csv and loss.png into --out (config.json names the direction: "
               "--source-lang / --target-lang)");
  auto recipe = std::make_shared<std::string>();
  auto resume = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto max_tokens = std::make_shared<int64_t>(0);
  cmd->add_option("--data", o->data, "Corpus: one 'source<TAB>target' pair a line (fra.txt; .gz accepted)");
  cmd->add_option("--out", o->out, "Output folder: created, or empty (see --overwrite)");
  cmd->add_option("--config", *recipe,
                  "Run the subword recipe described by this JSON file (e.g. configs/multi30k-en-fr.json): "
                  "SentencePiece, token batches, label smoothing, warmup, validation BLEU, checkpoints");
  cmd->add_option("--resume", *resume, "Continue the recipe run in this output folder from its checkpoint");
  std::string set_help = "Override a key of the --config file: --set epochs=3 (repeatable). With --resume: epochs "
                         "(extends the run), stop_after_steps (steps in all, from the run's start), "
                         "time_limit_minutes. Keys:";
  for (const std::string& k : recipe_keys())
    if (k != "comment") set_help += " " + k;
  cmd->add_option("--set", *sets, set_help);
  cmd->add_option("--max-tokens", *max_tokens, "Recipe: tokens per batch (overrides the config)")
      ->check(whole_range(1, 1 << 24));
  cmd->add_option("--num-examples", o->num_examples, "Read lines 0..N of the corpus as d2l does (0 = all)")
      ->capture_default_str()->check(whole_range(0, int64_t{1} << 40));
  cmd->add_option("--num-steps", o->num_steps, "Tokens per sequence (truncate/pad)")->capture_default_str()
      ->check(whole_range(1, 65536));
  cmd->add_option("--num-hiddens", o->num_hiddens, "Model width")->capture_default_str()
      ->check(whole_range(1, 1 << 16));
  cmd->add_option("--num-layers", o->num_layers, "Encoder and decoder blocks")->capture_default_str()
      ->check(whole_range(1, 1024));
  cmd->add_option("--num-heads", o->num_heads, "Attention heads")->capture_default_str()
      ->check(whole_range(1, 1024));
  cmd->add_option("--ffn-num-hiddens", o->ffn_num_hiddens, "Position-wise FFN width")->capture_default_str()
      ->check(whole_range(1, 1 << 18));
  cmd->add_option("--dropout", o->dropout, "Dropout probability")->capture_default_str()->check(in_range(0.0, 0.99));
  cmd->add_option("--batch-size", o->batch_size, "Sequences per minibatch")->capture_default_str()
      ->check(whole_range(1, 1 << 20));
  cmd->add_option("--lr", o->lr, "Adam learning rate")->capture_default_str()
      ->check(positive_up_to(10));
  cmd->add_option("--epochs", o->epochs, "Passes over the data")->capture_default_str()
      ->check(whole_range(1, 1000000));
  cmd->add_option("--seed", o->seed, "Seed of initialisation, dropout and batch order")->capture_default_str()
      ->check(seed_value());
  cmd->add_option("--label-smoothing", o->label_smoothing, "Label smoothing of the cross-entropy (0 = d2l)")
      ->capture_default_str()->check(in_range(0.0, 0.99));
  cmd->add_option("--source-lang", o->source_lang,
                  "The language of the corpus's source side, written to config.json as source_lang (what tfm serve "
                  "offers). Default: from the file name, Tatoeba's fra.txt / deu.txt hold en -> fr / de; the recipe: "
                  "train_src's suffix (train.en.gz: en)");
  cmd->add_option("--target-lang", o->target_lang,
                  "The language of the target side (config.json target_lang); default as --source-lang");
  auto no_progress = std::make_shared<bool>(false);
  cmd->add_flag("--no-progress", *no_progress, "Do not print the progress bar");
  cmd->add_flag("--overwrite", o->overwrite, "Train into an --out folder that already holds files, replacing them");
  add_threads_option(cmd, *threads);
  cmd->callback([o, cmd, recipe, resume, sets, max_tokens, threads, no_progress] {
    o->progress = !*no_progress;
    if (!recipe->empty() || !resume->empty()) {
      if (!recipe->empty() && !resume->empty())
        throw CLI::ValidationError("--config starts a run and --resume continues one; give only one");
      // Options the recipe would not use are refused rather than silently dropped.
      if (cmd->count("--data"))
        throw CLI::ValidationError("--data is for the d2l trainer; the recipe reads the files named in its config "
                                    "(keys data_dir, train_src, train_tgt, valid_src, valid_tgt)");
      if (!resume->empty()) {
        if (cmd->count("--out") && o->out != *resume)
          throw CLI::ValidationError("--resume DIR continues the run in DIR; do not give --out as well");
        for (const char* opt : {"--epochs", "--lr", "--seed", "--dropout", "--num-hiddens", "--num-layers",
                                "--num-heads", "--ffn-num-hiddens", "--label-smoothing", "--max-tokens",
                                "--num-examples", "--num-steps", "--batch-size", "--overwrite", "--source-lang",
                                "--target-lang"})
          if (cmd->count(opt))
            throw CLI::ValidationError(std::string("--resume continues with the run's saved train_config.json, so ") +
                                        opt + " cannot change it; only --set epochs=N (to extend the run), --set "
                                        "stop_after_steps=N, --set time_limit_minutes=M, --threads and "
                                        "--no-progress apply");
      } else if (cmd->count("--num-examples") || cmd->count("--num-steps") || cmd->count("--batch-size") ||
                 cmd->count("--overwrite")) {
        throw CLI::ValidationError("--num-examples, --num-steps, --batch-size and --overwrite are d2l trainer "
                                    "options; the recipe takes train_limit, num_steps and max_tokens from its config "
                                    "(override with --set key=value)");
      }
      TrainRunOptions ro;
      ro.resume = !resume->empty();
      ro.threads = *threads;
      ro.print_progress = o->progress;
      if (!recipe->empty()) load_json_file(*recipe);  // a missing or malformed file is named before anything else
      const std::vector<std::string> known = recipe_keys();
      for (const std::string& kv : *sets) {
        auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) throw CLI::ValidationError("--set expects key=value, got '" + kv + "'");
        std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
        if (std::find(known.begin(), known.end(), key) == known.end()) {
          std::string names;
          for (const auto& k : known)
            if (k != "comment") names += (names.empty() ? "" : ", ") + k;
          throw CLI::ValidationError("--set " + key + ": unknown recipe key (keys: " + names + ")");
        }
        if (!resume->empty() && key != "stop_after_steps" && key != "time_limit_minutes" && key != "epochs")
          throw CLI::ValidationError("--resume continues with the run's saved train_config.json; --set " + key +
                                      " cannot change it (only epochs, stop_after_steps and time_limit_minutes "
                                      "apply)");
        ro.overrides.emplace_back(key, val);  // parsed as JSON (numbers, true/false), else a string
      }
      // Options given explicitly on the command line override the file.
      auto set = [&](const char* opt, const char* key, const nlohmann::json& v) {
        if (cmd->count(opt)) ro.overrides.emplace_back(key, v.dump());
      };
      set("--epochs", "epochs", o->epochs);
      set("--lr", "lr", o->lr);
      set("--seed", "seed", o->seed);
      set("--dropout", "dropout", o->dropout);
      set("--num-hiddens", "num_hiddens", o->num_hiddens);
      set("--num-layers", "num_layers", o->num_layers);
      set("--num-heads", "num_heads", o->num_heads);
      set("--ffn-num-hiddens", "ffn_num_hiddens", o->ffn_num_hiddens);
      set("--label-smoothing", "label_smoothing", o->label_smoothing);
      set("--max-tokens", "max_tokens", *max_tokens);
      set("--source-lang", "source_lang", o->source_lang);
      set("--target-lang", "target_lang", o->target_lang);
      // A bad value may come from the file or from --set: the message names both sources.
      ro.config_name = recipe->empty() ? "command line" : *recipe;
      if (!sets->empty() && !recipe->empty()) ro.config_name += " with --set";
      std::string out = resume->empty() ? o->out : *resume;
      if (out.empty()) throw CLI::ValidationError("--out is required");
      // Ctrl-C / SIGTERM: training finishes the step in progress, saves a checkpoint and says how to resume; a
      // second one ends tfm at once (watch_stop_signals). Blocked here, before any training thread starts, so
      // every thread inherits the mask and only the watcher receives them.
      sigset_t stop_set;
      sigemptyset(&stop_set);
      sigaddset(&stop_set, SIGINT);
      sigaddset(&stop_set, SIGTERM);
      pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);
      std::thread([stop_set] { watch_stop_signals(stop_set); }).detach();  // this file's overload
      const TrainSummary r = train(*recipe, out, ro);  // under mpirun an error ends every rank
      if (r.stopped_by_signal) throw ExitStatus{128 + r.stopped_by_signal};  // 130 (SIGINT), 143 (SIGTERM)
      if (process_group().rank != 0) return;
      // After --resume the run's figures span every invocation; say what this one took.
      std::string this_call;
      if (!resume->empty() && r.invocation_seconds < r.seconds) {
        char buf[96];
        std::snprintf(buf, sizeof buf, " (times over the whole run; this invocation %.1f s)", r.invocation_seconds);
        this_call = buf;
      }
      if (r.best_epoch == 0) {  // config.json + model.safetensors are written at the end of the first epoch
        // Same "in S s, T target tokens/s (U in the training steps)" as the line below (bench/multi30k.sh --short
        // reads both figures).
        std::printf("stopped after %lld steps in %.1f s, %.0f target tokens/s (%.0f in the training steps), before "
                    "the end of the first epoch: no model written yet (only a checkpoint); continue with 'tfm train "
                    "--resume %s'%s\n",
                    (long long)r.steps, r.seconds, r.tokens_per_sec, r.step_tokens_per_sec, out.c_str(),
                    this_call.c_str());
        return;
      }
      // "trained 2 epochs" / "trained 1 epoch, stopped in epoch 2": a cut-short epoch is not counted as trained.
      const std::string stopped_in =
          r.stopped_in_epoch ? ", stopped in epoch " + std::to_string(r.stopped_in_epoch) : std::string();
      std::printf("trained %lld %s%s (%lld steps) in %.1f s, %.0f target tokens/s (%.0f in the training steps); "
                  "best validation BLEU %.2f (epoch %lld); model in %s%s\n",
                  (long long)r.epochs_run, r.epochs_run == 1 ? "epoch" : "epochs", stopped_in.c_str(),
                  (long long)r.steps, r.seconds, r.tokens_per_sec, r.step_tokens_per_sec, r.best_valid_bleu,
                  (long long)r.best_epoch, out.c_str(), this_call.c_str());
      return;
    }
    if (!sets->empty() || cmd->count("--max-tokens"))
      throw CLI::ValidationError("--set and --max-tokens apply to the subword recipe (--config or --resume)");
    if (o->data.empty()) throw CLI::ValidationError("--data is required (or --config for the subword recipe)");
    if (o->out.empty()) throw CLI::ValidationError("--out is required");
    if (process_group().world_size > 1)
      throw CLI::ValidationError("the d2l trainer (--data) runs as one process; data-parallel training under "
                                 "mpirun is the subword recipe (--config)");
    o->threads = *threads;
    const D2lTrainSummary r = train_d2l(*o);
    std::printf("trained %lld %s in %.1f s: loss %.4f (mean per token %.4f), %.0f tokens/s; model in %s\n",
                (long long)r.epochs_run, r.epochs_run == 1 ? "epoch" : "epochs", r.seconds, r.loss, r.token_loss, r.tokens_per_sec, o->out.c_str());
  });
}

}  // namespace tfm::cli
