// Hugging Face RobertaModel, and XLMRobertaModel / CamembertModel (the same code under other names):
// BERT's post-LN layers with RoBERTa's position ids.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "models/bert.h"
#include "models/encoder.h"
#include "models/head_layout.h"
#include "models/registry.h"

namespace tfm {
// Weight names as RobertaModel.state_dict() writes them ("embeddings.word_embeddings.weight",
// "encoder.layer.N.attention.self.query.weight", ..., "pooler.dense.bias"), also with the "roberta." prefix of
// RobertaFor* / XLMRobertaFor* / CamembertFor* checkpoints. Other tensors ("lm_head.*", "classifier.*", the int64
// "embeddings.position_ids" buffer older versions saved) are ignored; the pooler is optional, as for BERT.
// Position ids follow modeling_roberta.py create_position_ids_from_input_ids: a token whose id is not
// config.pad_token_id gets pad_token_id + (number of non-pad tokens up to and including it); a pad token gets
// pad_token_id. token_type_ids default to 0 (type_vocab_size is 1 in these checkpoints).
// Throws std::runtime_error on a missing tensor, a shape mismatch, or a pad_token_id outside
// [0, max_position_embeddings); forward throws std::invalid_argument when pad_token_id + seq_len reaches
// max_position_embeddings (roberta-base: at most 512 tokens of its 514 positions).
// dtype and prequantised int8 weights behave as for make_bert.
std::unique_ptr<EncoderModel> make_roberta(const EncoderConfig& config, WeightSource& weights,
                                           ops::ComputeType dtype = ops::ComputeType::F32);

// modeling_roberta.py heads (also XLMRoberta*, Camembert*): RobertaForSequenceClassification's
// RobertaClassificationHead on <s> (h[:, 0] -> classifier.dense -> tanh -> classifier.out_proj; no pooler),
// RobertaForTokenClassification (classifier per token), RobertaForMaskedLM's RobertaLMHead (lm_head.dense ->
// gelu -> lm_head.layer_norm (layer_norm_eps) -> decoder tied to the word embeddings unless "lm_head.decoder.weight"
// is stored, + lm_head.bias).
FamilyHeads roberta_heads();

namespace detail {
// RoBERTa's detail::BertVariant (models/bert.h): BERT's layers, position ids from padding, names with or without
// "roberta." (also XLMRobertaModel's and CamembertModel's: base_model_prefix "roberta").
BertVariant roberta_variant();
// The heads RobertaFor* and MPNetFor* share (modeling_roberta.py / modeling_mpnet.py): sequence classification
// classifier.dense + tanh + classifier.out_proj on <s>; token classification classifier; masked LM lm_head.dense,
// gelu, lm_head.layer_norm, lm_head.decoder (tied to base_prefix + "embeddings.word_embeddings.weight", or the
// unprefixed name, unless stored) + lm_head.bias.
std::optional<HeadKind> detect_lm_style_head(const CheckpointWeights& w);
HeadLayout load_lm_style_head(HeadKind kind, const EncoderConfig& c, CheckpointWeights& w,
                              const std::string& base_prefix);
// RobertaFor*'s heads in training (MPNetFor*'s are the same, names included).
TrainingHeadSpec roberta_training_head(const EncoderConfig& c, HeadKind kind, int64_t C);
}  // namespace detail
}  // namespace tfm
