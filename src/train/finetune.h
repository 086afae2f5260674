// Fine-tuning an encoder with a task head, as the Hugging Face Trainer does it: AdamW (torch.optim.AdamW, no
// weight decay on biases and LayerNorm weights), get_linear_schedule_with_warmup, clip_grad_norm_ before each
// step, gradient accumulation (each micro-batch's loss divided by the number of micro-batches of the step).
// The families: BERT, RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT and MPNet (the body: models/bert.h BertTrainable
// with the family's detail::BertVariant, MPNet's relative position bias trained with it) and ModernBERT
// (models/modernbert.h ModernBertTrainable), each body a models/trainable_encoder.h TrainableEncoder; a family's
// ModelFamily entry (models/registry.h, in its own file) holds its body, head and dropouts. The heads, as each
// modeling_*.py writes them (dropout p: the head's):
//  - sequence classification, loss = mean cross-entropy over the batch:
//      BertForSequenceClassification: classifier(dropout(pooler_output));
//      RobertaForSequenceClassification (XLM-R, CamemBERT; MPNetForSequenceClassification's
//        MPNetClassificationHead is the same): RobertaClassificationHead on <s>:
//        out_proj(dropout(tanh(dense(dropout(h[:, 0]))))), tensors classifier.dense.*, classifier.out_proj.*;
//      DistilBertForSequenceClassification: classifier(dropout(ReLU(pre_classifier(h[:, 0])))), p
//        seq_classif_dropout;
//      ModernBertForSequenceClassification: classifier(dropout(head(pool(h)))), head = ModernBertPredictionHead
//        head.norm(act(head.dense(x))), pool per classifier_pooling: "cls" h[:, 0], "mean" the mean over
//        attention_mask; p classifier_dropout;
//  - token classification: classifier(dropout(last_hidden_state)) per token (ModernBERT:
//    classifier(dropout(head(h)))), loss = mean cross-entropy over the tokens whose label is not -100
//    (CrossEntropyLoss's ignore_index);
//  - masked LM: transform dense, activation, LayerNorm, then the decoder tied to the word embeddings plus its own
//    bias; loss as token classification's. BertOnlyMLMHead (cls.predictions.transform.{dense, LayerNorm},
//    hidden_act, cls.predictions.bias), RobertaLMHead and MPNetLMHead (lm_head.{dense, layer_norm}, gelu,
//    lm_head.bias), DistilBertForMaskedLM (vocab_transform, activation, vocab_layer_norm, vocab_projector.bias),
//    ModernBertForMaskedLM (head, then decoder tied to model.embeddings.tok_embeddings with decoder.bias when
//    decoder_bias; its sparse_prediction computes the same loss on the labelled rows only, as here).
//
// Layout: the pieces every task shares (FinetuneHyperparameters, FinetuneOptimizer, FinetuneModel: body, head,
// step and accumulation) come first; each task is a thin FinetuneModel subclass choosing the rows the head reads
// and their labels.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <string>
#include <vector>

#include "core/rng.h"
#include "models/trainable_encoder.h"
#include "models/head_layout.h"
#include "models/registry.h"
#include "nn/params.h"
#include "train/optim.h"

