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
#include "models/bert.h"
#include "models/distilbert.h"
#include "models/modernbert.h"
#include "models/mpnet.h"
#include "models/roberta.h"
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

// One stage of a head in training: y [M, out] = norm(act(linear(dropout(x [M, in])))); its tensors are store
// entries under Hugging Face names.
struct HeadStageSpec {
  std::string linear;             // the Linear's prefix ("classifier.out_proj"); weight [out, in], bias [out]
  int64_t out = 0;
  bool linear_bias = true;        // false: the Linear has no bias (ModernBERT head.dense without classifier_bias)
  bool dropout = false;           // dropout (the head's p) on the stage's input
  bool tanh = false;              // tanh after the linear (RobertaClassificationHead.dense)
  std::optional<ops::Activation> act;
  std::string norm;               // the LayerNorm's prefix after the activation; empty: none
  bool norm_bias = true;          // false: the LayerNorm has no bias (ModernBERT norm_bias false)
  float norm_eps = -1;            // the LayerNorm's eps; < 0: config layer_norm_eps
  // A weight not in the checkpoint: N(0, init_std) (< 0: the model's initializer_range), truncated to
  // +-init_cutoff * init_std when init_cutoff > 0 (init.trunc_normal_, ModernBERT's _init_weights).
  double init_std = -1, init_cutoff = 0;
  bool tied = false;              // the weight is the body's word embeddings (tie_word_embeddings); bias `bias`
  std::string bias;               // (tied) the bias's name; empty: no bias (ModernBERT without decoder_bias)
  std::vector<std::string> bias_aliases;
};

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

// ---------------------------------------------------------------- the families

namespace {

HeadStageSpec head_stage(std::string linear, int64_t out, bool dropout) {
  HeadStageSpec s;
  s.linear = std::move(linear);
  s.out = out;
  s.dropout = dropout;
  return s;
}

// *ForTokenClassification of the BERT-style families: classifier(dropout(h)) per token.
TrainingHead token_classifier_head(int64_t C) {
  TrainingHead h;
  h.spec = {head_stage("classifier", C, true)};
  return h;
}

// An LM head: transform = norm(act(linear(h))), then the decoder tied to the word embeddings plus `bias`.
TrainingHead lm_head(const std::string& transform, ops::Activation act, const std::string& norm,
                     const std::string& decoder, const std::string& bias, std::vector<std::string> bias_aliases,
                     const EncoderConfig& c) {
  HeadStageSpec t = head_stage(transform, c.hidden_size, false), d = head_stage(decoder, c.vocab_size, false);
  t.act = act;
  t.norm = norm;
  d.tied = true;
  d.bias = bias;
  d.bias_aliases = std::move(bias_aliases);
  TrainingHead h;
  h.spec = {t, d};
  return h;
}

// modeling_bert.py: BertForSequenceClassification classifier(dropout(pooler_output)); BertOnlyMLMHead.
TrainingHead bert_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  if (kind == HeadKind::TokenClassification) return token_classifier_head(C);
  if (kind == HeadKind::SequenceClassification) {
    TrainingHead h;
    h.input = HeadInput::PoolerOutput;
    h.spec = {head_stage("classifier", C, true)};
    return h;
  }
  return lm_head("cls.predictions.transform.dense", ops::parse_activation(c.hidden_act),
                 "cls.predictions.transform.LayerNorm", "cls.predictions.decoder", "cls.predictions.bias",
                 {"cls.predictions.decoder.bias"}, c);
}

// modeling_roberta.py (XLM-R and CamemBERT alike): RobertaClassificationHead on <s>, RobertaLMHead.
TrainingHead roberta_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  if (kind == HeadKind::TokenClassification) return token_classifier_head(C);
  if (kind == HeadKind::SequenceClassification) {
    TrainingHead h;
    h.spec = {head_stage("classifier.dense", c.hidden_size, true), head_stage("classifier.out_proj", C, true)};
    h.spec[0].tanh = true;
    return h;
  }
  // RobertaLMHead calls gelu whatever hidden_act says.
  return lm_head("lm_head.dense", ops::Activation::Gelu, "lm_head.layer_norm", "lm_head.decoder", "lm_head.bias",
                 {"lm_head.decoder.bias"}, c);
}

