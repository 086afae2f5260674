#include "models/bert.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/profile.h"
#include "io/json_util.h"
#include "models/checkpoint_weights.h"
#include "models/mpnet.h"
#include "nn/params.h"
#include "nn/weights.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "nn/transformer_block.h"
#include "ops/activation.h"
#include "models/registry.h"

namespace tfm {
namespace {

// Hugging Face names, then the "bert."-prefixed names of BertFor* checkpoints; LayerNorm also as gamma/beta.
std::vector<std::string> bert_aliases(const std::string& name) {
  std::vector<std::string> aliases = {"bert." + name};
  auto swap_suffix = [&](const std::string& from, const std::string& to) {
    if (name.find("LayerNorm." + from) != std::string::npos && name.size() >= from.size() &&
        name.compare(name.size() - from.size(), from.size(), from) == 0) {
      std::string old = name.substr(0, name.size() - from.size()) + to;
      aliases.push_back(old);
      aliases.push_back("bert." + old);
    }
  };
  swap_suffix("weight", "gamma");
  swap_suffix("bias", "beta");
  return aliases;
}

// One BertLayer under `vb` ("encoder.layer.N"): attention.self.{query,key,value} (packed into one GEMM),
// attention.output.{dense,LayerNorm}, intermediate.dense, output.{dense,LayerNorm}; post-LN.
// trainable: as detail::BertVariant::layer.
nn::EncoderBlock bert_layer(const nn::Vars& vb, const EncoderConfig& c, ops::ComputeType ct, bool trainable) {
  const detail::PostLnLayerNames names = {"attention.self.query", "attention.self.key", "attention.self.value",
                                          "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
                                          "output.dense", "output.LayerNorm"};
  return detail::post_ln_layer(vb, c, ct, trainable, names, (float)c.layer_norm_eps);
}

// The padding index of the variant's positions (BertVariant::padding_idx), and its name in messages.
int64_t padding_index(const EncoderConfig& c, const detail::BertVariant& variant) {
  return variant.padding_idx >= 0 ? variant.padding_idx : c.pad_token_id;
}
const char* padding_name(const detail::BertVariant& variant) {
  return variant.padding_idx >= 0 ? "padding_idx" : "pad_token_id";
}

void check_padding_positions(const EncoderConfig& c, const detail::BertVariant& variant) {
  const int64_t pad = padding_index(c, variant);
  if (variant.positions_from_padding && (pad < 0 || pad >= c.max_position_embeddings))
    throw std::runtime_error("config: " + std::string(padding_name(variant)) + " " + std::to_string(pad) +
                             " is outside [0, max_position_embeddings = " + std::to_string(c.max_position_embeddings) +
                             "); position ids start at " + padding_name(variant) + " + 1");
}

class Bert : public EncoderModel {
 public:
  Bert(const EncoderConfig& c, WeightSource& w, ops::ComputeType ct, const detail::BertVariant& variant)
      : positions_from_padding_(variant.positions_from_padding) {
    config_ = c;
    check_padding_positions(c, variant);
    const int64_t H = c.hidden_size, E = detail::embedding_size(c, variant);
    const nn::Vars vb(w, variant.aliases ? variant.aliases : bert_aliases);
    const nn::Vars emb = vb.prefix("embeddings");
    // Read in place and unchecked: forward reads only the rows of the ids it sees, and checks those
    // (nn::Embeddings::forward_inference).
    emb_.word = emb.prefix("word_embeddings").get_unchecked("weight", {c.vocab_size, E});
    emb_.position = emb.prefix("position_embeddings").get_unchecked("weight", {c.max_position_embeddings, E});
    if (variant.token_type_embeddings)
      emb_.type = emb.prefix("token_type_embeddings").get_unchecked("weight", {c.type_vocab_size, E});
    emb_.norm = nn::LayerNorm::load(emb.prefix("LayerNorm"), E, (float)c.layer_norm_eps);
    if (E != H) emb_.project = nn::Linear::load_packed({vb.prefix("embeddings_project")}, E, H, ct);
    emb_.dim = E;
    auto layer = variant.layer ? variant.layer : bert_layer;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      layers_.push_back(layer(vb.prefix(variant.layers).prefix(l), c, ct, /*trainable=*/false));
    // BertForMaskedLM / BertForTokenClassification checkpoints have no pooler: load it only when present.
    if (vb.has("pooler.dense.weight")) pooler_ = nn::Linear::load(vb.prefix("pooler.dense"), H, H);
  }

