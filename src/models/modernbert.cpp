#include "models/modernbert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/profile.h"
#include "io/json_keys.h"
#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "nn/layers.h"
#include "nn/params.h"
#include "nn/transformer_block.h"
#include "ops/embedding.h"
#include "models/registry.h"

namespace tfm {

namespace {

std::vector<std::string> modernbert_aliases(const std::string& name) { return {"model." + name}; }

// ModernBertEncoderLayer i under lv ("layers.i") as an nn::EncoderBlock: pre-LN (layer 0's attn_norm the
// identity), fused Wqkv, rotary positions of the layer's theta, the window on sliding layers, GeGLU MLP with
// mlp_dropout inside and none after, biases where the config has them. Trainable: parameters of lv's store;
// else packed for ct.
nn::EncoderBlock modernbert_layer(const nn::Vars& lv, const EncoderConfig& c, const ModernBertConfig& m, int64_t i,
                                  const nn::Rotary& rope, bool trainable, ops::ComputeType ct) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const float eps = (float)m.norm_eps;
  auto linear = [&](const char* name, int64_t in, int64_t out, bool bias) {
    return trainable ? nn::Linear::load(lv.prefix(name), in, out, bias)
                     : nn::Linear::load_packed({lv.prefix(name)}, in, out, ct, bias);
  };
  nn::EncoderBlock b;
  b.norm_first = true;
  b.ffn_output_dropout = false;
  b.norm1 = i == 0 ? nn::LayerNorm::identity(H) : nn::LayerNorm::load(lv.prefix("attn_norm"), H, eps, m.norm_bias);
  b.attention.num_heads = c.num_attention_heads;
  b.attention.hidden_size = H;
  b.attention.qkv = linear("attn.Wqkv", H, 3 * H, m.attention_bias);
  b.attention.output = linear("attn.Wo", H, H, m.attention_bias);
  b.attention.rotary = rope;
  b.attention.window = m.global_layer[i] ? -1 : m.local_attention / 2;
  b.norm2 = nn::LayerNorm::load(lv.prefix("mlp_norm"), H, eps, m.norm_bias);
  b.ffn.gated = true;
  b.ffn.act = m.hidden_activation;
  b.ffn.linear1 = linear("mlp.Wi", H, 2 * I, m.mlp_bias);
  b.ffn.linear2 = linear("mlp.Wo", I, H, m.mlp_bias);
  return b;
}

// ModernBertModel under vb: the token table, the embeddings' norm, the layers (the two thetas' tables shared by
// the layers of each), the final norm.
void read_modernbert(const nn::Vars& vb, const EncoderConfig& c, const ModernBertConfig& m, bool trainable,
                     ops::ComputeType ct, nn::Param& tok, nn::LayerNorm& emb_norm,
                     std::vector<nn::EncoderBlock>& layers, nn::LayerNorm& final_norm) {
  const int64_t H = c.hidden_size;
  // Unchecked from a file: inference reads only the rows of its ids and checks those (nn::Embeddings::forward_inference);
  // a ParamStore registers it as get() would.
  tok = vb.prefix("embeddings.tok_embeddings").get_unchecked("weight", {c.vocab_size, H});
  emb_norm = nn::LayerNorm::load(vb.prefix("embeddings.norm"), H, (float)m.norm_eps, m.norm_bias);
  const nn::Rotary global = nn::Rotary::make(m.global_rope_theta, c.head_dim());
  const nn::Rotary local = nn::Rotary::make(m.local_rope_theta, c.head_dim());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(modernbert_layer(vb.prefix("layers").prefix(i), c, m, i, m.global_layer[i] ? global : local,
                                      trainable, ct));
  final_norm = nn::LayerNorm::load(vb.prefix("final_norm"), H, (float)m.norm_eps, m.norm_bias);
}

class ModernBert : public EncoderModel {
 public:
  ModernBert(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct) : m_(ModernBertConfig::from(c)) {
    config_ = c;
    read_modernbert(nn::Vars(w, modernbert_aliases), c, m_, false, ct, emb_.word, emb_.norm, layers_, final_norm_);
    emb_.dim = c.hidden_size;
    emb_.word_name = "embeddings.tok_embeddings.weight";
  }
  EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                        bool all_layers) const override {
    return run(input_ids, token_type_ids, attention_mask, all_layers, /*unpadded=*/false);
  }
  // The real tokens only, as modeling_modernbert.py's unpadded (flash-attention) path (nn::encoder_stack_inference:
  // rotary positions from each sentence's padded column, the window inside each sentence). A row with a hole in
  // its mask runs padded; padded rows are 0 either way.
  EncoderOutput forward_unpadded(const Tensor& input_ids, const Tensor& token_type_ids,
                                 const Tensor& attention_mask) const override {
    return run(input_ids, token_type_ids, attention_mask, false, /*unpadded=*/true);
  }