// modeling_distilbert.py: pre_classifier, ReLU, dropout, classifier; vocab_transform, activation, vocab_layer_norm,
// vocab_projector.
TrainingHead distilbert_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  if (kind == HeadKind::TokenClassification) return token_classifier_head(C);
  if (kind == HeadKind::SequenceClassification) {
    TrainingHead h;
    h.spec = {head_stage("pre_classifier", c.hidden_size, false), head_stage("classifier", C, true)};
    h.spec[0].act = ops::Activation::Relu;
    return h;
  }
  return lm_head("vocab_transform", ops::parse_activation(c.hidden_act), "vocab_layer_norm", "vocab_projector",
                 "vocab_projector.bias", {}, c);  // get_activation(config.activation)
}

// modeling_modernbert.py: ModernBertPredictionHead head(x) = norm(act(dense(x))) (dense bias classifier_bias, norm
// bias norm_bias, eps norm_eps, act classifier_activation), then ForSequenceClassification: pool (classifier_pooling
// "cls" h[:, 0], "mean" the mean over attention_mask), head, drop (classifier_dropout), classifier;
// ForTokenClassification: head, drop, classifier per token; ForMaskedLM: decoder(head(h)), the decoder tied to
// tok_embeddings, bias decoder.bias when decoder_bias. A head tensor not in the checkpoint as _init_weights draws
// it: trunc_normal_ (cutoff initializer_cutoff_factor, default 3) with std initializer_range /
// sqrt(2 num_hidden_layers) for head.dense ("out"), hidden_size^-0.5 for the classifier ("final_out").
TrainingHead modernbert_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  const ModernBertConfig m = ModernBertConfig::from(c);
  const nlohmann::json& j = c.json;
  const double range = json_number_or(j, "initializer_range", 0.02, c.source);
  const double cutoff = j.contains("initializer_cutoff_factor") && !j["initializer_cutoff_factor"].is_null()
                            ? json_number_or(j, "initializer_cutoff_factor", 3.0, c.source)
                            : 3.0;
  HeadStageSpec head = head_stage("head.dense", c.hidden_size, false);
  head.linear_bias = m.classifier_bias;
  head.act = m.classifier_activation;
  head.norm = "head.norm";
  head.norm_bias = m.norm_bias;
  head.norm_eps = (float)m.norm_eps;
  head.init_std = range / std::sqrt(2.0 * (double)c.num_hidden_layers);
  head.init_cutoff = cutoff;
  TrainingHead h;
  if (kind == HeadKind::MaskedLM) {
    HeadStageSpec decoder = head_stage("decoder", c.vocab_size, false);
    decoder.tied = true;
    if (m.decoder_bias) decoder.bias = "decoder.bias";
    h.spec = {head, decoder};
    return h;
  }
  HeadStageSpec classifier = head_stage("classifier", C, true);
  classifier.init_std = 1.0 / std::sqrt((double)c.hidden_size);
  classifier.init_cutoff = cutoff;
  if (kind == HeadKind::SequenceClassification)
    h.input = m.classifier_pooling == "mean" ? HeadInput::MeanTokens : HeadInput::FirstToken;
  h.spec = {head, classifier};
  return h;
}

// A body of detail::BertVariant: its parameters under variant.prefix, or under none when bare.
std::unique_ptr<TrainableEncoder> bert_variant_body(nn::ParamStore& store, const EncoderConfig& c,
                                                    const TrainableEncoderOptions& o, detail::BertVariant v) {
  if (o.bare) v.prefix = "";
  return std::make_unique<BertTrainable>(store, c, v, o.pooler, o.first_token_only);
}