  EncoderOutput forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                        bool all_layers) const override {
    return run(input_ids, token_type_ids, attention_mask, all_layers, /*unpadded=*/false);
  }
  EncoderOutput forward_unpadded(const Tensor& input_ids, const Tensor& token_type_ids,
                                 const Tensor& attention_mask) const override {
    return run(input_ids, token_type_ids, attention_mask, false, /*unpadded=*/true);
  }
  EncoderOutput forward_first_token(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                                    bool unpadded = false) const override {
    return run(input_ids, token_type_ids, attention_mask, false, unpadded, /*first_token=*/true);
  }

 private:
  EncoderOutput run(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask,
                    bool all_layers, bool unpadded, bool first_token = false) const {
    const EncoderConfig& c = config_;
    // A family without token type embeddings takes no token_type_ids (DistilBertModel.forward has none).
    const Tensor tt_ids = emb_.type.defined() ? token_type_ids : Tensor();
    std::vector<float> key_mask = detail::check_encoder_inputs(c, input_ids, tt_ids, attention_mask);
    const int64_t B = input_ids.size(0), L = input_ids.size(1), H = c.hidden_size;
    const int64_t N = B * L, NL = c.num_hidden_layers;
    const int64_t* ids = input_ids.i64();
    std::vector<int64_t> position_ids;  // empty: 0..L-1 in every row (BERT)
    if (positions_from_padding_) position_ids = detail::position_ids_from_padding(c, ids, B, L, c.pad_token_id);
    EncoderOutput out;
    Tensor hs;
    if (all_layers) hs = Tensor::empty({NL + 1, B, L, H});
    Tensor x = Tensor::empty({B, L, H});
    OpTimer t_emb("embeddings");  // sections for bench_encoder --breakdown (core/profile.h; off: no cost)
    float* X = x.f32();
    // Embeddings: word + position + token_type, then LayerNorm, E wide; then ELECTRA's projection to H.
    emb_.forward_inference(X, ids, position_ids.empty() ? nullptr : position_ids.data(),
                           tt_ids.defined() ? tt_ids.i64() : nullptr, N, L);
    if (all_layers) std::memcpy(hs.f32(), X, sizeof(float) * N * H);
    t_emb.stop();

    Tensor first;
    if (first_token) first = Tensor::empty({B, H});
    nn::encoder_stack_inference(layers_, X, B, L, key_mask.data(), unpadded, all_layers ? hs.f32() : nullptr,
                                nullptr, first_token ? first.f32() : nullptr);
    // Pooler: tanh(dense(x[:, 0])), when the checkpoint has one.
    if (pooler_.weight.defined())
      out.pooler_output = detail::pooler_output(pooler_, first_token ? first.f32() : nullptr, X, B, L, H);
    if (first_token) out.first_token_state = first;  // x holds the layer before the last's output
    else out.last_hidden_state = x;
    out.hidden_states = hs;
    return out;
  }

  bool positions_from_padding_ = false;
  nn::Embeddings emb_;  // word, position, token type (optional), LayerNorm, ELECTRA's embeddings_project (E != H)
  std::vector<nn::EncoderBlock> layers_;
  nn::Linear pooler_;
};

}  // namespace

