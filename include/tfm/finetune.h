/// @file tfm/finetune.h
/// Fine-tuning an encoder checkpoint (`tfm finetune`): a Hugging Face BERT, RoBERTa, XLM-RoBERTa, CamemBERT,
/// DistilBERT, MPNet or ModernBERT folder becomes a *ForSequenceClassification (task "classify"), *ForTokenClassification
/// ("token-classify") or *ForMaskedLM ("mlm") folder of its family (e.g. RobertaForTokenClassification) that
/// `tfm classify`, `tfm fill-mask`, `tfm serve` and transformers load, trained
/// as the Hugging Face Trainer trains it (AdamW without decay on biases and LayerNorm weights, linear warmup and
/// decay, clip_grad_norm_, gradient accumulation, dropout from config.json, cross-entropy), with the best epoch
/// kept, train_log.csv and loss.png, and resumable after a stop; data-parallel under mpirun.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
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
  /// epoch_end with an eval file, task "classify": mean cross-entropy, accuracy and macro-averaged F1 (sklearn's
  /// f1_score(average="macro") over the labels present) on it (regression: eval_loss the mean squared error);
  /// "token-classify": eval_loss and eval_accuracy over the labelled (first) sub-tokens; "mlm": eval_loss over the
  /// masked tokens.
  double eval_loss = 0, eval_accuracy = 0, eval_macro_f1 = 0;
  /// epoch_end with an eval file: every metric of the task by name, in train_log.csv's column order
  /// ("eval_loss", "eval_accuracy", "eval_macro_f1" | regression: "eval_loss", "eval_pearson", "eval_spearmanr"
  /// (run_glue.py's stsb metrics) | "eval_loss", "eval_accuracy", "eval_precision", "eval_recall", "eval_f1"
  /// (seqeval's micro averages over entities) | "eval_loss", "eval_perplexity").
  std::vector<std::pair<std::string, double>> eval_metrics;
  /// task "embed": eval_accuracy is retrieval accuracy@1 and eval_mrr the mean reciprocal rank of each eval
  /// anchor's positive among all eval positives (cosine similarity), eval_loss MultipleNegativesRankingLoss over
  /// them; with (sentence1, sentence2, score) data eval_loss is CosineSimilarityLoss's mean squared error and
  /// eval_spearman the Spearman correlation of the cosine similarities with the scores. Task "classify" with
  /// regression: eval_spearman is eval_spearmanr.
  double eval_mrr = 0, eval_spearman = 0;
};

