#include "train/finetune.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstring>
#include <optional>
#include <string_view>
#include <stdexcept>

#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "io/json_util.h"
#include "models/registry.h"
#include "ops/activation.h"
#include "ops/softmax.h"
#include "ops/gemm_bf16.h"
#include "train/finetune_embed.h"

namespace tfm {

// ---------------------------------------------------------------- shared by every task

double linear_warmup_factor(int64_t step, int64_t warmup_steps, int64_t total_steps) {
  if (step < warmup_steps) return (double)step / (double)std::max<int64_t>(1, warmup_steps);
  return std::max(0.0, (double)(total_steps - step) / (double)std::max<int64_t>(1, total_steps - warmup_steps));
}

double mse_loss(float* dpred, const float* pred, const float* target, int64_t N, float scale) {
  if (N < 1) throw std::invalid_argument("MSELoss: an empty batch");
  double total = 0;
  for (int64_t i = 0; i < N; ++i) {
    const double diff = (double)pred[i] - (double)target[i];
    total += diff * diff;
    dpred[i] = (float)(2.0 * diff / (double)N) * scale;
  }
  return total / (double)N;
}

namespace {
// torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1 (a float32 factor); 1 without clipping.
float clip_coef_hf(double norm, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(norm)) return 1.0f;
  return (float)std::min(1.0, max_norm / (norm + 1e-6));
}
}  // namespace

double clip_grad_norm_hf(nn::ParamStore& params, double max_norm) {
  const double norm = grad_norm(params);
  const float coef = clip_coef_hf(norm, max_norm);
  if (coef < 1.0f)
    for (float& g : params.all_grad()) g *= coef;  // multiplied into every gradient
  return norm;
}

bool is_no_decay_parameter(const std::string& name) {
  std::string lower(name);
  for (char& ch : lower) ch = (char)std::tolower((unsigned char)ch);
  if (lower.find("bias") != std::string::npos || lower.find("layernorm") != std::string::npos ||
      lower.find("rmsnorm") != std::string::npos)
    return true;
  // (?:^|\.)norm(?:$|\.) and _norm(?:$|\.): a path segment "norm" or ending in "_norm".
  for (size_t start = 0; start <= lower.size();) {
    const size_t end = std::min(lower.find('.', start), lower.size());
    const std::string_view seg(lower.data() + start, end - start);
    if (seg == "norm" || (seg.size() >= 5 && seg.substr(seg.size() - 5) == "_norm")) return true;
    start = end + 1;
  }
  return false;
}

FinetuneOptimizer::FinetuneOptimizer(const nn::ParamStore& store, const FinetuneHyperparameters& hp,
                                     const std::vector<std::string>& frozen)
    : hp_(hp) {
  AdamOptions ao;
  ao.lr = (float)hp.learning_rate;
  ao.beta1 = (float)hp.adam_beta1;
  ao.beta2 = (float)hp.adam_beta2;
  ao.eps = (float)hp.adam_epsilon;
  ao.weight_decay = (float)hp.weight_decay;
  ao.decoupled_weight_decay = true;
  adam_ = std::make_unique<Adam>(store.total(), ao);
  std::vector<bool> decay;
  // A frozen parameter: no decay and a zero gradient, so AdamW's moments stay 0 and its update is exactly 0.
  for (const auto& e : store.entries())
    decay.push_back(!is_no_decay_parameter(e.name) &&
                    std::find(frozen.begin(), frozen.end(), e.name) == frozen.end());
  adam_->set_decay(std::move(decay));
}

double FinetuneOptimizer::step(nn::ParamStore& store) {
  const double norm = grad_norm(store);
  if (!std::isfinite(norm)) throw std::runtime_error("the gradient norm is not finite");
  last_lr_ = hp_.learning_rate * linear_warmup_factor(step_, hp_.warmup_steps, hp_.total_steps);
  // clip_grad_norm_hf's factor applied as AdamW reads each gradient (Adam::step's grad_scale: bit for bit the
  // clipped gradients' update, one pass over the gradients fewer); the store keeps the unclipped gradients.
  adam_->step(store, (float)last_lr_, clip_coef_hf(norm, hp_.max_grad_norm));
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
  if (dropout) {  // a body with its own p per site (ModernBERT) drops whenever rng is set
    ctx.rng = &rng;
    ctx.dropout = hp.dropout;
    ctx.attention_dropout = hp.attention_dropout;
  }
  return ctx;
}