namespace tfm {

// One padded batch: ids, types and mask [B, L] (row-major). labels: [B] in [0, num_labels) for sequence
// classification; [B, L] for token classification and masked LM, where -100 (kIgnoreLabel) marks a position
// without a label (special tokens, padding, continuation sub-tokens, unmasked tokens). targets: [B] for
// regression (sequence classification with num_labels 1, problem_type "regression"; labels empty).
struct ClassificationBatch {
  int64_t B = 0, L = 0;
  std::vector<int64_t> input_ids, token_type_ids, labels;
  std::vector<float> attention_mask;  // 1 real token, 0 padding
  std::vector<float> targets;
};
using FinetuneBatch = ClassificationBatch;
inline constexpr int64_t kIgnoreLabel = -100;  // torch.nn.CrossEntropyLoss ignore_index

// TrainingArguments' optimizer and schedule fields, with their defaults.
struct FinetuneHyperparameters {
  double learning_rate = 5e-5, weight_decay = 0.0, adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  int64_t warmup_steps = 0, total_steps = 1;  // optimizer steps (after gradient accumulation)
  float dropout = 0.1f;        // the body's p (training_dropouts: hidden_dropout_prob; DistilBERT dropout;
                               // ModernBERT 0: its body reads its own p's)
  float head_dropout = -1.0f;  // the head's p (classifier_dropout, DistilBERT seq_classif_dropout); < 0: dropout
  float attention_dropout = -1.0f;  // the attention probabilities' p (attention_probs_dropout_prob, DistilBERT
                                    // attention_dropout); < 0: dropout
  uint64_t seed = 42;
};

// ---------------------------------------------------------------- the families

// The config.json model_types fine-tuning takes (the trainable families', in order), for messages: "bert, roberta,
// xlm-roberta, camembert, distilbert, mpnet, modernbert".
const char* trainable_model_types();
// Throws std::invalid_argument "<where>: model_type 'x' cannot be fine-tuned yet (supported: bert, ...)" for a
// family without a trainer (the tutorial encoder), and models/registry.h family_of's std::runtime_error for a
// model_type no family answers.
void check_finetune_family(const std::string& model_type, const std::string& where);
// The dropouts of a family's *For<kind> model in training, from config.json: body = hidden_dropout_prob (default
// 0.1; DistilBERT: dropout, default 0.1; ModernBERT: 0, its body reading embedding_dropout, attention_dropout and
// mlp_dropout itself, checked here); attention (on the attention probabilities) = attention_probs_dropout_prob
// (default 0.1; DistilBERT: attention_dropout, default 0.1; ModernBERT 0); head = classifier_dropout when set (not
// MPNet, whose config has none), else
// the body's (DistilBERT sequence classification: seq_classif_dropout, default 0.2; token classification:
// dropout; ModernBERT classifier_dropout, default 0); masked LM heads have none (head = body, unused; ModernBERT
// 0): each family's ModelFamily::training_dropouts. Throws std::runtime_error naming `file` for a value that is
// not a number in [0, 1), and as check_finetune_family for a model_type outside trainable_model_types().
TrainingDropouts training_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file);
// The trainable body of config.model_type's family (check_finetune_family; std::invalid_argument for another),
// its parameters registered in `store` (finalize the store, then body->load()).
std::unique_ptr<TrainableEncoder> make_trainable_encoder(nn::ParamStore& store, const EncoderConfig& config,
                                                         const TrainableEncoderOptions& options);
// Hugging Face's class name for the family and head ("RobertaForTokenClassification",
// "XLMRobertaForSequenceClassification", "DistilBertForMaskedLM", ...), config.json "architectures" of a saved
// folder. Throws std::invalid_argument as check_finetune_family.
std::string trained_architecture(const std::string& model_type, HeadKind kind);

// ---------------------------------------------------------------- shared by every task

// transformers.get_linear_schedule_with_warmup: the factor of the learning rate at optimizer step `step`
// (0-based, the LambdaLR count before that step): step / warmup while step < warmup, then
// max(0, (total - step) / (total - warmup)).
double linear_warmup_factor(int64_t step, int64_t warmup_steps, int64_t total_steps);

// torch.nn.MSELoss() (reduction "mean") of pred [N] against target [N]: returns mean((pred - target)^2) and writes
// dpred [N] = scale * 2 (pred - target) / N. Throws std::invalid_argument for N < 1.
double mse_loss(float* dpred, const float* pred, const float* target, int64_t N, float scale);

// torch.nn.utils.clip_grad_norm_(params, max_norm): the total 2-norm of all gradients; when it exceeds max_norm the
// gradients are scaled by max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm_hf(nn::ParamStore& params, double max_norm);