nn::EncoderBlock detail::post_ln_layer(const nn::Vars& vb, const EncoderConfig& c, ops::ComputeType ct, bool trainable,
                                       const PostLnLayerNames& n, float eps) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  nn::EncoderBlock b;
  b.attention.num_heads = c.num_attention_heads;
  b.attention.hidden_size = H;
  auto linear = [&](const std::vector<nn::Vars>& parts, int64_t in, int64_t out) {
    return trainable ? nn::Linear::load(parts[0], in, out) : nn::Linear::load_packed(parts, in, out, ct);
  };
  if (trainable) {
    b.attention.query = linear({vb.prefix(n.query)}, H, H);
    b.attention.key = linear({vb.prefix(n.key)}, H, H);
    b.attention.value = linear({vb.prefix(n.value)}, H, H);
  } else {
    b.attention.qkv = linear({vb.prefix(n.query), vb.prefix(n.key), vb.prefix(n.value)}, H, H);
  }
  b.attention.output = linear({vb.prefix(n.output)}, H, H);
  b.norm1 = nn::LayerNorm::load(vb.prefix(n.norm1), H, eps);
  b.ffn.linear1 = linear({vb.prefix(n.linear1)}, H, I);
  b.ffn.linear2 = linear({vb.prefix(n.linear2)}, I, H);
  b.ffn.act = ops::parse_activation(c.hidden_act);
  b.norm2 = nn::LayerNorm::load(vb.prefix(n.norm2), H, eps);
  b.norm_first = false;
  return b;
}

int64_t detail::embedding_size(const EncoderConfig& c, const BertVariant& variant) {
  if (!variant.embeddings_project) return c.hidden_size;
  const int64_t E = json_int_or(c.json, "embedding_size", 128, c.source);  // ElectraConfig's default
  if (E <= 0) throw std::runtime_error(c.source + ": key 'embedding_size' must be positive, found " + std::to_string(E));
  check_at_most(c.source, "embedding_size", E, 1 << 14);
  return E;
}

// modeling_roberta.py create_position_ids_from_input_ids: cumsum(ids != pad) * (ids != pad) + pad, [B * L].
std::vector<int64_t> detail::position_ids_from_padding(const EncoderConfig& c, const int64_t* ids, int64_t B,
                                                       int64_t L, int64_t pad, const char* pad_name) {
  const int64_t P = c.max_position_embeddings;
  if (pad + L >= P)
    throw std::invalid_argument("sequence of " + std::to_string(L) + " tokens needs position " +
                                std::to_string(pad + L) + ", past max_position_embeddings (" + std::to_string(P) +
                                ") with " + pad_name + " " + std::to_string(pad) + "; truncate the input to " +
                                std::to_string(P - pad - 1) + " tokens");
  std::vector<int64_t> position_ids(B * L);
  for (int64_t b = 0; b < B; ++b) {
    int64_t count = 0;
    for (int64_t l = 0; l < L; ++l) {
      const bool real = ids[b * L + l] != pad;
      count += real;
      position_ids[b * L + l] = real ? pad + count : pad;
    }
  }
  return position_ids;
}

namespace {
std::optional<HeadKind> detect_bert_head(const CheckpointWeights& w) {
  if (detail::has_qa_outputs(w)) return HeadKind::QuestionAnswering;
  const bool has_cls = w.has("classifier.weight");
  const bool has_mlm = w.has("cls.predictions.bias") || w.has("cls.predictions.transform.dense.weight");
  if (has_mlm && !has_cls) return HeadKind::MaskedLM;
  if (has_cls)
    return detail::has_any(w, {"pooler.dense.weight", "bert.pooler.dense.weight"}) ? HeadKind::SequenceClassification
                                                                                  : HeadKind::TokenClassification;
  return std::nullopt;
}

HeadLayout load_bert_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w) {
  const int64_t H = c.hidden_size;
  if (kind == HeadKind::QuestionAnswering) return detail::load_qa_outputs_head(w, H);  // BertForQuestionAnswering
  HeadLayout head;
  if (kind == HeadKind::MaskedLM) {
    HeadStage transform;
    transform.linear = nn::Linear::load(nn::Vars(w).prefix("cls.predictions.transform.dense"), H, H);
    transform.act = ops::parse_activation(c.hidden_act);
    transform.norm = detail::load_head_layer_norm(w, "cls.predictions.transform.LayerNorm", H, (float)c.layer_norm_eps);
    HeadStage decoder;
    decoder.linear = detail::load_vocab_decoder(
        w, {"cls.predictions.decoder.weight"}, {"bert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"},
        {"cls.predictions.bias", "cls.predictions.decoder.bias"}, c.vocab_size, H, &head.tied_decoder);
    head.stages = {std::move(transform), std::move(decoder)};
    return head;
  }
  HeadStage classifier;
  classifier.linear = detail::load_head_linear(w, {"classifier"}, H);
  head.stages = {std::move(classifier)};
  if (kind == HeadKind::SequenceClassification) {
    if (!detail::has_any(w, {"pooler.dense.weight", "bert.pooler.dense.weight"}))
      throw std::runtime_error(w.path() + ": missing tensor 'bert.pooler.dense.weight': sequence "
                               "classification reads the pooler output");
    head.input = HeadInput::PoolerOutput;
  }
  return head;
}
}  // namespace