 private:
  EncoderOutput run(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                    bool all_layers, bool unpadded) const {
    const EncoderConfig& c = config_;
    // token_type_ids are checked for shape and range as for every encoder, then ignored.
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, token_type_ids, attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size, N = B * L;
    const int64_t* ids = input_ids.i64();
    EncoderOutput out;
    Tensor x = Tensor::empty({B, L, H}), hs;
    if (all_layers) hs = Tensor::empty({c.num_hidden_layers + 1, B, L, H});
    float* X = x.f32();
    {
      OpTimer t("embeddings");
      emb_.forward_inference(X, ids, nullptr, nullptr, N, L);
    }
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);
    const bool gather = unpadded && nn::real_tokens_contiguous(key_mask.data(), B, L);
    nn::encoder_stack_inference(layers_, X, B, L, key_mask.data(), gather, all_layers ? hs.f32() : nullptr);
    final_norm_.forward_inference(X, X, N);
    for (int64_t n = 0; n < N && unpadded; ++n)  // padded rows 0
      if (key_mask[n] == 0.0f) std::memset(X + n * H, 0, sizeof(float) * H);
    out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

  ModernBertConfig m_;
  nn::Embeddings emb_;  // tok_embeddings, norm
  nn::LayerNorm final_norm_;
  std::vector<nn::EncoderBlock> layers_;
};

}  // namespace

namespace {

std::optional<HeadKind> detect_modernbert_head(const CheckpointWeights& w) {
  if (w.has("classifier.weight")) return HeadKind::SequenceClassification;
  if (w.has("decoder.bias") || w.has("decoder.weight") || w.has("head.dense.weight")) return HeadKind::MaskedLM;
  return std::nullopt;
}

HeadLayout load_modernbert_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w) {
  const ModernBertConfig m = ModernBertConfig::from(c);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const nn::Vars vb(w);
  if (kind == HeadKind::QuestionAnswering)
    throw std::runtime_error(w.path() + ": ModernBERT has sequence classification and masked-LM heads here; "
                             "ModernBertForQuestionAnswering is not supported");
  HeadLayout head;
  head.input = m.classifier_pooling == "mean" ? HeadInput::MeanTokens : HeadInput::FirstToken;
  HeadStage prediction, out;
  prediction.linear = nn::Linear::load(vb.prefix("head.dense"), H, H, m.classifier_bias);
  prediction.act = m.classifier_activation;
  prediction.norm = nn::LayerNorm::load(vb.prefix("head.norm"), H, (float)m.norm_eps, m.norm_bias);
  if (kind == HeadKind::MaskedLM) {
    const std::vector<std::string> tied = {"model.embeddings.tok_embeddings.weight", "embeddings.tok_embeddings.weight"};
    if (m.decoder_bias) {
      out.linear = detail::load_vocab_decoder(w, {"decoder.weight"}, tied, {"decoder.bias"}, V, H, &head.tied_decoder);
    } else {
      head.tied_decoder = !w.has("decoder.weight");
      const std::vector<std::string> names = head.tied_decoder ? tied : std::vector<std::string>{"decoder.weight"};
      out.linear.weight = nn::Param(w.get(names[0], {V, H}, std::vector<std::string>(names.begin() + 1, names.end())));
      out.linear.in_features = H;
      out.linear.out_features = V;
    }
  } else {
    out.linear = detail::load_head_linear(w, {"classifier"}, H);
  }
  head.stages = {std::move(prediction), std::move(out)};
  return head;
}

}  // namespace

