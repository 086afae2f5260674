#include "models/distilbert.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "io/json_util.h"
#include "models/bert.h"
#include "models/checkpoint_weights.h"
#include "nn/transformer_block.h"
#include "models/registry.h"

namespace tfm {
namespace {

constexpr float kLayerNormEps = 1e-12f;  // modeling_distilbert.py: every nn.LayerNorm(dim, eps=1e-12)

// Base-model names, then the "distilbert."-prefixed names of the DistilBertFor* checkpoints.
std::vector<std::string> distilbert_aliases(const std::string& name) { return {"distilbert." + name}; }

// One TransformerBlock under `vb` ("transformer.layer.N"): post-LN, as BertLayer, under DistilBERT's names; no
// dropout on the attention output (sa_layer_norm(out_lin(context) + x)). trainable: as detail::BertVariant::layer.
nn::EncoderBlock distilbert_layer(const nn::Vars& vb, const EncoderConfig& c, ops::ComputeType ct, bool trainable) {
  const detail::PostLnLayerNames names = {"attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
                                          "sa_layer_norm",   "ffn.lin1",        "ffn.lin2",        "output_layer_norm"};
  nn::EncoderBlock b = detail::post_ln_layer(vb, c, ct, trainable, names, kLayerNormEps);
  b.attention_output_dropout = false;
  return b;
}

std::optional<HeadKind> detect_distilbert_head(const CheckpointWeights& w) {
  if (detail::has_qa_outputs(w)) return HeadKind::QuestionAnswering;
  if (w.has("pre_classifier.weight")) return HeadKind::SequenceClassification;
  if (w.has("classifier.weight")) return HeadKind::TokenClassification;
  if (w.has("vocab_transform.weight") || w.has("vocab_projector.bias")) return HeadKind::MaskedLM;
  return std::nullopt;
}

HeadLayout load_distilbert_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w) {
  const int64_t H = c.hidden_size;
  if (kind == HeadKind::QuestionAnswering) return detail::load_qa_outputs_head(w, H);  // DistilBertForQuestionAnswering
  HeadLayout head;
  head.input = HeadInput::FirstToken;  // hidden_state[:, 0], the [CLS] token
  if (kind == HeadKind::SequenceClassification) {
    HeadStage pre, classifier;
    pre.linear = nn::Linear::load(nn::Vars(w).prefix("pre_classifier"), H, H);
    pre.act = ops::Activation::Relu;
    classifier.linear = detail::load_head_linear(w, {"classifier"}, H);
    head.stages = {std::move(pre), std::move(classifier)};
  } else if (kind == HeadKind::TokenClassification) {
    HeadStage classifier;
    classifier.linear = detail::load_head_linear(w, {"classifier"}, H);
    head.stages = {std::move(classifier)};
  } else {
    HeadStage transform, projector;
    transform.linear = nn::Linear::load(nn::Vars(w).prefix("vocab_transform"), H, H);
    transform.act = ops::parse_activation(c.hidden_act);  // get_activation(config.activation)
    transform.norm = detail::load_head_layer_norm(w, "vocab_layer_norm", H, kLayerNormEps);
    projector.linear = detail::load_vocab_decoder(
        w, {"vocab_projector.weight"}, {"distilbert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"},
        {"vocab_projector.bias"}, c.vocab_size, H, &head.tied_decoder);
    head.stages = {std::move(transform), std::move(projector)};
  }
  return head;
}

}  // namespace

nlohmann::json distilbert_config_as_bert(const nlohmann::json& j, const std::string& file) {
  nlohmann::json b = j;
  b["hidden_size"] = json_int(j, "dim", file);
  b["num_hidden_layers"] = json_int(j, "n_layers", file);
  b["num_attention_heads"] = json_int(j, "n_heads", file);
  b["intermediate_size"] = json_int(j, "hidden_dim", file);
  b["hidden_act"] = json_string_or(j, "activation", "gelu", file);
  try {
    ops::parse_activation(b["hidden_act"].get<std::string>());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(file + ": key 'activation': " + e.what());
  }
  b["layer_norm_eps"] = 1e-12;  // kLayerNormEps, as the double config.json would hold
  b["type_vocab_size"] = 1;
  b["max_position_embeddings"] = json_int_or(j, "max_position_embeddings", 512, file);
  json_bool_or(j, "sinusoidal_pos_embds", false, file);  // type-checked; the table is read from the file either way
  return b;
}

