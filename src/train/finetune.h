// Fine-tuning an encoder with a task head, as the Hugging Face Trainer does it: AdamW (torch.optim.AdamW, no
// weight decay on biases and LayerNorm weights), get_linear_schedule_with_warmup, clip_grad_norm_ before each
// step, gradient accumulation (each micro-batch's loss divided by the number of micro-batches of the step).
// The heads of modeling_bert.py:
//  - BertForSequenceClassification: logits = classifier(dropout(pooler_output)), loss = mean cross-entropy over
//    the batch;
//  - BertForTokenClassification: logits = classifier(dropout(last_hidden_state)) per token, loss = mean
//    cross-entropy over the tokens whose label is not -100 (CrossEntropyLoss's ignore_index);
//  - BertForMaskedLM: logits = BertOnlyMLMHead(last_hidden_state) (transform dense, hidden_act, LayerNorm, then the
//    decoder tied to the word embeddings plus cls.predictions.bias), loss as token classification's.
//
// Layout: the pieces every task shares (FinetuneHyperparameters, FinetuneOptimizer, FinetuneModel's step and
// accumulation) come first; each task is a FinetuneModel subclass with its own forward and backward.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/bert.h"
#include "nn/params.h"
#include "train/optim.h"

namespace tfm {

// One padded batch: ids, types and mask [B, L] (row-major). labels: [B] in [0, num_labels) for sequence
// classification; [B, L] for token classification and masked LM, where -100 (kIgnoreLabel) marks a position
// without a label (special tokens, padding, continuation sub-tokens, unmasked tokens).
struct ClassificationBatch {
  int64_t B = 0, L = 0;
  std::vector<int64_t> input_ids, token_type_ids, labels;
  std::vector<float> attention_mask;  // 1 real token, 0 padding
};
using FinetuneBatch = ClassificationBatch;
inline constexpr int64_t kIgnoreLabel = -100;  // torch.nn.CrossEntropyLoss ignore_index

// TrainingArguments' optimizer and schedule fields, with their defaults.
struct FinetuneHyperparameters {
  double learning_rate = 5e-5, weight_decay = 0.0, adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  int64_t warmup_steps = 0, total_steps = 1;  // optimizer steps (after gradient accumulation)
  float dropout = 0.1f;        // config.json hidden_dropout_prob (classifier_dropout when set, as HF)
  uint64_t seed = 42;
};

// ---------------------------------------------------------------- shared by every task

// transformers.get_linear_schedule_with_warmup: the factor of the learning rate at optimizer step `step`
// (0-based, the LambdaLR count before that step): step / warmup while step < warmup, then
// max(0, (total - step) / (total - warmup)).
double linear_warmup_factor(int64_t step, int64_t warmup_steps, int64_t total_steps);

// torch.nn.utils.clip_grad_norm_(params, max_norm): the total 2-norm of all gradients; when it exceeds max_norm the
// gradients are scaled by max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm_hf(nn::ParamStore& params, double max_norm);

// Trainer.get_decay_parameter_names: true for the parameters without weight decay (names ending in ".bias" and
// those of LayerNorm modules).
bool is_no_decay_parameter(const std::string& name);

// The nn::Context of a training forward: gradients saved, dropout hp.dropout drawn from `rng` when `dropout`.
nn::Context training_context(const FinetuneHyperparameters& hp, Rng& rng, bool dropout);

// The Trainer's optimizer step over a whole ParamStore: clip_grad_norm_hf, then torch.optim.AdamW (two parameter
// groups: weight_decay, and 0 for is_no_decay_parameter) at learning_rate * linear_warmup_factor(steps()).
class FinetuneOptimizer {
 public:
  FinetuneOptimizer(const nn::ParamStore& store, const FinetuneHyperparameters& hp);
  // One step on the gradients in `store`. Returns the gradient norm before clipping. Throws std::runtime_error
  // when it is not finite (the parameters are left unchanged).
  double step(nn::ParamStore& store);
  int64_t steps() const { return step_; }
  double last_lr() const { return last_lr_; }
  // State for checkpoints (resume): AdamW's moments and step count, the schedule's step and last rate.
  Adam& adam() { return *adam_; }
  void restore(int64_t steps, double last_lr);

