// Fine-tuning an encoder with a task head, as the Hugging Face Trainer does it: AdamW (torch.optim.AdamW, no
// weight decay on biases and LayerNorm weights), get_linear_schedule_with_warmup, clip_grad_norm_ before each
// step. BertForSequenceClassification first (modeling_bert.py): logits = classifier(dropout(pooler_output)),
// loss = mean cross-entropy over the batch.
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

// One padded batch: ids, types and mask [B, L] (row-major), labels [B] in [0, num_labels).
struct ClassificationBatch {
  int64_t B = 0, L = 0;
  std::vector<int64_t> input_ids, token_type_ids, labels;
  std::vector<float> attention_mask;  // 1 real token, 0 padding
};

// TrainingArguments' optimizer and schedule fields, with their defaults.
struct FinetuneHyperparameters {
  double learning_rate = 5e-5, weight_decay = 0.0, adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  int64_t warmup_steps = 0, total_steps = 1;
  float dropout = 0.1f;        // config.json hidden_dropout_prob (classifier_dropout when set, as HF)
  uint64_t seed = 42;
};

// transformers.get_linear_schedule_with_warmup: the factor of the learning rate at optimizer step `step`
// (0-based, the LambdaLR count before that step): step / warmup while step < warmup, then
// max(0, (total - step) / (total - warmup)).
double linear_warmup_factor(int64_t step, int64_t warmup_steps, int64_t total_steps);

// torch.nn.utils.clip_grad_norm_(params, max_norm): the total 2-norm of all gradients; when it exceeds max_norm the
// gradients are scaled by max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm_hf(nn::ParamStore& params, double max_norm);

// The nn::Context of a training forward: gradients saved, dropout hp.dropout drawn from `rng` when `dropout`.
nn::Context training_context(const FinetuneHyperparameters& hp, Rng& rng, bool dropout);

// The Trainer's optimizer over `params`: torch.optim.AdamW with hp's betas, eps and weight decay, in two groups
// (Trainer.get_decay_parameter_names: no decay on biases and LayerNorm weights).
std::unique_ptr<Adam> make_trainer_adamw(const nn::ParamStore& params, const FinetuneHyperparameters& hp);
// The Trainer's optimizer step `step` (0-based) on the gradients in `params`: clip_grad_norm_hf(max_grad_norm),
// then AdamW at learning_rate * linear_warmup_factor(step). Returns that learning rate. Throws
// std::runtime_error when the gradient norm is not finite (nothing is updated then).
double trainer_optimizer_step(nn::ParamStore& params, Adam& adam, const FinetuneHyperparameters& hp, int64_t step);

// BertForSequenceClassification in training: the body (models/bert.h BertTrainable, names "bert.*") and
// "classifier.weight" [num_labels, H], "classifier.bias" [num_labels] in one ParamStore.
class SequenceClassificationTrainer {
 public:
  // Loads the body from `weights` (BertModel or BertFor* names). The classifier is read from the checkpoint when it
  // holds one of num_labels rows (continued fine-tuning); otherwise initialised as BertPreTrainedModel._init_weights
  // does (weight N(0, initializer_range), bias 0) from `hp.seed`. Throws std::runtime_error naming a missing tensor
  // or a checkpoint without pooler weights.
  SequenceClassificationTrainer(const EncoderConfig& config, WeightSource& weights, int64_t num_labels,
                                const FinetuneHyperparameters& hp, double initializer_range = 0.02);

  // One optimizer step on `batch`: forward with dropout, mean cross-entropy, backward, clipping, AdamW at
  // learning_rate * linear_warmup_factor(step). Returns the loss (nats, mean over the batch). Throws
  // std::runtime_error when the loss or the gradient norm is not finite (the parameters are left unchanged).
  double train_step(const ClassificationBatch& batch);
  // Forward and backward only (no update, gradients zeroed first): the loss; gradients stay in params().
  double compute_gradients(const ClassificationBatch& batch, bool dropout = true);
  // logits [B, num_labels] without dropout (evaluation).
  std::vector<float> logits(const ClassificationBatch& batch);

  nn::ParamStore& params() { return store_; }
  int64_t steps() const { return step_; }
  double last_lr() const { return last_lr_; }
  int64_t num_labels() const { return num_labels_; }

 private:
  void forward(const ClassificationBatch& batch, bool dropout);
  EncoderConfig config_;
  FinetuneHyperparameters hp_;
  int64_t num_labels_;
  nn::ParamStore store_;
  std::unique_ptr<BertTrainable> body_;
  nn::Linear classifier_;
  std::unique_ptr<Adam> adam_;
  Rng rng_;
  int64_t step_ = 0;
  double last_lr_ = 0;
  std::vector<float> pooled_drop_, drop_mask_, logits_;
};

}  // namespace tfm