double FinetuneModel::optimizer_step() { return opt_->step(store_); }

double FinetuneModel::train_step(const FinetuneBatch& batch) {
  const double loss = compute_gradients(batch, /*dropout=*/true);
  if (!std::isfinite(loss)) throw std::runtime_error("the training loss is not finite (" + std::to_string(loss) + ")");
  optimizer_step();
  return loss;
}

// ---------------------------------------------------------------- the task head

struct TrainingHead {
  HeadInput input = HeadInput::FirstToken;  // sequence classification: the pooler output or h[:, 0]
  std::vector<HeadStageSpec> spec;
  std::vector<nn::Linear> linears;
  std::vector<nn::LayerNorm> norms;  // one per stage (C 0: none)
  // Saved by forward, per stage: the input after dropout, its dropout mask, the linear's output, the activation's
  // output (the LayerNorm's input).
  struct Saved {
    std::vector<float> x, mask, pre, act, out;
  };
  std::vector<Saved> saved;
  int64_t M = 0;
  std::string tied_weight;  // the store name of a tied stage's weight (register_in)

  // Registers the tensors in `store` (before finalize); a tied stage's weight will be the store entry
  // `word_embeddings` (TrainableEncoder::word_embeddings_name).
  void register_in(nn::ParamStore& store, const EncoderConfig& c, const std::string& word_embeddings) {
    const nn::Vars vb(store);
    tied_weight = word_embeddings;
    int64_t in = c.hidden_size;
    for (const HeadStageSpec& s : spec) {
      nn::Linear lin;
      if (!s.tied) {
        lin = nn::Linear::load(vb.prefix(s.linear), in, s.out, s.linear_bias);
      } else {
        if (!s.bias.empty()) lin.bias = vb.get(s.bias, {s.out});
        lin.in_features = in;
        lin.out_features = s.out;
      }
      linears.push_back(lin);
      const float eps = s.norm_eps >= 0 ? s.norm_eps : (float)c.layer_norm_eps;
      norms.push_back(s.norm.empty() ? nn::LayerNorm{} : nn::LayerNorm::load(vb.prefix(s.norm), s.out, eps, s.norm_bias));
      in = s.out;
    }
    saved.resize(spec.size());
  }

  // After finalize: the tied weights bound, every tensor read from `weights` when stored with its shape, else
  // initialised (one generator from `seed`, the stages' weights in order).
  void load_or_init(nn::ParamStore& store, WeightSource& weights, double init_range, uint64_t seed) {
    Rng init(seed);
    auto read = [&](const std::string& name, const std::vector<std::string>& aliases, const Shape& shape, float* dst) {
      bool stored = weights.has(name);
      for (const auto& a : aliases) stored |= weights.has(a);
      if (!stored) return false;
      try {
        Tensor t = weights.get(name, shape, aliases);
        std::memcpy(dst, t.f32(), sizeof(float) * t.numel());
        weights.release(t);
        return true;
      } catch (const std::runtime_error&) {  // another shape (another number of labels): a fresh tensor, as
        return false;                        // from_pretrained(ignore_mismatched_sizes=True)
      }
    };
    for (size_t k = 0; k < spec.size(); ++k) {
      const HeadStageSpec& s = spec[k];
      nn::Linear& lin = linears[k];
      const int64_t in = lin.in_features, out = lin.out_features;
      const std::string bias_name = s.tied ? s.bias : s.linear + ".bias";
      if (s.tied) {
        lin.weight = nn::Param(&store, store.index_of(tied_weight));
      } else if (!read(s.linear + ".weight", {}, {out, in}, lin.weight.data())) {
        const float sd = (float)(s.init_std >= 0 ? s.init_std : init_range), bound = (float)s.init_cutoff * sd;
        for (int64_t i = 0; i < out * in; ++i) {
          float v = sd * init.normal();
          while (bound > 0 && std::fabs(v) > bound) v = sd * init.normal();  // resampled: the truncated normal
          lin.weight.data()[i] = v;
        }
      }
      if (lin.bias.defined() && !read(bias_name, s.tied ? s.bias_aliases : std::vector<std::string>{}, {out},
                                      lin.bias.data()))
        std::fill(lin.bias.data(), lin.bias.data() + out, 0.0f);
      if (!s.norm.empty()) {
        nn::LayerNorm& ln = norms[k];
        if (!read(s.norm + ".weight", {s.norm + ".gamma"}, {out}, ln.weight.data()))
          std::fill(ln.weight.data(), ln.weight.data() + out, 1.0f);
        if (s.norm_bias && !read(s.norm + ".bias", {s.norm + ".beta"}, {out}, ln.bias.data()))
          std::fill(ln.bias.data(), ln.bias.data() + out, 0.0f);
      }
    }
  }