 private:
  FinetuneHyperparameters hp_;
  std::unique_ptr<Adam> adam_;
  int64_t step_ = 0;
  double last_lr_ = 0;
};

// A BERT body and a task head in one ParamStore (Hugging Face names), trained by a FinetuneOptimizer.
class FinetuneModel {
 public:
  virtual ~FinetuneModel() = default;
  // Forward (dropout when `dropout`) and backward of `batch`, adding scale * d(loss)/d(parameter) to the store's
  // gradients (gradient accumulation: scale = 1 / micro-batches of the step). Returns the batch's loss (nats,
  // unscaled). Throws std::invalid_argument for arrays that do not match [B, L] or a label out of range.
  virtual double accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) = 0;
  // Gradients zeroed, then accumulate_gradients(batch, 1): the loss; gradients stay in params().
  double compute_gradients(const FinetuneBatch& batch, bool dropout = true);
  // The optimizer step on the gradients accumulated so far (FinetuneOptimizer::step): the gradient norm.
  double optimizer_step();
  // One optimizer step on one batch: compute_gradients with dropout, then optimizer_step. Returns the loss.
  // Throws std::runtime_error when the loss or the gradient norm is not finite (parameters unchanged).
  double train_step(const FinetuneBatch& batch);

  nn::ParamStore& params() { return store_; }
  int64_t steps() const { return opt_->steps(); }
  double last_lr() const { return opt_->last_lr(); }
  FinetuneOptimizer& optimizer() { return *opt_; }
  // TrainingArguments(bf16=True) on CPU: every Linear's products (body and head) in `precision` (F32, or BF16:
  // bf16 operands, fp32 accumulation), the parameters, gradients and AdamW state staying fp32. Throws
  // std::invalid_argument for int8 and std::runtime_error when BF16 is asked on a CPU without bf16 instructions.
  void set_precision(ops::ComputeType precision);
  Rng& dropout_rng() { return rng_; }  // dropout masks are drawn from it (its state is part of a checkpoint)

 protected:
  explicit FinetuneModel(const FinetuneHyperparameters& hp) : hp_(hp), rng_(hp.seed) {}
  // After the store is finalized and loaded: creates the optimizer.
  void make_optimizer() { opt_ = std::make_unique<FinetuneOptimizer>(store_, hp_); }
  nn::Context train_context(bool dropout);
  // The body and the head's Linears, for set_precision (registered by each task's constructor).
  BertTrainable* body_base_ = nullptr;
  std::vector<nn::Linear*> head_linears_;
  FinetuneHyperparameters hp_;
  nn::ParamStore store_;
  std::unique_ptr<FinetuneOptimizer> opt_;
  Rng rng_;
};

// ---------------------------------------------------------------- the tasks

// BertForSequenceClassification in training: the body (models/bert.h BertTrainable, names "bert.*") and
// "classifier.weight" [num_labels, H], "classifier.bias" [num_labels] in one ParamStore.
class SequenceClassificationTrainer : public FinetuneModel {
 public:
  // Loads the body from `weights` (BertModel or BertFor* names). The classifier is read from the checkpoint when it
  // holds one of num_labels rows (continued fine-tuning); otherwise initialised as BertPreTrainedModel._init_weights
  // does (weight N(0, initializer_range), bias 0) from `hp.seed`. Throws std::runtime_error naming a missing tensor
  // or a checkpoint without pooler weights.
  SequenceClassificationTrainer(const EncoderConfig& config, WeightSource& weights, int64_t num_labels,
                                const FinetuneHyperparameters& hp, double initializer_range = 0.02);
  // labels [B]: mean cross-entropy over the batch.
  double accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) override;
  // logits [B, num_labels] without dropout (evaluation).
  std::vector<float> logits(const ClassificationBatch& batch);
  int64_t num_labels() const { return num_labels_; }

 private:
  void forward(const ClassificationBatch& batch, bool dropout);
  EncoderConfig config_;
  int64_t num_labels_;
  std::unique_ptr<BertTrainable> body_;
  nn::Linear classifier_;
  std::vector<float> pooled_drop_, drop_mask_, logits_;
};

