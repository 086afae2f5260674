// Hugging Face BertModel (post-LN, as the BERT TensorFlow reference code of document 003).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/encoder.h"
#include "models/head_layout.h"
#include "nn/params.h"
#include "nn/transformer_block.h"

namespace tfm {
// Weight names as BertModel.state_dict() writes them ("embeddings.word_embeddings.weight",
// "encoder.layer.N.attention.self.query.weight", ..., "pooler.dense.bias"); also accepted with the "bert." prefix
// and with the old "LayerNorm.gamma"/"LayerNorm.beta" names of pre-training checkpoints. Other tensors (the
// "cls.*" heads) are ignored. The pooler is optional (BertForMaskedLM and BertForTokenClassification files have
// none): without "pooler.dense.*" the model loads and EncoderOutput::pooler_output stays undefined.
// Throws std::runtime_error on a missing tensor or a shape mismatch.
// Linear weights are packed for `dtype` at load (query/key/value as one GEMM) and their file pages released;
// embeddings, LayerNorm, softmax and residuals stay fp32. Weights stored prequantised by `tfm convert --dtype
// int8` (I8 + "<name>_scale") are used as stored, in int8, whatever `dtype` says.
std::unique_ptr<EncoderModel> make_bert(const EncoderConfig& config, WeightSource& weights,
                                        ops::ComputeType dtype = ops::ComputeType::F32);

// modeling_bert.py heads: BertForSequenceClassification (classifier(pooler_output); needs the pooler),
// BertForTokenClassification (classifier per token), BertForMaskedLM / BertForPreTraining
// (cls.predictions.transform.{dense, hidden_act, LayerNorm}, decoder tied to the word embeddings unless stored,
// cls.predictions.bias). Tensor names as BertFor*.state_dict() writes them.
FamilyHeads bert_heads();

namespace detail {
// What a family built from BERT's embeddings and post-LN layers changes (RoBERTa, XLM-RoBERTa, CamemBERT,
// DistilBERT).
struct BertVariant {
  // The names to try, in order, after a tensor's own name (the "bert." prefix and LayerNorm.gamma/beta when null).
  std::vector<std::string> (*aliases)(const std::string& name) = nullptr;
  // Where the layers are ("encoder.layer" -> "encoder.layer.N") and how one is read from its prefix (null: BERT's
  // BertLayer names).
  const char* layers = "encoder.layer";
  nn::EncoderBlock (*layer)(const nn::Vars& vb, const EncoderConfig& config, ops::ComputeType ct) = nullptr;
  // false: no embeddings.token_type_embeddings (DistilBERT); forward then ignores token_type_ids.
  bool token_type_embeddings = true;
  // false: position ids 0..L-1 (BERT). true: modeling_roberta.py create_position_ids_from_input_ids (a non-pad
  // token gets pad_token_id + its count of non-pad tokens so far, a pad token pad_token_id); the constructor
  // throws std::runtime_error for a pad_token_id outside [0, max_position_embeddings), forward throws
  // std::invalid_argument when pad_token_id + seq_len reaches max_position_embeddings.
  bool positions_from_padding = false;
};
// make_bert with `variant`'s names and position ids.
std::unique_ptr<EncoderModel> make_bert_variant(const EncoderConfig& config, WeightSource& weights,
                                                ops::ComputeType dtype, const BertVariant& variant);
}  // namespace detail
}  // namespace tfm
