#include "models/electra.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "models/checkpoint_weights.h"
#include "models/registry.h"

namespace tfm {
namespace {

// Base-model names, then the "electra."-prefixed names of the ElectraFor* checkpoints.
std::vector<std::string> electra_aliases(const std::string& name) { return {"electra." + name}; }

std::optional<HeadKind> detect_electra_head(const CheckpointWeights& w) {
  if (w.has("classifier.out_proj.weight")) return HeadKind::SequenceClassification;
  if (w.has("classifier.weight")) return HeadKind::TokenClassification;
  return std::nullopt;
}

HeadLayout load_electra_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w) {
  const int64_t H = c.hidden_size;
  HeadLayout head;
  head.input = HeadInput::FirstToken;  // features[:, 0, :]
  if (kind == HeadKind::SequenceClassification) {
    HeadStage dense, out_proj;
    dense.linear = nn::Linear::load(nn::Vars(w).prefix("classifier.dense"), H, H);
    dense.act = ops::Activation::Gelu;  // get_activation("gelu") whatever hidden_act says
    out_proj.linear = detail::load_head_linear(w, {"classifier.out_proj"}, H);
    head.stages = {std::move(dense), std::move(out_proj)};
  } else if (kind == HeadKind::TokenClassification) {
    HeadStage classifier;
    classifier.linear = detail::load_head_linear(w, {"classifier"}, H);
    head.stages = {std::move(classifier)};
  } else if (kind == HeadKind::QuestionAnswering) {
    throw std::runtime_error(w.path() + ": ELECTRA has sequence and token classification heads here; "
                             "ElectraForQuestionAnswering is not supported");
  } else {
    throw std::runtime_error(w.path() + ": ELECTRA has sequence and token classification heads here; the "
                             "generator's masked-LM head (ElectraForMaskedLM) is not supported");
  }
  return head;
}

// ElectraConfig's defaults for the keys BERT's reader requires (an ElectraConfig() saved without them).
nlohmann::json electra_config_as_bert(const nlohmann::json& j, const std::string&) {
  nlohmann::json b = j;
  const std::pair<const char*, int64_t> defaults[] = {
      {"vocab_size", 30522},        {"hidden_size", 256},         {"num_hidden_layers", 12},
      {"num_attention_heads", 4},   {"intermediate_size", 1024},  {"max_position_embeddings", 512}};
  for (const auto& [key, value] : defaults)
    if (b.is_object() && !b.contains(key)) b[key] = value;
  return b;
}

// modeling_electra.py: ElectraClassificationHead dropout, dense, gelu, dropout, out_proj on features[:, 0];
// ElectraForTokenClassification classifier(dropout(h)).
TrainingHeadSpec electra_training_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  if (kind == HeadKind::TokenClassification) return detail::token_classifier_head(C);
  if (kind == HeadKind::SequenceClassification) {
    TrainingHeadSpec h;
    h.stages = {detail::head_stage("classifier.dense", c.hidden_size, true),
                detail::head_stage("classifier.out_proj", C, true)};
    h.stages[0].act = ops::Activation::Gelu;
    return h;
  }
  throw std::runtime_error(c.source + ": ELECTRA fine-tunes sequence classification (--task classify) and token "
                           "classification (--task token-classify); masked LM (the generator) is not supported");
}

}  // namespace

detail::BertVariant detail::electra_variant() {
  detail::BertVariant variant;
  variant.aliases = electra_aliases;
  variant.prefix = "electra.";
  variant.embeddings_project = true;
  return variant;
}

std::unique_ptr<EncoderModel> make_electra(const EncoderConfig& config, WeightSource& weights, ops::ComputeType dtype) {
  return detail::make_bert_variant(config, weights, dtype, detail::electra_variant());
}

FamilyHeads electra_heads() { return {detect_electra_head, load_electra_head}; }

// ---------------------------------------------------------------- the family's entry (models/registry.h)

const ModelFamily& electra_family() {
  static const ModelFamily f{
      .name = "electra",
      .model_types = {{"electra", "Electra"}},
      .config_as_bert = electra_config_as_bert,
      .check_config = [](const EncoderConfig& c) { detail::embedding_size(c, detail::electra_variant()); },
      .make_encoder = make_electra,
      .heads = electra_heads,
      .trainable_body =
          [](nn::ParamStore& s, const EncoderConfig& c, const TrainableEncoderOptions& o) {
            return detail::bert_variant_body(s, c, o, detail::electra_variant());
          },
      .training_head = electra_training_head,
      // hidden_dropout_prob, attention_probs_dropout_prob; the heads' classifier_dropout when set.
      .training_dropouts = detail::bert_dropouts,
      // The defaults are ElectraConfig's (electra_config_as_bert writes the required ones a file lacks).
      .config_keys = detail::encoder_config_keys({
          {"vocab_size", "30522", ConfigKeyRole::Size},
          {"hidden_size", "256", ConfigKeyRole::Size},
          {"num_hidden_layers", "12", ConfigKeyRole::Size},
          {"num_attention_heads", "4", ConfigKeyRole::Value},
          {"intermediate_size", "1024", ConfigKeyRole::Size},
          {"max_position_embeddings", "512", ConfigKeyRole::Size},
          {"embedding_size", "128", ConfigKeyRole::Size},  // the embeddings' width; embeddings_project when != H
          {"hidden_dropout_prob", "0.1", ConfigKeyRole::Training},
          {"attention_probs_dropout_prob", "0.1", ConfigKeyRole::Training},
          {"classifier_dropout", "(hidden_dropout_prob)", ConfigKeyRole::Training},
      }),
  };
  return f;
}

}  // namespace tfm