struct FinetuneOptions {
  /// "classify" (BertForSequenceClassification: columns text [, text_pair], label), "token-classify"
  /// (BertForTokenClassification: columns tokens (the words: a JSON list, or words separated by spaces) and tags
  /// (one label per word, same forms); each word's label on its first sub-token, -100 on the others and on special
  /// tokens, as transformers' run_ner tokenize_and_align_labels), or "mlm" (BertForMaskedLM: column text, one
  /// example a row, or blocks of the concatenated texts with group_texts; DataCollatorForLanguageModeling's
  /// masking, drawn anew each epoch), or "embed" (a sentence-transformers folder: columns anchor, positive
  /// [, negative] train with MultipleNegativesRankingLoss and in-batch negatives, columns sentence1, sentence2,
  /// score with CosineSimilarityLoss).
  std::string task = "classify";
  std::string train_file;  ///< .csv / .tsv / .jsonl with a header (or keys) with the task's columns
  /// Optional, same columns: evaluated after every epoch; the best epoch is kept (classify: by accuracy, ties the
  /// lower loss; regression: by the lower loss, ties the higher Pearson correlation; token-classify: by entity F1,
  /// ties the lower loss; mlm: by the lower loss). For mlm the eval texts are masked once from the seed, the same
  /// masks every epoch.
  std::string eval_file;
  std::string out_dir;     ///< the output folder (created; must be new or empty unless overwrite)
  bool overwrite = false;
  std::string text_column = "text", text_pair_column = "text_pair", label_column = "label";
  std::string tokens_column = "tokens", tags_column = "tags";  ///< token-classify
  /// Label names in id order. Empty: the model's id2label when every label of the data is in it, else the data's
  /// labels sorted (numerically when all are integers).
  std::vector<std::string> labels;
  /// task "classify": "" (decide as Hugging Face: config.json's problem_type "regression", else run_glue.py's
  /// reading of the label column: all numbers, one at least with a decimal point or an exponent ("3.8", "1e-2"),
  /// is regression; integers or names are classes), "regression" (num_labels 1: the label column holds numbers,
  /// the loss is MSELoss()(logits.squeeze(), labels), eval gives eval_loss (the mean squared error), eval_pearson
  /// and eval_spearmanr and the best epoch has the lowest eval_loss; the folder is written with problem_type
  /// "regression" and id2label {0: "LABEL_0"}, and `tfm classify` prints its raw score), or
  /// "single_label_classification" (classes, whatever the labels look like). A non-numeric label under regression
  /// is std::invalid_argument naming the file, line and label.
  std::string problem_type;
  int64_t epochs = 3;                ///< TrainingArguments.num_train_epochs
  /// Examples per micro-batch: per_device_train_batch_size of one process; under mpirun the global micro-batch,
  /// split across the ranks (so the run does not depend on the number of ranks).
  int64_t batch_size = 16;
  /// TrainingArguments.gradient_accumulation_steps: micro-batches per optimizer step, each one's loss divided by
  /// the number of micro-batches of its step (the last step of an epoch may have fewer). embed: plain accumulation
  /// of the losses, each micro-batch with its own in-batch negatives (not CachedMultipleNegativesRankingLoss).
  int64_t gradient_accumulation_steps = 1;
  double learning_rate = 5e-5, weight_decay = 0.0, adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;        ///< <= 0: no clipping
  double warmup_ratio = 0.0;         ///< warmup steps = ceil(ratio * total steps), unless warmup_steps > 0
  int64_t warmup_steps = 0;
  int64_t max_length = 128;          ///< texts are truncated to this many tokens (special tokens included), at
                                     ///< most the longest input the model takes (max_position_embeddings, less the
                                     ///< RoBERTa family's pad offset), as run_glue.py caps max_seq_length; embed:
                                     ///< at most the folder's max_seq_length too
  double mlm_probability = 0.15;     ///< mlm: DataCollatorForLanguageModeling.mlm_probability, in (0, 1)
  /// mlm: run_mlm.py without --line_by_line: every text tokenized whole (special tokens included), each run of
  /// 1,000 consecutive texts concatenated and cut into blocks of max_length tokens, each run's remainder dropped
  /// (group_texts under datasets.map's batch of 1,000); the blocks are the examples. false: a row an example,
  /// truncated to max_length (--line_by_line). Eval texts are grouped alike.
  bool group_texts = false;
  uint64_t seed = 42;                ///< shuffling, dropout, masking, a new head's initialisation
  /// Training state (weights, AdamW moments, step, random generators, log) saved to out_dir/trainer_state.safetensors
  /// every save_steps optimizer steps (0: at each epoch's end only; always at each epoch's end), removed when
  /// training completes.
  int64_t save_steps = 0;
  /// Continue from out_dir/trainer_state.safetensors (the other options must equal the saved run's): the result is
  /// bit for bit that of an uninterrupted run on the same machine and thread count.
  bool resume = false;
  /// "fp32", or "bf16": TrainingArguments(bf16=True) on CPU, every Linear's products in bf16 with fp32
  /// accumulation, fp32 master weights, gradients and AdamW state (a CPU without bf16 instructions is refused
  /// with std::runtime_error).
  std::string precision = "fp32";
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
  std::vector<std::pair<std::string, double>> best_eval_metrics;  ///< FinetuneProgress::eval_metrics of best_epoch
  int64_t resumed_from_step = 0;    ///< the checkpoint's step with resume, else 0
  double best_eval_mrr = 0, best_eval_spearman = 0;  ///< task embed (see FinetuneProgress)
  std::string loss;                 ///< task embed: "MultipleNegativesRankingLoss" or "CosineSimilarityLoss";
                                    ///< task classify: "MSELoss" for regression, else empty
  double seconds = 0;
  /// Wall seconds of each optimizer step this call ran, in order: forward, backward, the gradients' all-reduce
  /// under mpirun and the update (not evaluation or saving). The first includes the one-time work of a new run
  /// (buffers growing, weights packed).
  std::vector<double> step_seconds;
  /// The signal number given to request_finetune_stop when it ended the run before its last step, else 0. The
  /// training state of that step is saved in out_dir (resume with the same options and resume = true); the model
  /// folder holds the best epoch so far when eval_file is given, else nothing yet.
  int stopped_by_signal = 0;
};

