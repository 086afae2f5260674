// tfm finetune: fine-tune an encoder checkpoint on labelled data (tfm/finetune.h).
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "cli_util.h"
#include "commands.h"
#include "tfm/finetune.h"

namespace tfm::cli {

void add_finetune_command(CLI::App& app) {
  auto o = std::make_shared<FinetuneOptions>();
  auto model = std::make_shared<std::string>();
  auto labels = std::make_shared<std::string>();
  auto no_progress = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "finetune",
      "Fine-tune a Hugging Face BERT folder as a text classifier (the Hugging Face Trainer's AdamW, linear warmup "
      "and decay, clipping, dropout); writes a BertForSequenceClassification folder that tfm classify, tfm serve "
      "and transformers load, with train_log.csv. --task embed fine-tunes a sentence-transformers folder on "
      "anchor,positive[,negative] columns (MultipleNegativesRankingLoss, in-batch negatives) or sentence1,sentence2,"
      "score (CosineSimilarityLoss) and writes a sentence-transformers folder that tfm embed loads");
  cmd->add_option("--model", *model, "Model folder (config.json, model.safetensors or pytorch_model.bin, tokenizer; "
                                     "embed: a sentence-transformers folder)")
      ->required();
  cmd->add_option("--task", o->task, "classify or embed (token-classify and mlm are not implemented yet)")
      ->capture_default_str();
  cmd->add_option("--train", o->train_file, "Training data: .csv, .tsv or .jsonl with columns text [, text_pair], label "
                                            "(embed: anchor, positive [, negative], or sentence1, sentence2, score)")
      ->required();
  cmd->add_option("--eval", o->eval_file, "Evaluation data (same columns): accuracy and macro F1 (embed: retrieval "
                                          "accuracy@1 and MRR, or Spearman) after each epoch; "
                                          "the best epoch is written");
  cmd->add_option("--out", o->out_dir, "Output folder: created, or empty (see --overwrite)")->required();
  cmd->add_flag("--overwrite", o->overwrite, "Replace the model in an existing --out folder");
  cmd->add_option("--labels", *labels, "Label names in id order, comma-separated (default: the model's id2label if it "
                                       "holds every label of the data, else the data's labels sorted)");
  cmd->add_option("--text-column", o->text_column, "Column of the texts")->capture_default_str();
  cmd->add_option("--text-pair-column", o->text_pair_column, "Column of the second texts of pairs (optional)")
      ->capture_default_str();
  cmd->add_option("--label-column", o->label_column, "Column of the labels")->capture_default_str();
  cmd->add_option("--epochs", o->epochs, "Passes over the training data")->capture_default_str()
      ->check(whole_range(1, 100000));
  cmd->add_option("--batch-size", o->batch_size, "Examples per optimizer step")->capture_default_str()
      ->check(whole_range(1, 65536));
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
  cmd->add_option("--max-length", o->max_length, "Truncate texts to this many tokens")->capture_default_str()
      ->check(whole_range(2, 1 << 20));
  cmd->add_option("--seed", o->seed, "Seed of shuffling, dropout and a new head")->capture_default_str()
      ->check(seed_value());
  add_threads_option(cmd, o->threads);
  cmd->add_flag("--no-progress", *no_progress, "Do not print progress");
  cmd->callback([o, model, labels, no_progress] {
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
      o->progress = [tty, embed = o->task == "embed"](const FinetuneProgress& p) {
        if (p.epoch_end) {
          std::fprintf(stderr, "%sepoch %lld/%lld  step %lld/%lld  train loss %.4f", tty ? "\r\033[K" : "",
                       (long long)p.epoch, (long long)p.epochs, (long long)p.step, (long long)p.total_steps,
                       p.train_loss);
          if (p.eval_mrr != 0)  // --task embed, (anchor, positive) data
            std::fprintf(stderr, "  eval loss %.4f  accuracy@1 %.4f  MRR %.4f", p.eval_loss, p.eval_accuracy,
                         p.eval_mrr);
          else if (embed && p.eval_loss != 0)
            std::fprintf(stderr, "  eval loss %.4f  Spearman %.4f", p.eval_loss, p.eval_spearman);
          else if (p.eval_loss != 0 || p.eval_accuracy != 0)
            std::fprintf(stderr, "  eval loss %.4f  accuracy %.4f  macro F1 %.4f", p.eval_loss, p.eval_accuracy,
                         p.eval_macro_f1);
          std::fprintf(stderr, "\n");
        } else if (tty) {
          std::fprintf(stderr, "\r\033[Kepoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.2e  %.1f examples/s",
                       (long long)p.epoch, (long long)p.epochs, (long long)p.step, (long long)p.total_steps,
                       p.train_loss, p.lr, p.examples_per_sec);
        }
      };
    const FinetuneSummary s = finetune(*model, *o);
    if (o->task == "embed") {
      std::fprintf(stderr, "wrote %s (%s; %lld steps on %lld examples in %.1f s", s.out_dir.c_str(), s.loss.c_str(),
                   (long long)s.steps, (long long)s.train_examples, s.seconds);
      if (s.eval_examples > 0 && s.best_eval_mrr != 0)
        std::fprintf(stderr, "; best epoch %lld: eval accuracy@1 %.4f, MRR %.4f", (long long)s.best_epoch,
                     s.best_eval_accuracy, s.best_eval_mrr);
      else if (s.eval_examples > 0)
        std::fprintf(stderr, "; best epoch %lld: eval Spearman %.4f", (long long)s.best_epoch, s.best_eval_spearman);
      std::fprintf(stderr, ")\n");
      return;
    }
    std::string labels_str;
    for (const auto& l : s.labels) labels_str += (labels_str.empty() ? "" : ", ") + l;
    std::fprintf(stderr, "wrote %s (labels %s; %lld steps on %lld examples in %.1f s", s.out_dir.c_str(),
                 labels_str.c_str(), (long long)s.steps, (long long)s.train_examples, s.seconds);
    if (s.eval_examples > 0)
      std::fprintf(stderr, "; best epoch %lld: eval accuracy %.4f, macro F1 %.4f", (long long)s.best_epoch,
                   s.best_eval_accuracy, s.best_eval_macro_f1);
    std::fprintf(stderr, ")\n");
  });
}

}  // namespace tfm::cli
