#include "models/roberta.h"

#include <string>
#include <vector>

#include "models/bert.h"
#include "models/checkpoint_weights.h"
#include "models/registry.h"

namespace tfm {
namespace {

// Base-model names, then the "roberta."-prefixed names of the *For* heads' checkpoints.
std::vector<std::string> roberta_aliases(const std::string& name) { return {"roberta." + name}; }

std::optional<HeadKind> detect_roberta_head(const CheckpointWeights& w) { return detail::detect_lm_style_head(w); }

HeadLayout load_roberta_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w) {
  return detail::load_lm_style_head(kind, c, w, "roberta.");
}

}  // namespace

std::optional<HeadKind> detail::detect_lm_style_head(const CheckpointWeights& w) {
  if (has_qa_outputs(w)) return HeadKind::QuestionAnswering;
  if (w.has("classifier.out_proj.weight")) return HeadKind::SequenceClassification;
  if (w.has("classifier.weight")) return HeadKind::TokenClassification;
  if (w.has("lm_head.bias") || w.has("lm_head.dense.weight")) return HeadKind::MaskedLM;
  return std::nullopt;
}

HeadLayout detail::load_lm_style_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w,
                                      const std::string& base_prefix) {
  const int64_t H = c.hidden_size;
  if (kind == HeadKind::QuestionAnswering) return load_qa_outputs_head(w, H);  // RobertaForQuestionAnswering
  HeadLayout head;
  head.input = HeadInput::FirstToken;  // features[:, 0, :], the <s> token
  if (kind == HeadKind::SequenceClassification) {
    HeadStage dense, out_proj;
    dense.linear = nn::Linear::load(nn::Vars(w).prefix("classifier.dense"), H, H);
    dense.tanh = true;
    out_proj.linear = detail::load_head_linear(w, {"classifier.out_proj"}, H);
    head.stages = {std::move(dense), std::move(out_proj)};
  } else if (kind == HeadKind::TokenClassification) {
    HeadStage classifier;
    classifier.linear = detail::load_head_linear(w, {"classifier"}, H);
    head.stages = {std::move(classifier)};
  } else {
    HeadStage dense, decoder;
    dense.linear = nn::Linear::load(nn::Vars(w).prefix("lm_head.dense"), H, H);
    dense.act = ops::Activation::Gelu;  // RobertaLMHead / MPNetLMHead call gelu whatever hidden_act says
    dense.norm = detail::load_head_layer_norm(w, "lm_head.layer_norm", H, (float)c.layer_norm_eps);
    decoder.linear = detail::load_vocab_decoder(
        w, {"lm_head.decoder.weight"}, {base_prefix + "embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"},
        {"lm_head.bias", "lm_head.decoder.bias"}, c.vocab_size, H, &head.tied_decoder);
    head.stages = {std::move(dense), std::move(decoder)};
  }
  return head;
}

FamilyHeads roberta_heads() { return {detect_roberta_head, load_roberta_head}; }

// modeling_roberta.py: RobertaEmbeddings (positions from padding_idx) in front of BERT's encoder and pooler.
detail::BertVariant detail::roberta_variant() {
  detail::BertVariant variant;
  variant.aliases = roberta_aliases;
  variant.prefix = "roberta.";
  variant.positions_from_padding = true;
  return variant;
}

std::unique_ptr<EncoderModel> make_roberta(const EncoderConfig& config, WeightSource& weights, ops::ComputeType dtype) {
  return detail::make_bert_variant(config, weights, dtype, detail::roberta_variant());
}

// ---------------------------------------------------------------- the family's entry (models/registry.h)

// modeling_roberta.py (XLM-R and CamemBERT alike): RobertaClassificationHead on <s>, RobertaLMHead.
TrainingHeadSpec detail::roberta_training_head(const EncoderConfig& c, HeadKind kind, int64_t C) {
  if (kind == HeadKind::TokenClassification) return token_classifier_head(C);
  if (kind == HeadKind::SequenceClassification) {
    TrainingHeadSpec h;
    h.stages = {head_stage("classifier.dense", c.hidden_size, true), head_stage("classifier.out_proj", C, true)};
    h.stages[0].tanh = true;
    return h;
  }
  // RobertaLMHead calls gelu whatever hidden_act says.
  return lm_head("lm_head.dense", ops::Activation::Gelu, "lm_head.layer_norm", "lm_head.decoder", "lm_head.bias",
                 {"lm_head.decoder.bias"}, c);
}

// RoBERTa, XLM-RoBERTa and CamemBERT: one architecture under three model types.
const ModelFamily& roberta_family() {
  static const ModelFamily f{
      .name = "roberta",
      .model_types = {{"roberta", "Roberta"}, {"xlm-roberta", "XLMRoberta"}, {"camembert", "Camembert"}},
      .default_pad_token_id = 1,  // RobertaConfig's (<pad> in fairseq's dictionary)
      .make_encoder = make_roberta,
      // Positions start after pad_token_id.
      .max_input_tokens = [](const EncoderConfig& c) { return c.max_position_embeddings - c.pad_token_id - 1; },
      .heads = roberta_heads,
      .trainable_body =
          [](nn::ParamStore& s, const EncoderConfig& c, const TrainableEncoderOptions& o) {
            return detail::bert_variant_body(s, c, o, detail::roberta_variant());
          },
      .training_head = detail::roberta_training_head,
      .training_dropouts = detail::bert_dropouts,
      .config_keys = detail::encoder_config_keys({
          {"pad_token_id", "1", ConfigKeyRole::Value},  // positions count from pad_token_id + 1
          {"hidden_dropout_prob", "0.1", ConfigKeyRole::Training},
          {"attention_probs_dropout_prob", "0.1", ConfigKeyRole::Training},
          {"classifier_dropout", "(hidden_dropout_prob)", ConfigKeyRole::Training},
      }),
  };
  return f;
}

}  // namespace tfm
