// Hugging Face BertModel (post-LN, as the BERT TensorFlow reference code of document 003).
#pragma once
#include <memory>

#include "models/encoder.h"
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

namespace detail {
// One BertLayer under `vb` ("encoder.layer.N"): attention.self.{query,key,value} (packed into one GEMM),
// attention.output.{dense,LayerNorm}, intermediate.dense, output.{dense,LayerNorm}; post-LN. Shared by the
// families that keep BERT's layer (RoBERTa, XLM-RoBERTa, CamemBERT). Throws what nn::Vars::get throws.
nn::EncoderBlock bert_layer(const nn::Vars& vb, const EncoderConfig& c, ops::ComputeType ct);
}  // namespace detail
}  // namespace tfm