FamilyHeads bert_heads() { return {detect_bert_head, load_bert_head}; }

// ---------------------------------------------------------------- BertTrainable

BertTrainable::BertTrainable(nn::ParamStore& store, const EncoderConfig& c, bool pooler, const std::string& prefix)
    : BertTrainable(store, c, [&] {
        detail::BertVariant v;
        v.prefix = prefix.c_str();  // read by the delegated constructor only (it copies prefix_)
        return v;
      }(), pooler) {}

BertTrainable::BertTrainable(nn::ParamStore& store, const EncoderConfig& c, const detail::BertVariant& variant,
                             bool pooler, bool first_token_only)
    : config_(c), variant_(variant), prefix_(variant.prefix), first_token_only_(first_token_only) {
  variant_.prefix = nullptr;  // prefix_ holds it (the caller's string may not outlive this constructor)
  check_padding_positions(c, variant);
  const int64_t H = c.hidden_size, E = detail::embedding_size(c, variant);
  nn::Vars vb(store);
  if (!prefix_.empty()) vb = vb.prefix(prefix_.substr(0, prefix_.size() - (prefix_.back() == '.' ? 1 : 0)));
  const nn::Vars emb = vb.prefix("embeddings");
  emb_.word = emb.prefix("word_embeddings").get("weight", {c.vocab_size, E});
  emb_.position = emb.prefix("position_embeddings").get("weight", {c.max_position_embeddings, E});
  if (variant.token_type_embeddings)
    emb_.type = emb.prefix("token_type_embeddings").get("weight", {c.type_vocab_size, E});
  emb_.norm = nn::LayerNorm::load(emb.prefix("LayerNorm"), E, (float)c.layer_norm_eps);
  // ElectraModel registers embeddings_project after the embeddings and before the encoder.
  if (E != H) emb_.project = nn::Linear::load(vb.prefix("embeddings_project"), E, H);
  emb_.vocab_size = c.vocab_size;
  emb_.max_positions = c.max_position_embeddings;
  emb_.type_vocab_size = c.type_vocab_size;
  emb_.dim = E;
  emb_.train_position = variant.trainable_position_embeddings;
  auto layer = variant.layer ? variant.layer : bert_layer;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layers_.push_back(layer(vb.prefix(variant.layers).prefix(l), c, ops::ComputeType::F32, /*trainable=*/true));
  if (variant.relative_attention_bias) {
    detail::check_mpnet_config(c);
    rel_bias_ = vb.prefix("encoder.relative_attention_bias")
                    .get("weight", {c.relative_attention_num_buckets, c.num_attention_heads});
  }
  if (pooler) pooler_ = nn::Linear::load(vb.prefix("pooler.dense"), H, H);
  for (const auto& e : store.entries())
    if (e.name.compare(0, prefix_.size(), prefix_) == 0) names_.push_back(e.name);
  if (!variant.trainable_position_embeddings) frozen_.push_back(prefix_ + "embeddings.position_embeddings.weight");
}

void BertTrainable::load(nn::ParamStore& store, WeightSource& weights) const {
  for (const std::string& full : names_) {
    const std::string name = full.substr(prefix_.size());
    const int64_t i = store.index_of(full);
    const Shape& shape = store.entries()[i].shape;
    std::vector<std::string> aliases = variant_.aliases ? variant_.aliases(name) : bert_aliases(name);
    if (!prefix_.empty() && std::find(aliases.begin(), aliases.end(), full) == aliases.end())
      aliases.insert(aliases.begin(), full);
    Tensor t = weights.get(name, shape, aliases);
    std::memcpy(store.data(i), t.f32(), sizeof(float) * t.numel());
    weights.release(t);  // the store holds it now: the file's pages need not stay resident for the whole run
  }
}

