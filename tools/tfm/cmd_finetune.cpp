// tfm finetune: fine-tune an encoder checkpoint on labelled data (tfm/finetune.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "tfm/finetune.h"
#include "tfm/process_group.h"

namespace tfm::cli {

void add_finetune_command(CLI::App& app) {
  auto o = std::make_shared<FinetuneOptions>();
  auto model = std::make_shared<std::string>();
  auto labels = std::make_shared<std::string>();
  auto no_progress = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "finetune",
      "Fine-tune a Hugging Face BERT, RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT, MPNet or ModernBERT folder as a "
      "text classifier "
      "(--task classify; a regression on numeric labels, --problem-type), a token tagger such as NER (token-classify) or a masked LM on your texts (mlm), as the "
      "Hugging Face Trainer does (AdamW, linear warmup and decay, clipping, gradient accumulation, dropout); writes "
      "a <Family>For{SequenceClassification,TokenClassification,MaskedLM} folder that tfm classify / tfm fill-mask, "
      "tfm serve and transformers load, "
      "with train_log.csv and loss.png. A stopped run continues with --resume. --task embed fine-tunes a "
      "sentence-transformers folder (a Transformer module of those families, e.g. all-mpnet-base-v2) on "
      "anchor,positive[,negative] columns (MultipleNegativesRankingLoss, in-batch "
      "negatives) or sentence1,sentence2,score (CosineSimilarityLoss) and writes a sentence-transformers folder "
      "that tfm embed loads. Under mpirun the ranks train data-parallel on shards of each --batch-size batch, equal to "
      "one process; rank 0 writes --out");
  cmd->add_option("--model", *model, "Model folder (config.json, model.safetensors or pytorch_model.bin, tokenizer)")
      ->required();
  cmd->add_option("--task", o->task,
                  "classify (columns text [, text_pair], label), token-classify (columns tokens, tags: JSON lists or "
                  "space-separated, one tag per word, on its first sub-token) or mlm (column text; BERT's 80/10/10 "
                  "masking) or embed (a sentence-transformers folder; columns anchor, positive [, negative], or sentence1, "
                  "sentence2, score)")
      ->capture_default_str();
  cmd->add_option("--train", o->train_file, "Training data: .csv, .tsv or .jsonl with the task's columns")->required();
  cmd->add_option("--eval", o->eval_file, "Evaluation data (same columns), after each epoch: accuracy and macro F1 "
                                          "(classify; regression: MSE, Pearson and Spearman), token accuracy and seqeval entity F1 (token-classify), "
                                          "perplexity (mlm), retrieval accuracy@1 and MRR or Spearman (embed); "
                                          "the best epoch is written");
  cmd->add_option("--out", o->out_dir, "Output folder: created, or empty (see --overwrite, --resume)")->required();
  cmd->add_flag("--resume", o->resume, "Continue the stopped run whose training state is in --out (same options)");
  cmd->add_option("--save-steps", o->save_steps, "Save the training state every N optimizer steps (0: at each "
                                                 "epoch's end only)")
      ->capture_default_str()->check(whole_range(0, int64_t{1} << 40));
  cmd->add_flag("--overwrite", o->overwrite, "Replace the model in an existing --out folder");
  cmd->add_option("--labels", *labels, "Label names in id order, comma-separated (default: the model's id2label if it "
                                       "holds every label of the data, else the data's labels sorted)");
  cmd->add_option("--problem-type", o->problem_type,
                  "classify: regression (one output trained with MSELoss on a numeric label column; eval MSE, Pearson "
                  "and Spearman; tfm classify prints the raw score) or single_label_classification. Default: as "
                  "Hugging Face, regression when config.json says problem_type regression or the labels are numbers "
                  "with a decimal point (3.8), else classes")
      ->check(CLI::IsMember({"regression", "single_label_classification"}));
  cmd->add_option("--text-column", o->text_column, "Column of the texts")->capture_default_str();
  cmd->add_option("--text-pair-column", o->text_pair_column, "Column of the second texts of pairs (optional)")
      ->capture_default_str();
  cmd->add_option("--label-column", o->label_column, "Column of the labels")->capture_default_str();
  cmd->add_option("--tokens-column", o->tokens_column, "token-classify: column of the words")->capture_default_str();
  cmd->add_option("--tags-column", o->tags_column, "token-classify: column of the tags (one per word)")
      ->capture_default_str();
  cmd->add_option("--epochs", o->epochs, "Passes over the training data")->capture_default_str()
      ->check(whole_range(1, 100000));
  cmd->add_option("--batch-size", o->batch_size, "Examples per micro-batch (under mpirun: of all ranks together)")->capture_default_str()
      ->check(whole_range(1, 65536));
  cmd->add_option("--gradient-accumulation-steps", o->gradient_accumulation_steps,
                  "Micro-batches per optimizer step (each loss divided by their number)")
      ->capture_default_str()->check(whole_range(1, 65536));
  cmd->add_option("--mlm-probability", o->mlm_probability, "mlm: the fraction of tokens chosen for masking")
      ->capture_default_str()->check(in_range(1e-6, 0.999999));
  cmd->add_flag("--group-texts", o->group_texts,
                "mlm: concatenate the texts (each run of 1,000) and cut them into blocks of --max-length tokens, as "
                "run_mlm.py without --line_by_line (default: a row an example, truncated)");
  cmd->add_option("--lr", o->learning_rate, "Peak learning rate of AdamW")->capture_default_str()
      ->check(positive_up_to(1));
  cmd->add_option("--weight-decay", o->weight_decay, "AdamW weight decay (not on biases and LayerNorm weights)")
      ->capture_default_str()->check(in_range(0.0, 1.0));
  cmd->add_option("--warmup-ratio", o->warmup_ratio, "Fraction of the steps spent warming up linearly")
      ->capture_default_str()->check(in_range(0.0, 1.0));
  cmd->add_option("--warmup-steps", o->warmup_steps, "Warmup steps (overrides --warmup-ratio)")
      ->check(whole_range(0, int64_t{1} << 40));
  cmd->add_option("--max-grad-norm", o->max_grad_norm, "Clip the gradients' global norm to this (0: no clipping)")
      ->capture_default_str()->check(in_range(0.0, 1e6));
  cmd->add_option("--max-length", o->max_length,
                  "Truncate texts to this many tokens (at most the model's max_position_embeddings, as run_glue.py "
                  "caps max_seq_length)")->capture_default_str()
      ->check(whole_range(2, 1 << 20));
  cmd->add_option("--seed", o->seed, "Seed of shuffling, dropout, masking and a new head")->capture_default_str()
      ->check(seed_value());
  cmd->add_option("--precision", o->precision,
                  "fp32, or bf16: the products in bf16 with fp32 master weights (a CPU with AVX512_BF16 or AMX)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "bf16"}));
  add_threads_option(cmd, o->threads);
  cmd->add_flag("--no-progress", *no_progress, "Do not print progress");
  cmd->callback([o, model, labels, no_progress, cmd] {
    if (cmd->count("--labels") && labels->empty())
      throw CLI::ValidationError("--labels: no label names (give them comma-separated, or leave the option out)");
    if (cmd->count("--mlm-probability") && o->task != "mlm")
      throw CLI::ValidationError("--mlm-probability is the masking rate of --task mlm; this is --task " + o->task);
    if (!labels->empty()) {
      o->labels.clear();
      size_t start = 0;
      while (start <= labels->size()) {
        size_t end = labels->find(',', start);
        if (end == std::string::npos) end = labels->size();
        const std::string name = labels->substr(start, end - start);
        if (name.empty()) throw CLI::ValidationError("--labels: an empty label name in '" + *labels + "'");
        o->labels.push_back(name);
        start = end + 1;
      }
    }
    const bool tty = isatty(2);
    if (!*no_progress)
      o->progress = [tty](const FinetuneProgress& p) {
        if (p.epoch_end) {
          std::fprintf(stderr, "%sepoch %lld/%lld  step %lld/%lld  train loss %.4f", tty ? "\r\033[K" : "",
                       (long long)p.epoch, (long long)p.epochs, (long long)p.step, (long long)p.total_steps,
                       p.train_loss);
          for (const auto& [name, value] : p.eval_metrics)
            std::fprintf(stderr, "  %s %.4f", name.c_str(), value);
          std::fprintf(stderr, "\n");
        } else if (tty) {
          std::fprintf(stderr, "\r\033[Kepoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.2e  %.1f examples/s",
                       (long long)p.epoch, (long long)p.epochs, (long long)p.step, (long long)p.total_steps,
                       p.train_loss, p.lr, p.examples_per_sec);
        }
      };
    // Ctrl-C / SIGTERM: training finishes the step in progress, saves its state and says how to resume; a second
    // one ends tfm at once.
    watch_stop_signals(request_finetune_stop, o->out_dir);
    const FinetuneSummary s = finetune(*model, *o);  // under mpirun an error ends every rank
    if (s.stopped_by_signal) {
      if (process_group().rank == 0) {
        std::string resume = command_line();
        if (!o->resume) resume += " --resume";
        std::fprintf(stderr, "%sstopped at step %lld (%s): the training state is saved in %s; continue with: %s\n",
                     tty ? "\r\033[K" : "\n", (long long)s.steps, s.stopped_by_signal == SIGINT ? "SIGINT" : "SIGTERM",
                     o->out_dir.c_str(), resume.c_str());
      }
      throw ExitStatus{128 + s.stopped_by_signal};  // 130 (SIGINT), 143 (SIGTERM)
    }
    if (process_group().rank != 0) return;            // rank 0 reports
    std::string labels_str;
    for (const auto& l : s.labels) labels_str += (labels_str.empty() ? "" : ", ") + l;
    if (!labels_str.empty()) labels_str = "labels " + labels_str + "; ";
    if (!s.loss.empty()) labels_str = s.loss + "; ";  // --task embed: the loss instead of labels
    if (s.loss == "MSELoss") labels_str = "regression, MSELoss; ";
    std::fprintf(stderr, "wrote %s (%s%lld steps on %lld examples in %.1f s", s.out_dir.c_str(), labels_str.c_str(),
                 (long long)s.steps, (long long)s.train_examples, s.seconds);
    if (s.step_seconds.size() > 1) {  // the median step after the first (which also grows buffers, packs weights)
      std::vector<double> t(s.step_seconds.begin() + 1, s.step_seconds.end());
      std::sort(t.begin(), t.end());
      const size_t m = t.size() / 2;
      std::fprintf(stderr, ", %.3f s a step after the first (median)", t.size() % 2 ? t[m] : 0.5 * (t[m - 1] + t[m]));
    }
    if (s.resumed_from_step > 0) std::fprintf(stderr, ", resumed from step %lld", (long long)s.resumed_from_step);
    if (s.eval_examples > 0) {
      std::fprintf(stderr, "; best epoch %lld:", (long long)s.best_epoch);
      for (const auto& [name, value] : s.best_eval_metrics) std::fprintf(stderr, " %s %.4f", name.c_str(), value);
    }
    std::fprintf(stderr, ")\n");
  });
}

}  // namespace tfm::cli
