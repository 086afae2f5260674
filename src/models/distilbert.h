// Hugging Face DistilBertModel (transformers/models/distilbert/modeling_distilbert.py): BERT's post-LN layers under
// their own names, word + position embeddings (no token types), every LayerNorm at eps 1e-12, no pooler.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/bert.h"
#include "models/encoder.h"
#include "models/head_layout.h"

namespace tfm {

// DistilBertConfig's keys as EncoderConfig reads them: dim -> hidden_size, n_layers -> num_hidden_layers,
// n_heads -> num_attention_heads, hidden_dim -> intermediate_size, activation -> hidden_act ("gelu" or "relu"),
// layer_norm_eps 1e-12 and type_vocab_size 1 (none in the model); vocab_size, max_position_embeddings and
// pad_token_id (default 0) as they are. sinusoidal_pos_embds true is accepted: create_sinusoidal_embeddings fills
// the position_embeddings weight, which save_pretrained stores like any other, so the table is read from the
// file. Throws std::runtime_error naming `file` and the DistilBERT key that is missing or malformed.
nlohmann::json distilbert_config_as_bert(const nlohmann::json& j, const std::string& file);

// Weight names as DistilBertModel.state_dict() writes them: embeddings.{word_embeddings, position_embeddings,
// LayerNorm}, transformer.layer.N.attention.{q_lin, k_lin, v_lin, out_lin} (q/k/v packed into one GEMM),
// .sa_layer_norm, .ffn.{lin1, lin2}, .output_layer_norm; also with the "distilbert." prefix of DistilBertFor*
// checkpoints. Other tensors (the heads: pre_classifier, classifier, vocab_*) are ignored. Position ids
// 0..L-1; token_type_ids are ignored (DistilBertModel.forward takes none). EncoderOutput::pooler_output stays
// undefined. Throws std::runtime_error on a missing tensor or a shape mismatch; dtype and prequantised int8
// weights as for make_bert.
std::unique_ptr<EncoderModel> make_distilbert(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype = ops::ComputeType::F32);

// modeling_distilbert.py heads: DistilBertForSequenceClassification (h[:, 0] -> pre_classifier -> ReLU ->
// classifier), DistilBertForTokenClassification (classifier per token), DistilBertForMaskedLM (vocab_transform ->
// activation -> vocab_layer_norm (eps 1e-12) -> vocab_projector, its weight tied to the word embeddings unless
// stored).
FamilyHeads distilbert_heads();

namespace detail {
// DistilBERT's detail::BertVariant (models/bert.h): its layer names, no token types, names with or without
// "distilbert."; the position table frozen in training when config.json has sinusoidal_pos_embds true.
BertVariant distilbert_variant(const EncoderConfig& config);
}  // namespace detail

}  // namespace tfm