// The dropout p of a config key, checked to be in [0, 1).
float dropout_of(const nlohmann::json& config, const char* key, double fallback, const std::string& file) {
  const double v = json_number_or(config, key, fallback, file);
  if (!(v >= 0 && v < 1)) throw std::runtime_error(file + ": key '" + std::string(key) + "' must be in [0, 1)");
  return (float)v;
}

// BERT and RoBERTa: hidden_dropout_prob, attention_probs_dropout_prob; the classifiers' classifier_dropout when set.
TrainingDropouts bert_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  TrainingDropouts d;
  d.body = d.head = dropout_of(config, "hidden_dropout_prob", 0.1, file);
  d.attention = dropout_of(config, "attention_probs_dropout_prob", 0.1, file);
  if (kind != HeadKind::MaskedLM && config.contains("classifier_dropout") && !config["classifier_dropout"].is_null())
    d.head = dropout_of(config, "classifier_dropout", d.body, file);
  return d;
}

// MPNet: hidden_dropout_prob for the body and the heads (MPNetConfig has no classifier_dropout),
// attention_probs_dropout_prob.
TrainingDropouts mpnet_dropouts(const nlohmann::json& config, HeadKind, const std::string& file) {
  TrainingDropouts d;
  d.body = d.head = dropout_of(config, "hidden_dropout_prob", 0.1, file);
  d.attention = dropout_of(config, "attention_probs_dropout_prob", 0.1, file);
  return d;
}

// DistilBERT: dropout, attention_dropout; sequence classification seq_classif_dropout.
TrainingDropouts distilbert_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  TrainingDropouts d;
  d.body = dropout_of(config, "dropout", 0.1, file);
  d.attention = dropout_of(config, "attention_dropout", 0.1, file);
  d.head = kind == HeadKind::SequenceClassification ? dropout_of(config, "seq_classif_dropout", 0.2, file) : d.body;
  return d;
}

// ModernBERT: the body reads embedding_dropout, attention_dropout and mlp_dropout itself (ModernBertTrainable;
// checked here), so its p is 0; the classifiers' classifier_dropout (default 0).
TrainingDropouts modernbert_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  for (const char* key : {"embedding_dropout", "attention_dropout", "mlp_dropout"}) dropout_of(config, key, 0.0, file);
  const bool set = config.contains("classifier_dropout") && !config["classifier_dropout"].is_null();
  TrainingDropouts d;
  d.head = kind != HeadKind::MaskedLM && set ? dropout_of(config, "classifier_dropout", 0.0, file) : 0.0f;
  return d;
}

// One family: config.json model_type, the Hugging Face class-name stem, its body, its heads, its dropouts.
struct Family {
  const char* model_type;
  const char* class_stem;  // "Roberta" -> "RobertaForMaskedLM"
  std::unique_ptr<TrainableEncoder> (*body)(nn::ParamStore& store, const EncoderConfig& config,
                                            const TrainableEncoderOptions& options);
  // The head of `kind` (out: num_labels; masked LM: vocab_size).
  TrainingHead (*head)(const EncoderConfig& config, HeadKind kind, int64_t out);
  // training_dropouts.
  TrainingDropouts (*dropouts)(const nlohmann::json& config, HeadKind kind, const std::string& file);
};

using BodyOptions = TrainableEncoderOptions;