FamilyHeads modernbert_heads() { return {detect_modernbert_head, load_modernbert_head}; }

std::unique_ptr<EncoderModel> make_modernbert(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype) {
  return std::make_unique<ModernBert>(config, weights, dtype);
}

// ---------------------------------------------------------------- training

namespace {
float dropout_p(const EncoderConfig& c, const char* key) {
  const double p = json_number_or(c.json, key, 0.0, c.source);
  if (!(p >= 0.0 && p < 1.0)) throw std::runtime_error(c.source + ": key '" + std::string(key) + "' must be in [0, 1)");
  return (float)p;
}
}  // namespace

ModernBertTrainable::ModernBertTrainable(nn::ParamStore& store, const EncoderConfig& c, const std::string& prefix)
    : config_(c), m_(ModernBertConfig::from(c)), prefix_(prefix) {
  if (!prefix_.empty() && prefix_.back() != '.') prefix_ += '.';
  emb_.dropout = dropout_p(c, "embedding_dropout");
  attention_dropout_ = dropout_p(c, "attention_dropout");
  const float mlp_dropout = dropout_p(c, "mlp_dropout");
  nn::Vars vb(store);
  if (!prefix_.empty()) vb = vb.prefix(prefix_.substr(0, prefix_.size() - 1));
  read_modernbert(vb, c, m_, true, ops::ComputeType::F32, emb_.word, emb_.norm, layers_, final_norm_);
  emb_.vocab_size = c.vocab_size;
  emb_.dim = c.hidden_size;
  for (nn::EncoderBlock& l : layers_) l.ffn.gate_dropout = mlp_dropout;
  for (const auto& e : store.entries())
    if (e.name.compare(0, prefix_.size(), prefix_) == 0) names_.push_back(e.name);
}

void ModernBertTrainable::load(nn::ParamStore& store, WeightSource& weights) const {
  for (const std::string& full : names_) {
    const std::string name = full.substr(prefix_.size());
    const int64_t i = store.index_of(full);
    // Bare ("" prefix): the ModernBertFor* names are accepted too.
    Tensor t = weights.get(name, store.entries()[i].shape, {prefix_.empty() ? "model." + name : full});
    std::memcpy(store.data(i), t.f32(), sizeof(float) * t.numel());
    weights.release(t);  // the store holds it now: the file's pages need not stay resident for the whole run
  }
}

void ModernBertTrainable::set_precision(ops::ComputeType precision) {
  for (nn::EncoderBlock& l : layers_)
    for (nn::Linear* lin : {&l.attention.qkv, &l.attention.output, &l.ffn.linear1, &l.ffn.linear2})
      lin->precision = precision;
}

void ModernBertTrainable::forward(const nn::Context& ctx, const int64_t* input_ids, const int64_t*,
                                  const float* key_mask, int64_t B, int64_t L) {
  const int64_t H = config_.hidden_size, N = B * L;
  for (int64_t n = 0; n < N; ++n)
    if (input_ids[n] < 0 || input_ids[n] >= config_.vocab_size)
      throw std::invalid_argument("input_ids value " + std::to_string(input_ids[n]) + " is outside [0, vocab_size = " +
                                  std::to_string(config_.vocab_size) + ")");
  B_ = B;
  L_ = L;
  // The config's dropouts, not the Context's: attention_dropout on the weights and after Wo, mlp_dropout inside
  // the MLP (FeedForward::gate_dropout), embedding_dropout after the embeddings' norm (Embeddings::dropout).
  nn::Context cx = ctx;
  cx.packed = false;
  cx.dropout = cx.attention_dropout = attention_dropout_;
  emb_.forward(cx, input_ids, nullptr, nullptr, N, L);
  ops::AttentionMask mask;
  key_mask_.clear();
  if (key_mask && std::find(key_mask, key_mask + N, 0.0f) != key_mask + N) key_mask_.assign(key_mask, key_mask + N);
  if (!key_mask_.empty()) mask.key_mask = key_mask_.data();
  const float* x = nn::encoder_stack_forward(layers_, cx, emb_.out.data(), B, L, mask);
  last_.resize(N * H);
  final_norm_.forward(last_.data(), x, N);
}