  // x [M, H] -> the last stage's output [M, out] (saved for backward).
  const std::vector<float>& forward(const nn::Context& ctx, std::vector<float> x, int64_t rows, float p, Rng& rng) {
    M = rows;
    nn::Context lin_ctx = ctx;
    lin_ctx.packed = false;
    for (size_t k = 0; k < spec.size(); ++k) {
      const HeadStageSpec& s = spec[k];
      Saved& sv = saved[k];
      const int64_t in = linears[k].in_features, out = linears[k].out_features;
      sv.x = std::move(x);
      sv.mask.clear();
      if (s.dropout && ctx.rng && p > 0) {
        sv.mask.resize(M * in);
        ops::dropout_mask(sv.mask.data(), M * in, p, rng);
        ops::dropout_apply(sv.x.data(), sv.x.data(), sv.mask.data(), M * in);
      }
      sv.pre.resize(M * out);
      if (M > 0) linears[k].forward(lin_ctx, sv.pre.data(), sv.x.data(), M);
      const std::vector<float>* y = &sv.pre;
      if (s.tanh || s.act) {
        sv.act.resize(M * out);
        if (s.tanh)
          ops::tanh_forward(sv.act.data(), sv.pre.data(), M * out);
        else
          ops::activation_forward(sv.act.data(), sv.pre.data(), M * out, *s.act);
        y = &sv.act;
      }
      if (!s.norm.empty()) {
        sv.out.resize(M * out);
        if (M > 0) norms[k].forward(sv.out.data(), y->data(), M);
        y = &sv.out;
      }
      x = *y;
    }
    saved.back().out = std::move(x);
    return saved.back().out;
  }

  // dy [M, out] -> dx [M, H]; parameter gradients added.
  std::vector<float> backward(std::vector<float> dy) {
    for (size_t k = spec.size(); k-- > 0;) {
      const HeadStageSpec& s = spec[k];
      Saved& sv = saved[k];
      const int64_t in = linears[k].in_features, out = linears[k].out_features;
      std::vector<float> d(M * out);
      if (!s.norm.empty()) {
        norms[k].backward(d.data(), dy.data());
        dy.swap(d);
      }
      if (s.tanh) {
        for (int64_t i = 0; i < M * out; ++i) dy[i] *= 1.0f - sv.act[i] * sv.act[i];
      } else if (s.act) {
        ops::activation_backward(d.data(), dy.data(), sv.pre.data(), M * out, *s.act);
        dy.swap(d);
      }
      std::vector<float> dx(M * in);
      linears[k].backward(dx.data(), dy.data(), sv.x.data(), M, /*accumulate=*/false);
      if (!sv.mask.empty()) ops::dropout_apply(dx.data(), dx.data(), sv.mask.data(), M * in);
      dy = std::move(dx);
    }
    return dy;
  }

  void set_precision(ops::ComputeType precision) {
    for (nn::Linear& l : linears) l.precision = precision;
  }
};

// ---------------------------------------------------------------- the families (models/registry.h)

namespace {
// The trainable family of `model_type`: family_of's refusal when no family answers it, std::invalid_argument when
// its family has no trainer.
const ModelFamily& trainable_family(const std::string& model_type, const std::string& where) {
  const ModelFamily& f = family_of(model_type, where);
  if (!f.trainable())
    throw std::invalid_argument(where + ": model_type '" + model_type + "' cannot be fine-tuned yet (supported: " +
                                trainable_model_types() + ")");
  return f;
}

const std::string& source_of(const EncoderConfig& config) {
  static const std::string fallback = "config.json";
  return config.source.empty() ? fallback : config.source;
}
}  // namespace

