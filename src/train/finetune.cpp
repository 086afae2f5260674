#include "train/finetune.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/gemm_bf16.h"

namespace tfm {

// ---------------------------------------------------------------- shared by every task

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

bool is_no_decay_parameter(const std::string& name) {
  return (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) ||
         name.find("LayerNorm") != std::string::npos;
}

FinetuneOptimizer::FinetuneOptimizer(const nn::ParamStore& store, const FinetuneHyperparameters& hp) : hp_(hp) {
  AdamOptions ao;
  ao.lr = (float)hp.learning_rate;
  ao.beta1 = (float)hp.adam_beta1;
  ao.beta2 = (float)hp.adam_beta2;
  ao.eps = (float)hp.adam_epsilon;
  ao.weight_decay = (float)hp.weight_decay;
  ao.decoupled_weight_decay = true;
  adam_ = std::make_unique<Adam>(store.total(), ao);
  std::vector<bool> decay;
  for (const auto& e : store.entries()) decay.push_back(!is_no_decay_parameter(e.name));
  adam_->set_decay(std::move(decay));
}

double FinetuneOptimizer::step(nn::ParamStore& store) {
  const double norm = clip_grad_norm_hf(store, hp_.max_grad_norm);
  if (!std::isfinite(norm)) throw std::runtime_error("the gradient norm is not finite");
  last_lr_ = hp_.learning_rate * linear_warmup_factor(step_, hp_.warmup_steps, hp_.total_steps);
  adam_->step(store, (float)last_lr_);
  ++step_;
  return norm;
}

void FinetuneOptimizer::restore(int64_t steps, double last_lr) {
  step_ = steps;
  last_lr_ = last_lr;
  adam_->set_steps(steps);
}

nn::Context training_context(const FinetuneHyperparameters& hp, Rng& rng, bool dropout) {
  nn::Context ctx;
  ctx.grad = true;
  if (dropout && hp.dropout > 0) {
    ctx.rng = &rng;
    ctx.dropout = hp.dropout;
  }
  return ctx;
}

nn::Context FinetuneModel::train_context(bool dropout) { return training_context(hp_, rng_, dropout); }

double FinetuneModel::compute_gradients(const FinetuneBatch& batch, bool dropout) {
  store_.zero_grad();
  return accumulate_gradients(batch, 1.0f, dropout);
}

double FinetuneModel::optimizer_step() { return opt_->step(store_); }

void FinetuneModel::set_precision(ops::ComputeType precision) {
  if (precision == ops::ComputeType::I8) throw std::invalid_argument("training precision must be fp32 or bf16, not int8");
  if (precision == ops::ComputeType::BF16) ops::require_bf16_gemm();
  if (body_base_) body_base_->set_precision(precision);
  for (nn::Linear* l : head_linears_) l->precision = precision;
}

double FinetuneModel::train_step(const FinetuneBatch& batch) {
  const double loss = compute_gradients(batch, /*dropout=*/true);
  if (!std::isfinite(loss)) throw std::runtime_error("the training loss is not finite (" + std::to_string(loss) + ")");
  optimizer_step();
  return loss;
}

namespace {

void check_batch(const FinetuneBatch& b) {
  const int64_t n = b.B * b.L;
  if ((int64_t)b.input_ids.size() != n || (int64_t)b.attention_mask.size() != n ||
      (!b.token_type_ids.empty() && (int64_t)b.token_type_ids.size() != n))
    throw std::invalid_argument("fine-tuning batch: arrays do not match [B, L]");
}

// A classifier "classifier.{weight,bias}" [C, H]: from the checkpoint when it holds one of C rows, else
// BertPreTrainedModel._init_weights (N(0, initializer_range) weights, zero bias) from `seed`.
void load_or_init_classifier(nn::Linear& lin, WeightSource& weights, int64_t C, int64_t H, double init_range,
                             uint64_t seed) {
  if (weights.has("classifier.weight") && weights.has("classifier.bias")) {
    try {
      Tensor w = weights.get("classifier.weight", {C, H});
      Tensor b = weights.get("classifier.bias", {C});
      std::memcpy(lin.weight.data(), w.f32(), sizeof(float) * w.numel());
      std::memcpy(lin.bias.data(), b.f32(), sizeof(float) * b.numel());
      return;
    } catch (const std::runtime_error&) {  // another number of labels: a fresh head, as from_pretrained with
    }                                      // ignore_mismatched_sizes
  }
  Rng init(seed);
  float* w = lin.weight.data();
  for (int64_t i = 0; i < C * H; ++i) w[i] = (float)init_range * init.normal();
  std::fill(lin.bias.data(), lin.bias.data() + C, 0.0f);
}

// Mean cross-entropy over the rows of labels [N] that are not kIgnoreLabel, its gradient scaled by `scale` into
// dlogits [N, C]. Returns the mean (0 when no row is labelled).
double token_cross_entropy(float* dlogits, const float* logits, const std::vector<int64_t>& labels, int64_t C,
                           float scale) {
  const int64_t N = (int64_t)labels.size();
  int64_t count = 0;
  for (int64_t y : labels) {
    if (y == kIgnoreLabel) continue;
    if (y < 0 || y >= C)
      throw std::invalid_argument("label id " + std::to_string(y) + " is outside [0, " + std::to_string(C) + ")");
    ++count;
  }
  std::vector<float> loss(N), weight(N, 0.0f);
  std::vector<int64_t> safe(labels);
  for (int64_t n = 0; n < N; ++n) {
    if (labels[n] == kIgnoreLabel) {
      safe[n] = 0;
    } else {
      weight[n] = scale / (float)count;
    }
  }
  ops::cross_entropy_forward_backward(loss.data(), dlogits, logits, safe.data(), weight.data(), N, C, 0.0f);
  double total = 0;
  for (int64_t n = 0; n < N; ++n)
    if (labels[n] != kIgnoreLabel) total += loss[n];
  return count ? total / (double)count : 0.0;
}

}  // namespace

// ---------------------------------------------------------------- sequence classification

SequenceClassificationTrainer::SequenceClassificationTrainer(const EncoderConfig& config, WeightSource& weights,
                                                             int64_t num_labels, const FinetuneHyperparameters& hp,
                                                             double initializer_range)
    : FinetuneModel(hp), config_(config), num_labels_(num_labels) {
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
  load_or_init_classifier(classifier_, weights, num_labels, H, initializer_range, hp.seed);
  body_base_ = body_.get();
  head_linears_ = {&classifier_};
  make_optimizer();
}

void SequenceClassificationTrainer::forward(const ClassificationBatch& batch, bool dropout) {
  const int64_t B = batch.B, L = batch.L, H = config_.hidden_size, C = num_labels_;
  check_batch(batch);
  const nn::Context ctx = train_context(dropout);
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

double SequenceClassificationTrainer::accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) {
  const int64_t B = batch.B, H = config_.hidden_size, C = num_labels_;
  if ((int64_t)batch.labels.size() != B) throw std::invalid_argument("classification batch: labels must be [B]");
  for (int64_t y : batch.labels)
    if (y < 0 || y >= C)
      throw std::invalid_argument("label id " + std::to_string(y) + " is outside [0, " + std::to_string(C) + ")");
  forward(batch, dropout);
  std::vector<float> loss(B), dlogits(B * C), weight(B, scale / (float)B);
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

// ---------------------------------------------------------------- token classification

TokenClassificationTrainer::TokenClassificationTrainer(const EncoderConfig& config, WeightSource& weights,
                                                       int64_t num_labels, const FinetuneHyperparameters& hp,
                                                       double initializer_range)
    : FinetuneModel(hp), config_(config), num_labels_(num_labels) {
  if (config.model_type != "bert")
    throw std::runtime_error("fine-tuning supports model_type 'bert' so far, not '" + config.model_type + "'");
  if (num_labels < 1) throw std::invalid_argument("num_labels must be at least 1");
  const int64_t H = config.hidden_size;
  body_ = std::make_unique<BertTrainable>(store_, config, /*pooler=*/false, "bert.");
  classifier_ = nn::Linear::load(nn::Vars(store_).prefix("classifier"), H, num_labels);
  store_.finalize();
  body_->load(store_, weights);
  load_or_init_classifier(classifier_, weights, num_labels, H, initializer_range, hp.seed);
  body_base_ = body_.get();
  head_linears_ = {&classifier_};
  make_optimizer();
}

void TokenClassificationTrainer::forward(const FinetuneBatch& batch, bool dropout) {
  const int64_t B = batch.B, L = batch.L, N = B * L, H = config_.hidden_size, C = num_labels_;
  check_batch(batch);
  const nn::Context ctx = train_context(dropout);
  body_->forward(ctx, batch.input_ids.data(), batch.token_type_ids.empty() ? nullptr : batch.token_type_ids.data(),
                 batch.attention_mask.data(), B, L);
  hidden_drop_.assign(body_->last_hidden_state(), body_->last_hidden_state() + N * H);
  drop_mask_.clear();
  if (ctx.dropping()) {
    drop_mask_.resize(N * H);
    ops::dropout_mask(drop_mask_.data(), N * H, ctx.dropout, rng_);
    ops::dropout_apply(hidden_drop_.data(), hidden_drop_.data(), drop_mask_.data(), N * H);
  }
  logits_.resize(N * C);
  classifier_.forward(ctx, logits_.data(), hidden_drop_.data(), N);
}

std::vector<float> TokenClassificationTrainer::logits(const FinetuneBatch& batch) {
  forward(batch, /*dropout=*/false);
  return logits_;
}

double TokenClassificationTrainer::accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) {
  const int64_t N = batch.B * batch.L, H = config_.hidden_size, C = num_labels_;
  if ((int64_t)batch.labels.size() != N) throw std::invalid_argument("token classification batch: labels must be [B, L]");
  forward(batch, dropout);
  std::vector<float> dlogits(N * C);
  const double loss = token_cross_entropy(dlogits.data(), logits_.data(), batch.labels, C, scale);
  std::vector<float> dhidden(N * H);
  classifier_.backward(dhidden.data(), dlogits.data(), hidden_drop_.data(), N, /*accumulate=*/false);
  if (!drop_mask_.empty()) ops::dropout_apply(dhidden.data(), dhidden.data(), drop_mask_.data(), N * H);
  body_->backward(dhidden.data(), nullptr);
  return loss;
}

// ---------------------------------------------------------------- masked LM

MaskedLMTrainer::MaskedLMTrainer(const EncoderConfig& config, WeightSource& weights, const FinetuneHyperparameters& hp,
                                 double initializer_range)
    : FinetuneModel(hp), config_(config) {
  if (config.model_type != "bert")
    throw std::runtime_error("fine-tuning supports model_type 'bert' so far, not '" + config.model_type + "'");
  const int64_t H = config.hidden_size, V = config.vocab_size;
  body_ = std::make_unique<BertTrainable>(store_, config, /*pooler=*/false, "bert.");
  const nn::Vars pred = nn::Vars(store_).prefix("cls.predictions");
  transform_ = nn::Linear::load(pred.prefix("transform.dense"), H, H);
  transform_ln_ = nn::LayerNorm::load(pred.prefix("transform.LayerNorm"), H, (float)config.layer_norm_eps);
  nn::Param bias = pred.get("bias", {V});
  store_.finalize();
  body_->load(store_, weights);
  act_ = ops::parse_activation(config.hidden_act);
  decoder_.weight = nn::Param(&store_, store_.index_of("bert.embeddings.word_embeddings.weight"));
  decoder_.bias = bias;
  decoder_.in_features = H;
  decoder_.out_features = V;
  // The head from the checkpoint (BertForMaskedLM / BertForPreTraining), else _init_weights.
  struct Item {
    const char* name;
    std::vector<std::string> aliases;
    Shape shape;
    float* dst;
  };
  std::vector<Item> items = {
      {"cls.predictions.transform.dense.weight", {}, {H, H}, transform_.weight.data()},
      {"cls.predictions.transform.dense.bias", {}, {H}, transform_.bias.data()},
      {"cls.predictions.transform.LayerNorm.weight", {"cls.predictions.transform.LayerNorm.gamma"}, {H},
       transform_ln_.weight.data()},
      {"cls.predictions.transform.LayerNorm.bias", {"cls.predictions.transform.LayerNorm.beta"}, {H},
       transform_ln_.bias.data()},
      {"cls.predictions.bias", {"cls.predictions.decoder.bias"}, {V}, bias.data()},
  };
  bool all = true;
  for (const Item& it : items) {
    bool found = weights.has(it.name);
    for (const auto& a : it.aliases) found |= weights.has(a);
    all &= found;
  }
  if (all) {
    for (const Item& it : items) {
      Tensor t = weights.get(it.name, it.shape, it.aliases);
      std::memcpy(it.dst, t.f32(), sizeof(float) * t.numel());
    }
  } else {
    Rng init(hp.seed);
    for (int64_t i = 0; i < H * H; ++i) transform_.weight.data()[i] = (float)initializer_range * init.normal();
    std::fill(transform_.bias.data(), transform_.bias.data() + H, 0.0f);
    std::fill(transform_ln_.weight.data(), transform_ln_.weight.data() + H, 1.0f);
    std::fill(transform_ln_.bias.data(), transform_ln_.bias.data() + H, 0.0f);
    std::fill(bias.data(), bias.data() + V, 0.0f);
  }
  body_base_ = body_.get();
  head_linears_ = {&transform_, &decoder_};
  make_optimizer();
}

void MaskedLMTrainer::forward(const FinetuneBatch& batch, bool dropout) {
  const int64_t B = batch.B, L = batch.L, N = B * L, H = config_.hidden_size, V = config_.vocab_size;
  check_batch(batch);
  if ((int64_t)batch.labels.size() != N) throw std::invalid_argument("masked-LM batch: labels must be [B, L]");
  rows_.clear();
  targets_.clear();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t y = batch.labels[n];
    if (y == kIgnoreLabel) continue;
    if (y < 0 || y >= V)
      throw std::invalid_argument("label id " + std::to_string(y) + " is outside [0, " + std::to_string(V) + ")");
    rows_.push_back(n);
    targets_.push_back(y);
  }
  const nn::Context ctx = train_context(dropout);
  body_->forward(ctx, batch.input_ids.data(), batch.token_type_ids.empty() ? nullptr : batch.token_type_ids.data(),
                 batch.attention_mask.data(), B, L);
  const int64_t M = (int64_t)rows_.size();
  gathered_.resize(M * H);
  const float* h = body_->last_hidden_state();
  for (int64_t m = 0; m < M; ++m) std::memcpy(gathered_.data() + m * H, h + rows_[m] * H, sizeof(float) * H);
  pre_act_.resize(M * H);
  act_out_.resize(M * H);
  normed_.resize(M * H);
  logits_.resize(M * V);
  if (M == 0) return;
  nn::Context lin = ctx;
  lin.packed = false;
  transform_.forward(lin, pre_act_.data(), gathered_.data(), M);
  ops::activation_forward(act_out_.data(), pre_act_.data(), M * H, act_);
  transform_ln_.forward(normed_.data(), act_out_.data(), M);
  decoder_.forward(lin, logits_.data(), normed_.data(), M);
}

