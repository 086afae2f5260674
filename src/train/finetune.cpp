#include "train/finetune.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ops/cross_entropy.h"
#include "ops/dropout.h"

namespace tfm {

double linear_warmup_factor(int64_t step, int64_t warmup_steps, int64_t total_steps) {
  if (step < warmup_steps) return (double)step / (double)std::max<int64_t>(1, warmup_steps);
  return std::max(0.0, (double)(total_steps - step) / (double)std::max<int64_t>(1, total_steps - warmup_steps));
}

double clip_grad_norm_hf(nn::ParamStore& params, double max_norm) {
  const double norm = grad_norm(params);
  if (max_norm > 0 && std::isfinite(norm)) {
    // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, multiplied into every gradient (float32).
    const float coef = (float)std::min(1.0, max_norm / (norm + 1e-6));
    if (coef < 1.0f)
      for (float& g : params.all_grad()) g *= coef;
  }
  return norm;
}

namespace {
bool is_no_decay(const std::string& name) {
  // Trainer.get_decay_parameter_names: every parameter except biases and those of LayerNorm modules.
  return (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) ||
         name.find("LayerNorm") != std::string::npos;
}
}  // namespace

nn::Context training_context(const FinetuneHyperparameters& hp, Rng& rng, bool dropout) {
  nn::Context ctx;
  ctx.grad = true;
  if (dropout && hp.dropout > 0) {
    ctx.rng = &rng;
    ctx.dropout = hp.dropout;
  }
  return ctx;
}

std::unique_ptr<Adam> make_trainer_adamw(const nn::ParamStore& params, const FinetuneHyperparameters& hp) {
  AdamOptions ao;
  ao.lr = (float)hp.learning_rate;
  ao.beta1 = (float)hp.adam_beta1;
  ao.beta2 = (float)hp.adam_beta2;
  ao.eps = (float)hp.adam_epsilon;
  ao.weight_decay = (float)hp.weight_decay;
  ao.decoupled_weight_decay = true;
  auto adam = std::make_unique<Adam>(params.total(), ao);
  std::vector<bool> decay;
  for (const auto& e : params.entries()) decay.push_back(!is_no_decay(e.name));
  adam->set_decay(std::move(decay));
  return adam;
}

double trainer_optimizer_step(nn::ParamStore& params, Adam& adam, const FinetuneHyperparameters& hp, int64_t step) {
  const double norm = clip_grad_norm_hf(params, hp.max_grad_norm);
  if (!std::isfinite(norm)) throw std::runtime_error("the gradient norm is not finite");
  const double lr = hp.learning_rate * linear_warmup_factor(step, hp.warmup_steps, hp.total_steps);
  adam.step(params, (float)lr);
  return lr;
}

SequenceClassificationTrainer::SequenceClassificationTrainer(const EncoderConfig& config, WeightSource& weights,
                                                             int64_t num_labels, const FinetuneHyperparameters& hp,
                                                             double initializer_range)
    : config_(config), hp_(hp), num_labels_(num_labels), rng_(hp.seed) {
  if (config.model_type != "bert")
    throw std::runtime_error("fine-tuning supports model_type 'bert' so far, not '" + config.model_type + "'");
  if (num_labels < 1) throw std::invalid_argument("num_labels must be at least 1");
  const int64_t H = config.hidden_size;
  body_ = std::make_unique<BertTrainable>(store_, config, /*pooler=*/true, "bert.");
  classifier_ = nn::Linear::load(nn::Vars(store_).prefix("classifier"), H, num_labels);
  store_.finalize();
  if (!weights.has("pooler.dense.weight") && !weights.has("bert.pooler.dense.weight"))
    throw std::runtime_error("the checkpoint has no pooler (pooler.dense.weight): sequence classification needs it");
  body_->load(store_, weights);
  const bool has_head = weights.has("classifier.weight") && weights.has("classifier.bias");
  bool loaded = false;
  if (has_head) {
    try {
      Tensor w = weights.get("classifier.weight", {num_labels, H});
      Tensor b = weights.get("classifier.bias", {num_labels});
      std::memcpy(classifier_.weight.data(), w.f32(), sizeof(float) * w.numel());
      std::memcpy(classifier_.bias.data(), b.f32(), sizeof(float) * b.numel());
      loaded = true;
    } catch (const std::runtime_error&) {  // another number of labels: a fresh head, as from_pretrained with
    }                                      // ignore_mismatched_sizes
  }
  if (!loaded) {
    Rng init(hp.seed);
    float* w = classifier_.weight.data();
    for (int64_t i = 0; i < num_labels * H; ++i) w[i] = (float)initializer_range * init.normal();
    std::fill(classifier_.bias.data(), classifier_.bias.data() + num_labels, 0.0f);
  }
  adam_ = make_trainer_adamw(store_, hp);
}

void SequenceClassificationTrainer::forward(const ClassificationBatch& batch, bool dropout) {
  const int64_t B = batch.B, L = batch.L, H = config_.hidden_size, C = num_labels_;
  if ((int64_t)batch.input_ids.size() != B * L || (int64_t)batch.attention_mask.size() != B * L ||
      (!batch.token_type_ids.empty() && (int64_t)batch.token_type_ids.size() != B * L))
    throw std::invalid_argument("classification batch: arrays do not match [B, L]");
  const nn::Context ctx = training_context(hp_, rng_, dropout);
  body_->forward(ctx, batch.input_ids.data(), batch.token_type_ids.empty() ? nullptr : batch.token_type_ids.data(),
                 batch.attention_mask.data(), B, L);
  pooled_drop_.assign(body_->pooler_output(), body_->pooler_output() + B * H);
  drop_mask_.clear();
  if (ctx.dropping()) {
    drop_mask_.resize(B * H);
    ops::dropout_mask(drop_mask_.data(), B * H, ctx.dropout, rng_);
    ops::dropout_apply(pooled_drop_.data(), pooled_drop_.data(), drop_mask_.data(), B * H);
  }
  logits_.resize(B * C);
  classifier_.forward(ctx, logits_.data(), pooled_drop_.data(), B);
}

std::vector<float> SequenceClassificationTrainer::logits(const ClassificationBatch& batch) {
  forward(batch, /*dropout=*/false);
  return logits_;
}

double SequenceClassificationTrainer::compute_gradients(const ClassificationBatch& batch, bool dropout) {
  const int64_t B = batch.B, H = config_.hidden_size, C = num_labels_;
  if ((int64_t)batch.labels.size() != B) throw std::invalid_argument("classification batch: labels must be [B]");
  for (int64_t y : batch.labels)
    if (y < 0 || y >= C)
      throw std::invalid_argument("label id " + std::to_string(y) + " is outside [0, " + std::to_string(C) + ")");
  store_.zero_grad();
  forward(batch, dropout);
  std::vector<float> loss(B), dlogits(B * C), weight(B, 1.0f / (float)B);
  ops::cross_entropy_forward_backward(loss.data(), dlogits.data(), logits_.data(), batch.labels.data(), weight.data(), B,
                                      C, 0.0f);
  double total = 0;
  for (float l : loss) total += l;
  std::vector<float> dpooled(B * H);
  classifier_.backward(dpooled.data(), dlogits.data(), pooled_drop_.data(), B, /*accumulate=*/false);
  if (!drop_mask_.empty()) ops::dropout_apply(dpooled.data(), dpooled.data(), drop_mask_.data(), B * H);
  body_->backward(nullptr, dpooled.data());
  return total / (double)B;
}

double SequenceClassificationTrainer::train_step(const ClassificationBatch& batch) {
  const double loss = compute_gradients(batch, /*dropout=*/true);
  if (!std::isfinite(loss)) throw std::runtime_error("the training loss is not finite (" + std::to_string(loss) + ")");
  last_lr_ = trainer_optimizer_step(store_, *adam_, hp_, step_);
  ++step_;
  return loss;
}

}  // namespace tfm