const char* trainable_model_types() {
  static const std::string list = trainable_model_types_list();
  return list.c_str();
}

void check_finetune_family(const std::string& model_type, const std::string& where) {
  trainable_family(model_type, where);
}

std::unique_ptr<TrainableEncoder> make_trainable_encoder(nn::ParamStore& store, const EncoderConfig& config,
                                                         const TrainableEncoderOptions& options) {
  return trainable_family(config.model_type, source_of(config)).trainable_body(store, config, options);
}

std::string trained_architecture(const std::string& model_type, HeadKind kind) {
  const char* task = kind == HeadKind::SequenceClassification ? "ForSequenceClassification"
                     : kind == HeadKind::TokenClassification  ? "ForTokenClassification"
                                                              : "ForMaskedLM";
  return std::string(trainable_family(model_type, "config.json").class_stem(model_type)) + task;
}

TrainingDropouts training_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  const std::string model_type = read_model_type(config, file, "bert");
  return trainable_family(model_type, file).training_dropouts(config, kind, file);
}

namespace {

void check_batch(const FinetuneBatch& b) {
  const int64_t n = b.B * b.L;
  if ((int64_t)b.input_ids.size() != n || (int64_t)b.attention_mask.size() != n ||
      (!b.token_type_ids.empty() && (int64_t)b.token_type_ids.size() != n))
    throw std::invalid_argument("fine-tuning batch: arrays do not match [B, L]");
}

// sentence-transformers' mean pooling: ModernBERT's classifier_pooling "mean".
const PoolingConfig& mean_pooling() {
  static const PoolingConfig p = [] {
    PoolingConfig c;
    c.mean = true;
    return c;
  }();
  return p;
}

}  // namespace

// ---------------------------------------------------------------- FinetuneModel

FinetuneModel::FinetuneModel(const EncoderConfig& config, WeightSource& weights, HeadKind kind, int64_t num_labels,
                             const FinetuneHyperparameters& hp, double initializer_range)
    : config_(config), hp_(hp), rng_(hp.seed) {
  const ModelFamily& family = trainable_family(config.model_type, source_of(config));
  if (kind != HeadKind::MaskedLM && num_labels < 1) throw std::invalid_argument("num_labels must be at least 1");
  out_features_ = kind == HeadKind::MaskedLM ? config.vocab_size : num_labels;
  architecture_ = trained_architecture(config.model_type, kind);
  auto head = std::make_unique<TrainingHead>();
  {
    TrainingHeadSpec spec = family.training_head(config, kind, out_features_);
    head->input = spec.input;
    head->spec = std::move(spec.stages);
  }
  const bool pooler = head->input == HeadInput::PoolerOutput;
  if (pooler && !weights.has("pooler.dense.weight") && !weights.has("bert.pooler.dense.weight"))
    throw std::runtime_error("the checkpoint has no pooler (pooler.dense.weight): sequence classification needs it");
  TrainableEncoderOptions body_options;
  body_options.pooler = pooler;
  // Sequence classification reads the first token only (pooler_output or h[:, 0]), so the last layer need not
  // compute the others (the family's body decides whether it can).
  body_options.first_token_only = kind == HeadKind::SequenceClassification && head->input != HeadInput::MeanTokens;
  body_ = family.trainable_body(store_, config, body_options);
  head->register_in(store_, config, body_->word_embeddings_name());
  store_.finalize();
  body_->load(store_, weights);
  head->load_or_init(store_, weights, initializer_range, hp.seed);
  head_ = std::move(head);
  opt_ = std::make_unique<FinetuneOptimizer>(store_, hp_, body_->frozen_names());
}

FinetuneModel::~FinetuneModel() = default;

nn::Context FinetuneModel::train_context(bool dropout) { return training_context(hp_, rng_, dropout); }

void FinetuneModel::set_precision(ops::ComputeType precision) {
  if (precision == ops::ComputeType::I8) throw std::invalid_argument("training precision must be fp32 or bf16, not int8");
  if (precision == ops::ComputeType::BF16) ops::require_bf16_gemm();
  body_->set_precision(precision);
  head_->set_precision(precision);
}