void BertTrainable::forward(const nn::Context& ctx, const int64_t* input_ids, const int64_t* token_type_ids,
                            const float* key_mask, int64_t B, int64_t L) {
  const EncoderConfig& c = config_;
  const int64_t H = c.hidden_size, N = B * L;
  if (L > c.max_position_embeddings)
    throw std::invalid_argument("sequence of " + std::to_string(L) + " tokens is longer than max_position_embeddings (" +
                                std::to_string(c.max_position_embeddings) + ")");
  for (int64_t n = 0; n < N; ++n)
    if (input_ids[n] < 0 || input_ids[n] >= c.vocab_size)
      throw std::invalid_argument("input_ids value " + std::to_string(input_ids[n]) + " is outside [0, vocab_size = " +
                                  std::to_string(c.vocab_size) + ")");
  B_ = B;
  L_ = L;
  ids_.assign(input_ids, input_ids + N);
  types_.assign(N, 0);
  if (token_type_ids && emb_.type.defined()) types_.assign(token_type_ids, token_type_ids + N);
  if (variant_.positions_from_padding) {
    positions_ =
        detail::position_ids_from_padding(c, input_ids, B, L, padding_index(c, variant_), padding_name(variant_));
  } else {
    positions_.resize(N);
    for (int64_t n = 0; n < N; ++n) positions_[n] = n % L;
  }
  for (int64_t n = 0; n < N; ++n)
    if (types_[n] < 0 || types_[n] >= c.type_vocab_size)
      throw std::invalid_argument("token_type_ids value " + std::to_string(types_[n]) + " is outside [0, " +
                                  std::to_string(c.type_vocab_size) + ")");
  // Embeddings: word + position + token_type (each an nn.Embedding lookup), LayerNorm, dropout.
  emb_.forward(ctx, ids_.data(), positions_.data(), types_.data(), N, L);
  mask_ = ops::AttentionMask{};
  key_mask_.clear();
  if (key_mask) {
    key_mask_.assign(key_mask, key_mask + N);
    bool padded = false;
    for (float m : key_mask_) padded |= m == 0.0f;
    if (padded) mask_.key_mask = key_mask_.data();
  }
  if (rel_bias_.defined()) {  // MPNetEncoder.compute_position_bias: one table for the batch and every layer
    score_bias_.resize(c.num_attention_heads * L * L);
    detail::mpnet_position_bias(score_bias_.data(), rel_bias_.data(), c.num_attention_heads, L);
    mask_.bias = score_bias_.data();
  }
  const float* x = nn::encoder_stack_forward(layers_, ctx, emb_.out.data(), B, L, mask_, first_token_only());
  // The last layer's rows: [B, L, H], or [B, 1, H] (first_token_only).
  const int64_t last_L = first_token_only() ? 1 : L;
  if (pooler_.weight.defined()) {  // tanh(dense(h[:, 0]))
    cls_.resize(B * H);
    pooled_.resize(B * H);
    for (int64_t b = 0; b < B; ++b) std::memcpy(cls_.data() + b * H, x + b * last_L * H, sizeof(float) * H);
    nn::Context lin = ctx;
    lin.packed = false;
    pooler_.forward(lin, pooled_.data(), cls_.data(), B);
    ops::tanh_forward(pooled_.data(), pooled_.data(), B * H);
  }
}

void BertTrainable::set_precision(ops::ComputeType precision) {
  for (auto& l : layers_)
    for (nn::Linear* lin : {&l.attention.query, &l.attention.key, &l.attention.value, &l.attention.output,
                            &l.ffn.linear1, &l.ffn.linear2})
      lin->precision = precision;
  pooler_.precision = precision;
  emb_.project.precision = precision;
}

const float* BertTrainable::last_hidden_state() const {
  return layers_.empty() ? emb_.out.data() : layers_.back().out.data();
}

