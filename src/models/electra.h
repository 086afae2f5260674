// Hugging Face ElectraModel (transformers/models/electra/modeling_electra.py; google/electra-*-discriminator and
// its fine-tunes): BERT's post-LN layers behind embeddings embedding_size wide, projected to hidden_size by
// embeddings_project when the two differ; no pooler.
#pragma once
#include <memory>

#include "models/bert.h"
#include "models/encoder.h"
#include "models/head_layout.h"

namespace tfm {
// Weight names as ElectraModel.state_dict() writes them ("embeddings.word_embeddings.weight" [vocab_size,
// embedding_size], "embeddings.LayerNorm.weight" [embedding_size], "embeddings_project.weight" [hidden_size,
// embedding_size], "encoder.layer.N.attention.self.query.weight", ...), also with the "electra." prefix of the
// ElectraFor* checkpoints. The heads of other tasks (ElectraForPreTraining's "discriminator_predictions.*", the
// generator's "generator_predictions.*" / "generator_lm_head.*", "classifier.*") are ignored here.
// Throws std::runtime_error on a missing tensor or a shape mismatch; dtype and prequantised int8 weights behave as
// for make_bert.
std::unique_ptr<EncoderModel> make_electra(const EncoderConfig& config, WeightSource& weights,
                                           ops::ComputeType dtype = ops::ComputeType::F32);

// modeling_electra.py heads: ElectraForSequenceClassification's ElectraClassificationHead on the first token
// (h[:, 0] -> classifier.dense -> gelu (exact, get_activation("gelu")) -> classifier.out_proj),
// ElectraForTokenClassification (classifier per token). Without "architectures", "classifier.out_proj.weight"
// means sequence classification and "classifier.weight" token classification.
FamilyHeads electra_heads();

namespace detail {
// ELECTRA's detail::BertVariant (models/bert.h): BERT's layers, embeddings_project, names with or without
// "electra." (ElectraPreTrainedModel.base_model_prefix).
BertVariant electra_variant();
}  // namespace detail
}  // namespace tfm