void FinetuneModel::forward_rows(const FinetuneBatch& batch, const std::vector<int64_t>& rows, bool dropout) {
  const int64_t B = batch.B, L = batch.L, H = config_.hidden_size;
  check_batch(batch);
  const nn::Context ctx = train_context(dropout);
  body_->forward(ctx, batch.input_ids.data(), batch.token_type_ids.empty() ? nullptr : batch.token_type_ids.data(),
                 batch.attention_mask.data(), B, L);
  // The body's last rows per sequence: L, or 1 (first_token_only: position 0 alone, row b of last_hidden_state).
  const int64_t last_L = body_->first_token_only() ? 1 : L;
  tokens_ = B * last_L;
  std::vector<float> x;
  pool_mask_.clear();
  if (head_->input == HeadInput::PoolerOutput) {
    rows_.clear();
    x.assign(body_->pooler_output(), body_->pooler_output() + B * H);
  } else if (head_->input == HeadInput::MeanTokens) {  // (h * mask).sum(1) / mask.sum(1)
    rows_.clear();
    pool_mask_ = batch.attention_mask;
    batch_ = B;
    seq_len_ = L;
    x.resize(B * H);
    pooling_forward(mean_pooling(), body_->last_hidden_state(), pool_mask_.data(), B, L, H, x.data());
  } else {
    rows_ = rows;
    if (last_L != L)
      for (int64_t& r : rows_) {
        if (r % L) throw std::logic_error("FinetuneModel: a first-token-only body has no row at position " +
                                          std::to_string(r % L));
        r /= L;
      }
    x.resize(rows_.size() * H);
    const float* h = body_->last_hidden_state();
    for (size_t m = 0; m < rows_.size(); ++m) std::memcpy(x.data() + m * H, h + rows_[m] * H, sizeof(float) * H);
  }
  const int64_t M = (int64_t)x.size() / H;
  const float p = hp_.head_dropout >= 0 ? hp_.head_dropout : hp_.dropout;
  logits_ = head_->forward(ctx, std::move(x), M, p, rng_);
}

namespace {
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

double FinetuneModel::backward_rows(const std::vector<int64_t>& targets, float scale) {
  const int64_t M = (int64_t)targets.size(), C = out_features_;
  std::vector<float> dlogits(M * C);
  const double loss = token_cross_entropy(dlogits.data(), logits_.data(), targets, C, scale);
  if (std::all_of(targets.begin(), targets.end(), [](int64_t y) { return y == kIgnoreLabel; })) return loss;
  backward_logits(std::move(dlogits));
  return loss;
}

void FinetuneModel::backward_logits(std::vector<float> dlogits) {
  const int64_t H = config_.hidden_size;
  const std::vector<float> dx = head_->backward(std::move(dlogits));
  if (head_->input == HeadInput::PoolerOutput) {
    body_->backward(nullptr, dx.data());
    return;
  }
  std::vector<float> dlast(tokens_ * H, 0.0f);
  if (head_->input == HeadInput::MeanTokens) {
    pooling_backward(mean_pooling(), dx.data(), body_->last_hidden_state(), pool_mask_.data(), batch_, seq_len_, H,
                     dlast.data());
    body_->backward(dlast.data(), nullptr);
    return;
  }
  for (size_t m = 0; m < rows_.size(); ++m) {
    float* d = dlast.data() + rows_[m] * H;
    for (int64_t h = 0; h < H; ++h) d[h] += dx[m * H + h];
  }
  body_->backward(dlast.data(), nullptr);
}

double FinetuneModel::compute_gradients(const FinetuneBatch& batch, bool dropout) {
  store_.zero_grad();
  return accumulate_gradients(batch, 1.0f, dropout);
}

// ---------------------------------------------------------------- sequence classification

SequenceClassificationTrainer::SequenceClassificationTrainer(const EncoderConfig& config, WeightSource& weights,
                                                             int64_t num_labels, const FinetuneHyperparameters& hp,
                                                             double initializer_range)
    : FinetuneModel(config, weights, HeadKind::SequenceClassification, num_labels, hp, initializer_range) {}

void SequenceClassificationTrainer::forward(const FinetuneBatch& batch, bool dropout) {
  std::vector<int64_t> first(batch.B);  // h[:, 0]: <s> / [CLS]
  for (int64_t b = 0; b < batch.B; ++b) first[b] = b * batch.L;
  forward_rows(batch, first, dropout);
}

std::vector<float> SequenceClassificationTrainer::logits(const ClassificationBatch& batch) {
  forward(batch, /*dropout=*/false);
  return logits_;
}

double SequenceClassificationTrainer::accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) {
  const int64_t B = batch.B, C = out_features_;
  if (regression()) {  // MSELoss()(logits.squeeze(), labels)
    if ((int64_t)batch.targets.size() != B) throw std::invalid_argument("regression batch: targets must be [B]");
    for (float y : batch.targets)
      if (!std::isfinite(y)) throw std::invalid_argument("regression target " + std::to_string(y) + " is not finite");
    forward(batch, dropout);
    std::vector<float> dlogits(B);
    const double loss = mse_loss(dlogits.data(), logits_.data(), batch.targets.data(), B, scale);
    backward_logits(std::move(dlogits));
    return loss;
  }
  if ((int64_t)batch.labels.size() != B) throw std::invalid_argument("classification batch: labels must be [B]");
  for (int64_t y : batch.labels)
    if (y < 0 || y >= C)
      throw std::invalid_argument("label id " + std::to_string(y) + " is outside [0, " + std::to_string(C) + ")");
  forward(batch, dropout);
  return backward_rows(batch.labels, scale);
}