// RoBERTa's body (XLM-R and CamemBERT alike).
std::unique_ptr<TrainableEncoder> roberta_body(nn::ParamStore& s, const EncoderConfig& c, const BodyOptions& o) {
  return bert_variant_body(s, c, o, detail::roberta_variant());
}

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"bert", "Bert",
       [](nn::ParamStore& s, const EncoderConfig& c, const BodyOptions& o) {
         return bert_variant_body(s, c, o, detail::BertVariant{});
       },
       bert_head, bert_dropouts},
      {"roberta", "Roberta",
       roberta_body,
       roberta_head, bert_dropouts},
      {"xlm-roberta", "XLMRoberta",
       roberta_body,
       roberta_head, bert_dropouts},
      {"camembert", "Camembert",
       roberta_body,
       roberta_head, bert_dropouts},
      {"distilbert", "DistilBert",
       [](nn::ParamStore& s, const EncoderConfig& c, const BodyOptions& o) {
         return bert_variant_body(s, c, o, detail::distilbert_variant(c));
       },
       distilbert_head, distilbert_dropouts},
      // MPNetForSequenceClassification's MPNetClassificationHead and MPNetLMHead are RoBERTa's, names included.
      {"mpnet", "MPNet",
       [](nn::ParamStore& s, const EncoderConfig& c, const BodyOptions& o) {
         return bert_variant_body(s, c, o, detail::mpnet_variant());
       },
       roberta_head, mpnet_dropouts},
      {"modernbert", "ModernBert",
       [](nn::ParamStore& s, const EncoderConfig& c, const BodyOptions& o) -> std::unique_ptr<TrainableEncoder> {
         return std::make_unique<ModernBertTrainable>(s, c, o.bare ? "" : "model.");
       },
       modernbert_head, modernbert_dropouts},
  };
  return table;
}

const Family& family_of(const std::string& model_type, const std::string& where) {
  for (const Family& f : families())
    if (model_type == f.model_type) return f;
  throw std::invalid_argument(where + ": model_type '" + model_type + "' cannot be fine-tuned yet (supported: " +
                              trainable_model_types() + ")");
}

}  // namespace

const char* trainable_model_types() {
  static const std::string list = [] {
    std::string s;
    for (const Family& f : families()) s += (s.empty() ? "" : ", ") + std::string(f.model_type);
    return s;
  }();
  return list.c_str();
}

void check_finetune_family(const std::string& model_type, const std::string& where) { family_of(model_type, where); }

std::unique_ptr<TrainableEncoder> make_trainable_encoder(nn::ParamStore& store, const EncoderConfig& config,
                                                         const TrainableEncoderOptions& options) {
  return family_of(config.model_type, config.source.empty() ? "config.json" : config.source)
      .body(store, config, options);
}

std::string trained_architecture(const std::string& model_type, HeadKind kind) {
  const char* task = kind == HeadKind::SequenceClassification ? "ForSequenceClassification"
                     : kind == HeadKind::TokenClassification  ? "ForTokenClassification"
                                                              : "ForMaskedLM";
  return std::string(family_of(model_type, "config.json").class_stem) + task;
}

TrainingDropouts training_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  const std::string model_type = json_string_or(config, "model_type", "bert", file);
  return family_of(model_type, file).dropouts(config, kind, file);
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
  const Family& family = family_of(config.model_type, config.source.empty() ? "config.json" : config.source);
  if (kind != HeadKind::MaskedLM && num_labels < 1) throw std::invalid_argument("num_labels must be at least 1");
  out_features_ = kind == HeadKind::MaskedLM ? config.vocab_size : num_labels;
  architecture_ = trained_architecture(config.model_type, kind);
  auto head = std::make_unique<TrainingHead>(family.head(config, kind, out_features_));
  const bool pooler = head->input == HeadInput::PoolerOutput;
  if (pooler && !weights.has("pooler.dense.weight") && !weights.has("bert.pooler.dense.weight"))
    throw std::runtime_error("the checkpoint has no pooler (pooler.dense.weight): sequence classification needs it");
  TrainableEncoderOptions body_options;
  body_options.pooler = pooler;
  // Sequence classification reads the first token only (pooler_output or h[:, 0]), so the last layer need not
  // compute the others (the family's body decides whether it can).
  body_options.first_token_only = kind == HeadKind::SequenceClassification && head->input != HeadInput::MeanTokens;
  body_ = family.body(store_, config, body_options);
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