detail::BertVariant detail::distilbert_variant(const EncoderConfig& config) {
  detail::BertVariant variant;
  variant.aliases = distilbert_aliases;
  variant.prefix = "distilbert.";
  variant.layers = "transformer.layer";
  variant.layer = distilbert_layer;
  variant.token_type_embeddings = false;
  variant.trainable_position_embeddings =
      !json_bool_or(config.json, "sinusoidal_pos_embds", false, config.source.empty() ? "config.json" : config.source);
  return variant;
}

std::unique_ptr<EncoderModel> make_distilbert(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype) {
  return detail::make_bert_variant(config, weights, dtype, detail::distilbert_variant(config));
}

FamilyHeads distilbert_heads() { return {detect_distilbert_head, load_distilbert_head}; }

// ---------------------------------------------------------------- the family's entry (models/registry.h)

namespace {
// modeling_distilbert.py: pre_classifier, ReLU, dropout, classifier; vocab_transform, activation, vocab_layer_norm,
// vocab_projector.
TrainingHeadSpec distilbert_training_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  if (kind == HeadKind::TokenClassification) return detail::token_classifier_head(C);
  if (kind == HeadKind::SequenceClassification) {
    TrainingHeadSpec h;
    h.stages = {detail::head_stage("pre_classifier", c.hidden_size, false), detail::head_stage("classifier", C, true)};
    h.stages[0].act = ops::Activation::Relu;
    return h;
  }
  return detail::lm_head("vocab_transform", ops::parse_activation(c.hidden_act), "vocab_layer_norm",
                         "vocab_projector", "vocab_projector.bias", {}, c);  // get_activation(config.activation)
}

// DistilBERT: dropout, attention_dropout; sequence classification seq_classif_dropout.
TrainingDropouts distilbert_dropouts(const nlohmann::json& config, HeadKind kind, const std::string& file) {
  TrainingDropouts d;
  d.body = detail::dropout_of(config, "dropout", 0.1, file);
  d.attention = detail::dropout_of(config, "attention_dropout", 0.1, file);
  d.head = kind == HeadKind::SequenceClassification ? detail::dropout_of(config, "seq_classif_dropout", 0.2, file)
                                                    : d.body;
  return d;
}
}  // namespace

const ModelFamily& distilbert_family() {
  static const ModelFamily f{
      .name = "distilbert",
      .model_types = {{"distilbert", "DistilBert"}},
      .config_as_bert = distilbert_config_as_bert,
      .make_encoder = make_distilbert,
      .heads = distilbert_heads,
      .trainable_body =
          [](nn::ParamStore& s, const EncoderConfig& c, const TrainableEncoderOptions& o) {
            return detail::bert_variant_body(s, c, o, detail::distilbert_variant(c));
          },
      .training_head = distilbert_training_head,
      .training_dropouts = distilbert_dropouts,
      // BERT's names that distilbert_config_as_bert writes are DistilBERT's keys below; a DistilBERT config.json's
      // own hidden_size, ... (if any) are not read.
      .config_keys = detail::encoder_config_keys({
          {"hidden_size", "", ConfigKeyRole::Ignored},
          {"num_hidden_layers", "", ConfigKeyRole::Ignored},
          {"num_attention_heads", "", ConfigKeyRole::Ignored},
          {"intermediate_size", "", ConfigKeyRole::Ignored},
          {"type_vocab_size", "2", ConfigKeyRole::Ignored},
          {"layer_norm_eps", "1e-12", ConfigKeyRole::Ignored},  // every LayerNorm's eps is 1e-12
          {"hidden_act", "\"gelu\"", ConfigKeyRole::Ignored},
          {"max_position_embeddings", "512", ConfigKeyRole::Size},
          {"dim", "", ConfigKeyRole::Size},
          {"n_layers", "", ConfigKeyRole::Size},
          {"n_heads", "", ConfigKeyRole::Value},
          {"hidden_dim", "", ConfigKeyRole::Size},
          {"activation", "\"gelu\"", ConfigKeyRole::Value},
          // true: the stored table is sinusoidal and frozen (not trained); inference reads it either way
          {"sinusoidal_pos_embds", "false", ConfigKeyRole::Training},
          {"dropout", "0.1", ConfigKeyRole::Training},
          {"attention_dropout", "0.1", ConfigKeyRole::Training},
          {"seq_classif_dropout", "0.2", ConfigKeyRole::Training},
      }),
  };
  return f;
}

}  // namespace tfm
