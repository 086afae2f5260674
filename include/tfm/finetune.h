/// @file tfm/finetune.h
/// Fine-tuning an encoder checkpoint on labelled data (`tfm finetune`): a Hugging Face BERT folder becomes a
/// BertForSequenceClassification folder that `tfm classify`, `tfm serve` and transformers load, trained as the
/// Hugging Face Trainer trains it (AdamW without decay on biases and LayerNorm weights, linear warmup and decay,
/// clip_grad_norm_, dropout from config.json, mean cross-entropy).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tfm {

/// What the progress callback receives: after every optimizer step (epoch_end false) and after each epoch's
/// evaluation (epoch_end true).
struct FinetuneProgress {
  bool epoch_end = false;
  int64_t epoch = 0, epochs = 0;           ///< current epoch (1-based) of the configured number
  int64_t step = 0, total_steps = 0;       ///< optimizer steps so far / in the whole run
  double train_loss = 0;                   ///< mean loss over this epoch's steps so far (nats)
  double lr = 0;                           ///< learning rate of the last step
  double examples_per_sec = 0;             ///< training examples per second in this epoch
  /// epoch_end with an eval file: mean cross-entropy, accuracy and macro-averaged F1 (sklearn's f1_score(average=
  /// "macro") over the labels of the label set) on it.
  double eval_loss = 0, eval_accuracy = 0, eval_macro_f1 = 0;
  /// task "embed": eval_accuracy is retrieval accuracy@1 and eval_mrr the mean reciprocal rank of each eval
  /// anchor's positive among all eval positives (cosine similarity), eval_loss MultipleNegativesRankingLoss over
  /// them; with (sentence1, sentence2, score) data eval_loss is CosineSimilarityLoss's mean squared error and
  /// eval_spearman the Spearman correlation of the cosine similarities with the scores.
  double eval_mrr = 0, eval_spearman = 0;
};

struct FinetuneOptions {
  /// "classify" (sequence classification: BertForSequenceClassification) or "embed" (a sentence-transformers
  /// folder: columns anchor, positive [, negative] train with MultipleNegativesRankingLoss and in-batch
  /// negatives, columns sentence1, sentence2, score with CosineSimilarityLoss). "token-classify" and "mlm" are
  /// not implemented yet and are refused with std::invalid_argument.
  std::string task = "classify";
  std::string train_file;  ///< .csv / .tsv / .jsonl with a header (or keys): text [, text_pair], label
  std::string eval_file;   ///< optional, same columns: evaluated after every epoch; the best epoch is kept
  std::string out_dir;     ///< the output folder (created; must be new or empty unless overwrite)
  bool overwrite = false;
  std::string text_column = "text", text_pair_column = "text_pair", label_column = "label";
  /// Label names in id order. Empty: the model's id2label when every label of the data is in it, else the data's
  /// labels sorted (numerically when all are integers).
  std::vector<std::string> labels;
  int64_t epochs = 3;                ///< TrainingArguments.num_train_epochs
  int64_t batch_size = 16;           ///< per_device_train_batch_size
  double learning_rate = 5e-5, weight_decay = 0.0, adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;        ///< <= 0: no clipping
  double warmup_ratio = 0.0;         ///< warmup steps = ceil(ratio * total steps), unless warmup_steps > 0
  int64_t warmup_steps = 0;
  int64_t max_length = 128;          ///< texts are truncated to this many tokens (special tokens included; embed:
                                     ///< at most the folder's max_seq_length)
  uint64_t seed = 42;                ///< shuffling, dropout, a new head's initialisation
  int threads = 0;                   ///< 0: OMP_NUM_THREADS, else all cores
  /// Called on the training thread; an exception thrown from it stops training and propagates.
  std::function<void(const FinetuneProgress&)> progress;
};

struct FinetuneSummary {
  std::string out_dir;
  std::vector<std::string> labels;  ///< id2label of the written folder
  int64_t steps = 0, train_examples = 0, eval_examples = 0;
  double final_train_loss = 0;      ///< mean loss over the last epoch
  int64_t best_epoch = 0;           ///< the epoch whose weights were written (the last one without eval_file)
  double best_eval_accuracy = 0, best_eval_macro_f1 = 0, best_eval_loss = 0;
  double best_eval_mrr = 0, best_eval_spearman = 0;  ///< task embed (see FinetuneProgress)
  std::string loss;                 ///< task embed: "MultipleNegativesRankingLoss" or "CosineSimilarityLoss"
  double seconds = 0;
};

/// Fine-tunes the model folder `model_dir` (model_type bert with pooler weights: a BertModel, BertForPreTraining
/// or BertForSequenceClassification checkpoint) and writes out_dir: config.json (architectures
/// ["BertForSequenceClassification"], id2label, label2id), model.safetensors with Hugging Face names ("bert.*",
/// "classifier.*"), the tokenizer files, and train_log.csv (one row per epoch). The best epoch is chosen by eval
/// accuracy (ties: the lower eval loss). Throws std::invalid_argument for bad options or data (an unknown
/// column, a label not in `labels`, an empty text), tfm::FileNotFoundError for a missing file or folder, and
/// std::runtime_error for an unreadable checkpoint or a non-finite loss (nothing is written then).
///
/// task "embed": `model_dir` is a sentence-transformers folder (modules.json: Transformer (bert) -> Pooling ->
/// [Normalize]; Dense modules are refused), trained as SentenceTransformerTrainer trains it (the same optimizer;
/// MultipleNegativesRankingLoss with scale 20 and cos_sim, or CosineSimilarityLoss); the best epoch is chosen by
/// eval accuracy@1 (ties: MRR), or by Spearman correlation for scored pairs. out_dir is again a
/// sentence-transformers folder (modules.json, the Pooling config, sentence_bert_config.json, the Transformer's
/// config.json, model.safetensors with BertModel names, tokenizer files) that `tfm embed` loads, and train_log.csv.
FinetuneSummary finetune(const std::string& model_dir, const FinetuneOptions& options);

}  // namespace tfm