void BertTrainable::backward(const float* dlast, const float* dpooled) {
  const EncoderConfig& c = config_;
  const int64_t H = c.hidden_size, B = B_, L = L_, N = B * L;
  const int64_t last_L = first_token_only() ? 1 : L;  // the last layer's output rows per sequence
  dx_.assign(B * last_L * H, 0.0f);
  if (dlast) std::memcpy(dx_.data(), dlast, sizeof(float) * B * last_L * H);
  if (dpooled) {
    if (!pooler_.weight.defined()) throw std::logic_error("BertTrainable::backward: the model has no pooler");
    std::vector<float> dpre(B * H), dcls(B * H);
    for (int64_t i = 0; i < B * H; ++i) dpre[i] = dpooled[i] * (1.0f - pooled_[i] * pooled_[i]);
    pooler_.backward(dcls.data(), dpre.data(), cls_.data(), B, /*accumulate=*/false);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) dx_[b * last_L * H + h] += dcls[b * H + h];
  }
  if (rel_bias_.defined()) dscore_bias_.assign(c.num_attention_heads * L * L, 0.0f);
  tmp_.resize(N * H);
  nn::encoder_stack_backward(layers_, dx_.data(), tmp_.data(), N * H,
                             rel_bias_.defined() ? dscore_bias_.data() : nullptr);
  std::swap(dx_, tmp_);
  if (rel_bias_.defined())
    detail::mpnet_position_bias_backward(rel_bias_.grad(), dscore_bias_.data(), c.num_attention_heads, L);
  emb_.backward(dx_.data());
}

std::unique_ptr<EncoderModel> make_bert(const EncoderConfig& config, WeightSource& weights, ops::ComputeType dtype) {
  return std::make_unique<Bert>(config, weights, dtype, detail::BertVariant{});
}

std::unique_ptr<EncoderModel> detail::make_bert_variant(const EncoderConfig& config, WeightSource& weights,
                                                        ops::ComputeType dtype, const BertVariant& variant) {
  return std::make_unique<Bert>(config, weights, dtype, variant);
}

// ---------------------------------------------------------------- the family's entry (models/registry.h)

std::unique_ptr<TrainableEncoder> detail::bert_variant_body(nn::ParamStore& store, const EncoderConfig& c,
                                                            const TrainableEncoderOptions& o, BertVariant v) {
  if (o.bare) v.prefix = "";
  return std::make_unique<BertTrainable>(store, c, v, o.pooler, o.first_token_only);
}

namespace {
// modeling_bert.py: BertForSequenceClassification classifier(dropout(pooler_output)); BertOnlyMLMHead.
TrainingHeadSpec bert_training_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  if (kind == HeadKind::TokenClassification) return detail::token_classifier_head(C);
  if (kind == HeadKind::SequenceClassification) {
    TrainingHeadSpec h;
    h.input = HeadInput::PoolerOutput;
    h.stages = {detail::head_stage("classifier", C, true)};
    return h;
  }
  return detail::lm_head("cls.predictions.transform.dense", ops::parse_activation(c.hidden_act),
                         "cls.predictions.transform.LayerNorm", "cls.predictions.decoder", "cls.predictions.bias",
                         {"cls.predictions.decoder.bias"}, c);
}
}  // namespace

const ModelFamily& bert_family() {
  static const ModelFamily f{
      .name = "bert",
      .model_types = {{"bert", "Bert"}},
      .make_encoder = make_bert,
      .heads = bert_heads,
      .trainable_body =
          [](nn::ParamStore& s, const EncoderConfig& c, const TrainableEncoderOptions& o) {
            return detail::bert_variant_body(s, c, o, detail::BertVariant{});
          },
      .training_head = bert_training_head,
      .training_dropouts = detail::bert_dropouts,
      .config_keys = detail::encoder_config_keys({
          {"hidden_dropout_prob", "0.1", ConfigKeyRole::Training},
          {"attention_probs_dropout_prob", "0.1", ConfigKeyRole::Training},
          {"classifier_dropout", "(hidden_dropout_prob)", ConfigKeyRole::Training},
      }),
  };
  return f;
}

}  // namespace tfm