void ModernBertTrainable::backward(const float* dlast, const float* dpooled) {
  if (dpooled) throw std::logic_error("ModernBertTrainable::backward: ModernBERT has no pooler");
  const int64_t n = B_ * L_ * config_.hidden_size;
  std::vector<float> dx(n, 0.0f), demb(n);
  if (dlast) final_norm_.backward(dx.data(), dlast);
  nn::encoder_stack_backward(layers_, dx.data(), demb.data(), n);
  emb_.backward(demb.data());
}

// ---------------------------------------------------------------- the family's entry (models/registry.h)

namespace {
// modeling_modernbert.py: ModernBertPredictionHead head(x) = norm(act(dense(x))) (dense bias classifier_bias, norm
// bias norm_bias, eps norm_eps, act classifier_activation), then ForSequenceClassification: pool (classifier_pooling
// "cls" h[:, 0], "mean" the mean over attention_mask), head, drop (classifier_dropout), classifier;
// ForTokenClassification: head, drop, classifier per token; ForMaskedLM: decoder(head(h)), the decoder tied to
// tok_embeddings, bias decoder.bias when decoder_bias. A head tensor not in the checkpoint as _init_weights draws
// it: trunc_normal_ (cutoff initializer_cutoff_factor, default 3) with std initializer_range /
// sqrt(2 num_hidden_layers) for head.dense ("out"), hidden_size^-0.5 for the classifier ("final_out").
TrainingHeadSpec modernbert_training_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  const ModernBertConfig m = ModernBertConfig::from(c);
  const nlohmann::json& j = c.json;
  const double range = json_number_or(j, "initializer_range", 0.02, c.source);
  const double cutoff = json_number_or(j, "initializer_cutoff_factor", 3.0, c.source);
  HeadStageSpec head = detail::head_stage("head.dense", c.hidden_size, false);
  head.linear_bias = m.classifier_bias;
  head.act = m.classifier_activation;
  head.norm = "head.norm";
  head.norm_bias = m.norm_bias;
  head.norm_eps = (float)m.norm_eps;
  head.init_std = range / std::sqrt(2.0 * (double)c.num_hidden_layers);
  head.init_cutoff = cutoff;
  TrainingHeadSpec h;
  if (kind == HeadKind::MaskedLM) {
    HeadStageSpec decoder = detail::head_stage("decoder", c.vocab_size, false);
    decoder.tied = true;
    if (m.decoder_bias) decoder.bias = "decoder.bias";
    h.stages = {head, decoder};
    return h;
  }
  HeadStageSpec classifier = detail::head_stage("classifier", C, true);
  classifier.init_std = 1.0 / std::sqrt((double)c.hidden_size);
  classifier.init_cutoff = cutoff;
  if (kind == HeadKind::SequenceClassification)
    h.input = m.classifier_pooling == "mean" ? HeadInput::MeanTokens : HeadInput::FirstToken;
  h.stages = {head, classifier};
  return h;
}