// BertForTokenClassification in training: the body without pooler ("bert.*") and "classifier.weight"
// [num_labels, H], "classifier.bias" [num_labels]. The classifier is loaded or initialised as
// SequenceClassificationTrainer's; a pooler in the checkpoint is not used (add_pooling_layer=False).
class TokenClassificationTrainer : public FinetuneModel {
 public:
  TokenClassificationTrainer(const EncoderConfig& config, WeightSource& weights, int64_t num_labels,
                             const FinetuneHyperparameters& hp, double initializer_range = 0.02);
  // labels [B, L] (-100 ignored): mean cross-entropy over the labelled tokens (0, no gradient, when none is).
  double accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) override;
  // logits [B, L, num_labels] without dropout (evaluation).
  std::vector<float> logits(const FinetuneBatch& batch);
  int64_t num_labels() const { return num_labels_; }

 private:
  void forward(const FinetuneBatch& batch, bool dropout);
  EncoderConfig config_;
  int64_t num_labels_;
  std::unique_ptr<BertTrainable> body_;
  nn::Linear classifier_;
  std::vector<float> hidden_drop_, drop_mask_, logits_;
};

// BertForMaskedLM in training: the body without pooler ("bert.*"), "cls.predictions.transform.dense.{weight,bias}"
// [H, H] / [H], "cls.predictions.transform.LayerNorm.{weight,bias}" [H] and "cls.predictions.bias" [vocab_size];
// the decoder's weight is "bert.embeddings.word_embeddings.weight" (tied: its gradient is the sum of the embedding
// lookup's and the decoder's), as BertLMPredictionHead with tie_word_embeddings. The head is read from the
// checkpoint (BertForMaskedLM / BertForPreTraining files; "cls.predictions.decoder.bias" also accepted for the
// bias) or, when absent, initialised as _init_weights does (dense N(0, initializer_range), biases 0, LayerNorm
// 1 and 0).
class MaskedLMTrainer : public FinetuneModel {
 public:
  MaskedLMTrainer(const EncoderConfig& config, WeightSource& weights, const FinetuneHyperparameters& hp,
                  double initializer_range = 0.02);
  // labels [B, L]: the original ids at masked positions, -100 elsewhere. The head runs on the labelled positions
  // only (the others do not reach the loss). Mean cross-entropy over them (0, no gradient, when there is none).
  double accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) override;
  // Evaluation (no dropout): the summed cross-entropy over the labelled positions (nats); *count gets their number.
  double loss_sum(const FinetuneBatch& batch, int64_t* count);

 private:
  // Forward of the labelled positions; fills rows_ and logits_ [M, V].
  void forward(const FinetuneBatch& batch, bool dropout);
  EncoderConfig config_;
  std::unique_ptr<BertTrainable> body_;
  nn::Linear transform_, decoder_;  // decoder_: weight = the word embeddings, bias = cls.predictions.bias
  nn::LayerNorm transform_ln_;
  ops::Activation act_ = ops::Activation::Gelu;
  std::vector<int64_t> rows_, targets_;  // labelled positions b * L + l and their labels
  std::vector<float> gathered_, pre_act_, act_out_, normed_, logits_;
};

// DataCollatorForLanguageModeling.torch_mask_tokens (mlm_probability, 80/10/10) on one batch, in place:
// each position that is not special (special[b * L + l], padding included) is chosen with probability
// mlm_probability; a chosen position's label is its id (others -100); it becomes mask_id with probability 0.8,
// else a uniform random id in [0, vocab_size) with probability 0.5, else stays. Draws from `rng` in a fixed
// order (per position: chosen, then replaced, then random, then the random id), so a seed gives the same masks.
void mask_tokens_for_mlm(FinetuneBatch& batch, const std::vector<bool>& special, int64_t mask_id, int64_t vocab_size,
                         double mlm_probability, Rng& rng);

}  // namespace tfm