// ---------------------------------------------------------------- token classification

TokenClassificationTrainer::TokenClassificationTrainer(const EncoderConfig& config, WeightSource& weights,
                                                       int64_t num_labels, const FinetuneHyperparameters& hp,
                                                       double initializer_range)
    : FinetuneModel(config, weights, HeadKind::TokenClassification, num_labels, hp, initializer_range) {}

void TokenClassificationTrainer::forward(const FinetuneBatch& batch, bool dropout) {
  std::vector<int64_t> all(batch.B * batch.L);
  for (size_t n = 0; n < all.size(); ++n) all[n] = (int64_t)n;
  forward_rows(batch, all, dropout);
}

std::vector<float> TokenClassificationTrainer::logits(const FinetuneBatch& batch) {
  forward(batch, /*dropout=*/false);
  return logits_;
}

double TokenClassificationTrainer::accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) {
  if ((int64_t)batch.labels.size() != batch.B * batch.L)
    throw std::invalid_argument("token classification batch: labels must be [B, L]");
  forward(batch, dropout);
  return backward_rows(batch.labels, scale);
}

// ---------------------------------------------------------------- masked LM

MaskedLMTrainer::MaskedLMTrainer(const EncoderConfig& config, WeightSource& weights, const FinetuneHyperparameters& hp,
                                 double initializer_range)
    : FinetuneModel(config, weights, HeadKind::MaskedLM, 0, hp, initializer_range) {}

void MaskedLMTrainer::forward(const FinetuneBatch& batch, bool dropout) {
  const int64_t N = batch.B * batch.L, V = config_.vocab_size;
  if ((int64_t)batch.labels.size() != N) throw std::invalid_argument("masked-LM batch: labels must be [B, L]");
  std::vector<int64_t> rows;
  targets_.clear();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t y = batch.labels[n];
    if (y == kIgnoreLabel) continue;
    if (y < 0 || y >= V)
      throw std::invalid_argument("label id " + std::to_string(y) + " is outside [0, " + std::to_string(V) + ")");
    rows.push_back(n);
    targets_.push_back(y);
  }
  forward_rows(batch, rows, dropout);
}

double MaskedLMTrainer::accumulate_gradients(const FinetuneBatch& batch, float scale, bool dropout) {
  forward(batch, dropout);
  return backward_rows(targets_, scale);  // nothing labelled: no loss and no gradient
}

double MaskedLMTrainer::loss_sum(const FinetuneBatch& batch, int64_t* count) {
  forward(batch, /*dropout=*/false);
  const int64_t M = (int64_t)rows_.size(), V = config_.vocab_size;
  *count = M;
  double total = 0;
  for (int64_t m = 0; m < M; ++m) {
    const float* z = logits_.data() + m * V;
    total += ops::logsumexp(z, V) - z[targets_[m]];
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