// The body reads embedding_dropout, attention_dropout and mlp_dropout itself (ModernBertTrainable; checked here),
// so its p is 0; the classifiers' classifier_dropout (default 0).
TrainingDropouts modernbert_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  for (const char* key : {"embedding_dropout", "attention_dropout", "mlp_dropout"})
    detail::dropout_of(config, key, 0.0, file);
  const bool set = json_is_set(config, "classifier_dropout");
  TrainingDropouts d;
  d.head = kind != HeadKind::MaskedLM && set ? detail::dropout_of(config, "classifier_dropout", 0.0, file) : 0.0f;
  return d;
}
}  // namespace

const ModelFamily& modernbert_family() {
  static const ModelFamily f{
      .name = "modernbert",
      .model_types = {{"modernbert", "ModernBert"}},
      .check_config = [](const EncoderConfig& c) { ModernBertConfig::from(c); },  // its own keys, checked at load
      .make_encoder = make_modernbert,
      .heads = modernbert_heads,
      .trainable_body = [](nn::ParamStore& s, const EncoderConfig& c,
                           const TrainableEncoderOptions& o) -> std::unique_ptr<TrainableEncoder> {
        return std::make_unique<ModernBertTrainable>(s, c, o.bare ? "" : "model.");
      },
      .training_head = modernbert_training_head,
      .training_dropouts = modernbert_dropouts,
      // The defaults are ModernBertConfig's.
      .config_keys = detail::encoder_config_keys({
          {"max_position_embeddings", "", ConfigKeyRole::Size},  // rotary: only the longest input
          {"type_vocab_size", "2", ConfigKeyRole::Ignored},
          {"layer_norm_eps", "1e-12", ConfigKeyRole::Ignored},  // norm_eps
          {"hidden_act", "\"gelu\"", ConfigKeyRole::Ignored},  // hidden_activation
          {"norm_eps", "1e-05", ConfigKeyRole::Value},
          {"norm_bias", "false", ConfigKeyRole::Size},
          {"attention_bias", "false", ConfigKeyRole::Size},
          {"mlp_bias", "false", ConfigKeyRole::Size},
          {"hidden_activation", "\"gelu\"", ConfigKeyRole::Value},
          {"local_attention", "128", ConfigKeyRole::Value},
          {"global_attn_every_n_layers", "3", ConfigKeyRole::Value},
          {"layer_types", "(global_attn_every_n_layers)", ConfigKeyRole::Value},
          {"rope_scaling", "null", ConfigKeyRole::Checked},
          {"global_rope_theta", "160000.0", ConfigKeyRole::Value},
          {"local_rope_theta", "10000.0", ConfigKeyRole::Value},
          {"rope_parameters", "null", ConfigKeyRole::Value},
          {"rope_parameters.full_attention", "null", ConfigKeyRole::Value},
          {"rope_parameters.full_attention.rope_type", "\"default\"", ConfigKeyRole::Checked},
          {"rope_parameters.full_attention.rope_theta", "(global_rope_theta)", ConfigKeyRole::Value},
          {"rope_parameters.sliding_attention", "null", ConfigKeyRole::Value},
          {"rope_parameters.sliding_attention.rope_type", "\"default\"", ConfigKeyRole::Checked},
          {"rope_parameters.sliding_attention.rope_theta", "(local_rope_theta)", ConfigKeyRole::Value},
          {"classifier_pooling", "\"cls\"", ConfigKeyRole::Value},
          {"classifier_activation", "\"gelu\"", ConfigKeyRole::Value},
          {"classifier_bias", "false", ConfigKeyRole::Size},
          {"decoder_bias", "true", ConfigKeyRole::Size},
          {"embedding_dropout", "0.0", ConfigKeyRole::Training},
          {"attention_dropout", "0.0", ConfigKeyRole::Training},
          {"mlp_dropout", "0.0", ConfigKeyRole::Training},
          {"classifier_dropout", "0.0", ConfigKeyRole::Training},
          {"initializer_range", "0.02", ConfigKeyRole::Training},
          {"initializer_cutoff_factor", "3.0", ConfigKeyRole::Training},
      }),
  };
  return f;
}

}  // namespace tfm