// Trainer.get_decay_parameter_names: true for the parameters without weight decay: the name (lowercased) contains
// "bias", "layernorm" or "rmsnorm", or has a segment "norm" or ending in "_norm" (its forbidden_name_patterns;
// every LayerNorm of the families is so named: LayerNorm, layer_norm, sa_layer_norm, attn_norm, head.norm, ...).
bool is_no_decay_parameter(const std::string& name);

// The nn::Context of a training forward: gradients saved; when `dropout`, masks drawn from `rng` (ctx.rng set) with
// p hp.dropout for the bodies that take one p (BERT's), while a body with its own p per site (ModernBERT) and the
// head's dropout (hp.head_dropout) drop whenever ctx.rng is set.
nn::Context training_context(const FinetuneHyperparameters& hp, Rng& rng, bool dropout);

// The Trainer's optimizer step over a whole ParamStore: clip_grad_norm_hf, then torch.optim.AdamW (two parameter
// groups: weight_decay, and 0 for is_no_decay_parameter) at learning_rate * linear_warmup_factor(steps()). The
// clipping factor is applied as AdamW reads the gradients (the same update, bit for bit): the store's gradients
// are left unclipped.
class FinetuneOptimizer {
 public:
  // frozen: names of parameters that are not trained (requires_grad False: no decay, no update; their gradient
  // must stay 0).
  FinetuneOptimizer(const nn::ParamStore& store, const FinetuneHyperparameters& hp,
                    const std::vector<std::string>& frozen = {});
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

struct TrainingHead;  // the task head's stages (train/finetune.cpp)

// An encoder body of a family in trainable_model_types() and a task head in one ParamStore (Hugging Face names: the
// family's prefix, e.g. "roberta.encoder.layer.0...", and the head's, e.g. "classifier.out_proj.weight"),
// trained by a FinetuneOptimizer.
class FinetuneModel {
 public:
  virtual ~FinetuneModel();
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
  // config.json "architectures" of the trained model (trained_architecture).
  const std::string& architecture() const { return architecture_; }
  // The parameters that are not trained (TrainableEncoder::frozen_names), saved as loaded.
  const std::vector<std::string>& frozen_parameters() const { return body_->frozen_names(); }

 protected:
  // The body of config.model_type's family (check_finetune_family) and its head of `kind` (out: num_labels;
  // masked LM: vocab_size) in the store, loaded from `weights`; the head's tensors from the checkpoint where it
  // stores them with their shapes (from_pretrained with ignore_mismatched_sizes), the others initialised as
  // _init_weights does from hp.seed (Linear weights N(0, initializer_range), biases 0, LayerNorm 1 and 0). Then
  // the optimizer. Throws std::runtime_error naming a missing body tensor, std::invalid_argument for another
  // family or num_labels < 1.
  FinetuneModel(const EncoderConfig& config, WeightSource& weights, HeadKind kind, int64_t num_labels,
                const FinetuneHyperparameters& hp, double initializer_range);
  // The body's forward on `batch`, then the head on `rows` of its output (positions b * L + l of
  // last_hidden_state; ignored when the head reads the pooler output, one row per sequence): logits_ [M, out].
  void forward_rows(const FinetuneBatch& batch, const std::vector<int64_t>& rows, bool dropout);
  // The mean cross-entropy of logits_ against targets [M] (kIgnoreLabel rows left out), its gradient times `scale`
  // back through the head and the body. Returns the loss (0, no gradient, when no row is labelled).
  double backward_rows(const std::vector<int64_t>& targets, float scale);
  // dlogits [M, out] (the loss's gradient at logits_, scale included) back through the head and the body.
  void backward_logits(std::vector<float> dlogits);
  nn::Context train_context(bool dropout);
  EncoderConfig config_;
  FinetuneHyperparameters hp_;
  nn::ParamStore store_;
  std::unique_ptr<TrainableEncoder> body_;
  std::unique_ptr<TrainingHead> head_;
  std::unique_ptr<FinetuneOptimizer> opt_;
  Rng rng_;
  std::string architecture_;
  int64_t out_features_ = 0;
  std::vector<int64_t> rows_;  // the rows of the last forward_rows
  int64_t tokens_ = 0;         // B * L of the last forward_rows
  std::vector<float> logits_;  // [M, out] of the last forward_rows
  // Mean pooling (HeadInput::MeanTokens): the last forward_rows' attention_mask [B, L] and its B, L.
  std::vector<float> pool_mask_;
  int64_t batch_ = 0, seq_len_ = 0;
};

// ---------------------------------------------------------------- the tasks

// *ForSequenceClassification in training (see the top of the file for each family's head). num_labels 1 is
// regression, as the modeling files infer problem_type "regression" for num_labels == 1: loss =
// MSELoss()(logits.squeeze(), labels), the mean squared error of the single logit against batch.targets [B].
class SequenceClassificationTrainer : public FinetuneModel {
 public:
  // Loads the body from `weights` (the base model's or the *For* names). Throws std::runtime_error naming a
  // missing tensor, or (BERT) a checkpoint without pooler weights.
  SequenceClassificationTrainer(const EncoderConfig& config, WeightSource& weights, int64_t num_labels,
                                const FinetuneHyperparameters& hp, double initializer_range = 0.02);
  // labels [B]: mean cross-entropy over the batch; regression: targets [B], mean squared error. Throws
  // std::invalid_argument for labels or targets that do not match [B], a label out of range or a target that is
  // not finite.
  double accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) override;
  // logits [B, num_labels] without dropout (evaluation; regression: the predicted values [B, 1]).
  std::vector<float> logits(const ClassificationBatch& batch);
  int64_t num_labels() const { return out_features_; }
  bool regression() const { return out_features_ == 1; }