/// Fine-tunes the model folder `model_dir` (model_type bert, roberta, xlm-roberta, camembert, distilbert, mpnet or
/// modernbert: the base
/// model or any of its *For* checkpoints; BERT's classify needs pooler weights; other model_types are refused with
/// std::invalid_argument naming the supported ones) and writes out_dir: config.json (architectures
/// ["<Family>ForSequenceClassification"] / ["<Family>ForTokenClassification"] with id2label and label2id, or
/// ["<Family>ForMaskedLM"]), model.safetensors with the family's Hugging Face names ("bert.*" / "roberta.*" /
/// "distilbert.*" / "mpnet.*" / "model.*", the head's "classifier.*", "classifier.out_proj.*", "pre_classifier.*",
/// "cls.predictions.*", "lm_head.*", "vocab_*", "head.*", "decoder.bias"; the masked-LM decoder tied to the word
/// embeddings and not stored), the tokenizer files,
/// train_log.csv (a row per
/// optimizer step: step, epoch, loss, lr, grad_norm, and the eval metrics on each epoch's last step) and loss.png
/// (train and eval loss per epoch). With an eval file the model files are rewritten whenever an epoch beats the
/// best so far. Throws std::invalid_argument for bad options or data (an unknown column, a label not in `labels`,
/// an empty text, a tokens/tags length mismatch, a checkpoint written with other options), tfm::FileNotFoundError
/// for a missing file or folder, and std::runtime_error for an unreadable checkpoint or a non-finite loss.
///
/// task "embed": `model_dir` is a sentence-transformers folder (modules.json: Transformer (a family above, e.g.
/// all-mpnet-base-v2's MPNet) -> Pooling ->
/// [Normalize]; Dense modules are refused), trained as SentenceTransformerTrainer trains it (the same optimizer;
/// MultipleNegativesRankingLoss with scale 20 and cos_sim, or CosineSimilarityLoss); the best epoch is chosen by
/// eval accuracy@1 (ties: MRR), or by Spearman correlation for scored pairs. out_dir is again a
/// sentence-transformers folder (modules.json, the Pooling config, sentence_bert_config.json, the Transformer's
/// config.json, model.safetensors with the base model's names, tokenizer files) that `tfm embed` loads, train_log.csv and
/// loss.png; resume, save_steps, precision and gradient accumulation as the other tasks.
///
/// Under mpirun (a build with MPI) the ranks train data-parallel, as `tfm train`'s recipe: every rank reads the
/// model and data files, computes its share of each global micro-batch (split by token count), and one all-reduce
/// per optimizer step sums the gradients; clipping and AdamW run on every rank, so replicas stay identical. Dropout
/// masks are keyed by (seed, step, example), the same whichever rank holds an example. Only rank 0 reads and
/// writes out_dir (the state to resume, which it sends the others, the model folder, the logs), evaluates and
/// calls `progress`; the others get the metrics, so every rank returns the same summary. The run equals one
/// process on the same global batches within floating-point reduction tolerance. embed gathers every rank's
/// embeddings before the loss, so an anchor's in-batch negatives are the candidates of the whole global batch, as
/// one process has them (sentence-transformers' MultipleNegativesRankingLoss(gather_across_devices=True); its
/// default under DDP gives each device's batch its own negatives). An exception on any rank ends every rank with
/// its message (exit code 1); a rank that dies ends the job (mpirun).
FinetuneSummary finetune(const std::string& model_dir, const FinetuneOptions& options);

/// Asks a running finetune() to stop after the optimizer step in progress: it saves the training state and returns
/// with stopped_by_signal = signo (a request during the last step lets the run finish). Async-signal-safe (one
/// atomic store), so a SIGINT / SIGTERM handler may call it; under mpirun rank 0's request stops every rank at the
/// same step. The request stays set: a later finetune() in the process stops after its first step.
void request_finetune_stop(int signo);

}  // namespace tfm