double MaskedLMTrainer::accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) {
  const int64_t N = batch.B * batch.L, H = config_.hidden_size, V = config_.vocab_size;
  forward(batch, dropout);
  const int64_t M = (int64_t)rows_.size();
  if (M == 0) return 0.0;  // nothing labelled: no loss and no gradient
  std::vector<float> dlast(N * H, 0.0f);
  double loss = 0;
  {
    std::vector<float> dlogits(M * V), dnormed(M * H), dact(M * H), dpre(M * H), dgathered(M * H);
    loss = token_cross_entropy(dlogits.data(), logits_.data(), targets_, V, scale);
    decoder_.backward(dnormed.data(), dlogits.data(), normed_.data(), M, /*accumulate=*/false);
    transform_ln_.backward(dact.data(), dnormed.data());
    ops::activation_backward(dpre.data(), dact.data(), pre_act_.data(), M * H, act_);
    transform_.backward(dgathered.data(), dpre.data(), gathered_.data(), M, /*accumulate=*/false);
    for (int64_t m = 0; m < M; ++m) std::memcpy(dlast.data() + rows_[m] * H, dgathered.data() + m * H, sizeof(float) * H);
  }
  body_->backward(dlast.data(), nullptr);
  return loss;
}

double MaskedLMTrainer::loss_sum(const FinetuneBatch& batch, int64_t* count) {
  forward(batch, /*dropout=*/false);
  const int64_t M = (int64_t)rows_.size(), V = config_.vocab_size;
  *count = M;
  double total = 0;
  for (int64_t m = 0; m < M; ++m) {
    const float* z = logits_.data() + m * V;
    const double mx = *std::max_element(z, z + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp((double)z[v] - mx);
    total += std::log(sum) + mx - z[targets_[m]];
  }
  return total;
}

void mask_tokens_for_mlm(FinetuneBatch& batch, const std::vector<bool>& special, int64_t mask_id, int64_t vocab_size,
                         double mlm_probability, Rng& rng) {
  const int64_t N = batch.B * batch.L;
  if ((int64_t)special.size() != N) throw std::invalid_argument("mask_tokens_for_mlm: special must be [B, L]");
  batch.labels.assign(N, kIgnoreLabel);
  for (int64_t n = 0; n < N; ++n) {
    if (special[n]) continue;
    if (!(rng.uniform() < mlm_probability)) continue;
    batch.labels[n] = batch.input_ids[n];
    if (rng.uniform() < 0.8f) {
      batch.input_ids[n] = mask_id;
    } else if (rng.uniform() < 0.5f) {
      batch.input_ids[n] = (int64_t)rng.below((uint64_t)vocab_size);
    }
  }
}

}  // namespace tfm