 private:
  void forward(const FinetuneBatch& batch, bool dropout);
};

// *ForTokenClassification in training: the body without pooler (add_pooling_layer=False; a pooler in the
// checkpoint is not used) and "classifier.weight" [num_labels, H], "classifier.bias" [num_labels].
class TokenClassificationTrainer : public FinetuneModel {
 public:
  TokenClassificationTrainer(const EncoderConfig& config, WeightSource& weights, int64_t num_labels,
                             const FinetuneHyperparameters& hp, double initializer_range = 0.02);
  // labels [B, L] (-100 ignored): mean cross-entropy over the labelled tokens (0, no gradient, when none is).
  double accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) override;
  // logits [B, L, num_labels] without dropout (evaluation).
  std::vector<float> logits(const FinetuneBatch& batch);
  int64_t num_labels() const { return out_features_; }

 private:
  void forward(const FinetuneBatch& batch, bool dropout);
};

// *ForMaskedLM in training: the body without pooler and the family's LM head, its decoder's weight the word
// embeddings ("bert.embeddings.word_embeddings.weight", "roberta.", "distilbert.", ModernBERT's
// "model.embeddings.tok_embeddings.weight"; tied: its gradient is the sum
// of the embedding lookup's and the decoder's, as with tie_word_embeddings); a stored untied decoder weight is not
// used. Also accepted for the bias: "cls.predictions.decoder.bias" (BERT), "lm_head.decoder.bias" (RoBERTa).
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
  // Forward of the labelled positions; fills rows_, targets_ and logits_ [M, V].
  void forward(const FinetuneBatch& batch, bool dropout);
  std::vector<int64_t> targets_;
};

// DataCollatorForLanguageModeling.torch_mask_tokens (mlm_probability, 80/10/10) on one batch, in place:
// each position that is not special (special[b * L + l], padding included) is chosen with probability
// mlm_probability; a chosen position's label is its id (others -100); it becomes mask_id with probability 0.8,
// else a uniform random id in [0, vocab_size) with probability 0.5, else stays. Draws from `rng` in a fixed
// order (per position: chosen, then replaced, then random, then the random id), so a seed gives the same masks.
void mask_tokens_for_mlm(FinetuneBatch& batch, const std::vector<bool>& special, int64_t mask_id, int64_t vocab_size,
                         double mlm_probability, Rng& rng);

}  // namespace tfm
