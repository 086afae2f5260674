// Hugging Face MPNetModel (modeling_mpnet.py): BERT's post-LN layers under MPNet's names, RoBERTa's position ids,
// no token types, and a relative position bias shared by every layer and added to the attention scores.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/bert.h"
#include "models/encoder.h"
#include "models/head_layout.h"

namespace tfm {
// Weight names as MPNetModel.state_dict() writes them, also with the "mpnet." prefix of MPNetFor* checkpoints:
//   embeddings.{word_embeddings,position_embeddings,LayerNorm}.*
//   encoder.layer.N.attention.attn.{q,k,v,o}.*, encoder.layer.N.attention.LayerNorm.*,
//   encoder.layer.N.intermediate.dense.*, encoder.layer.N.output.{dense,LayerNorm}.*
//   encoder.relative_attention_bias.weight [relative_attention_num_buckets, num_attention_heads]
//   pooler.dense.* (optional: MPNetForMaskedLM and sentence-transformers folders may have none)
// Other tensors ("lm_head.*", "classifier.*", the int64 "embeddings.position_ids" buffer) are ignored, so a folder
// whose config names MPNetForMaskedLM but holds only the base model (all-mpnet-base-v2) loads as the base model.
// As modeling_mpnet.py:
//  - position ids from padding_idx 1 (MPNetEmbeddings hard-codes it, whatever config.pad_token_id says): a token
//    whose id is not 1 gets 1 + (number of non-pad tokens up to and including it), a pad token 1;
//  - token_type_ids are ignored (MPNet has no token type embeddings);
//  - every layer adds bias[h, i, j] = relative_attention_bias[bucket(j - i), h] to scores / sqrt(head_dim),
//    with MPNetEncoder.compute_position_bias's 32 buckets and max_distance 128 (relative_position_bucket).
// Throws std::runtime_error on a missing tensor, a shape mismatch, or relative_attention_num_buckets < 32 (the
// bucket function indexes 32 rows); forward throws std::invalid_argument when 1 + seq_len reaches
// max_position_embeddings (all-mpnet-base-v2: at most 512 tokens of its 514 positions).
// dtype and prequantised int8 weights behave as for make_bert.
std::unique_ptr<EncoderModel> make_mpnet(const EncoderConfig& config, WeightSource& weights,
                                         ops::ComputeType dtype = ops::ComputeType::F32);

// modeling_mpnet.py heads, RoBERTa's layouts under MPNet's names (bodies "mpnet."-prefixed, no pooler):
// MPNetForSequenceClassification's MPNetClassificationHead on <s> (h[:, 0] -> classifier.dense -> tanh ->
// classifier.out_proj), MPNetForTokenClassification (classifier per token), MPNetForMaskedLM's MPNetLMHead
// (lm_head.dense -> gelu -> lm_head.layer_norm (layer_norm_eps) -> decoder tied to the word embeddings unless
// "lm_head.decoder.weight" is stored, + lm_head.bias).
FamilyHeads mpnet_heads();

namespace detail {
// modeling_mpnet.py MPNetEncoder.relative_position_bucket for relative_position = key - query: bidirectional
// buckets (the upper half for keys before the query), exact below num_buckets / 4, then logarithmic up to
// max_distance, computed in float32 as PyTorch does. Returns a bucket in [0, num_buckets).
int64_t mpnet_relative_position_bucket(int64_t relative_position, int64_t num_buckets = 32,
                                       int64_t max_distance = 128);
// MPNetEncoder.compute_position_bias (its default 32 buckets, max_distance 128): bias [heads, L, L] written,
// bias[h, i, j] = table[bucket(j - i), h] for table = relative_attention_bias.weight [num_buckets, heads].
void mpnet_position_bias(float* bias, const float* table, int64_t heads, int64_t L);
// Its backward (the nn.Embedding lookup's): dtable [num_buckets, heads] += for each (h, i, j) dbias[h, i, j] at
// row bucket(j - i), column h. dbias [heads, L, L].
void mpnet_position_bias_backward(float* dtable, const float* dbias, int64_t heads, int64_t L);
// What make_mpnet and the trainable body check of config.json: throws std::runtime_error for
// relative_attention_num_buckets < 32 or a max_position_embeddings that leaves no position past padding_idx 1.
void check_mpnet_config(const EncoderConfig& config);
// MPNetModel as a BertVariant: BERT's post-LN layers under MPNet's names (attention.attn.{q,k,v,o},
// attention.LayerNorm, intermediate.dense, output.{dense,LayerNorm}), positions from padding_idx 1, no token types,
// the relative position bias; names with or without "mpnet." (MPNetFor*'s base_model_prefix), the prefix
// BertTrainable registers them under.
BertVariant mpnet_variant();
}  // namespace detail
}  // namespace tfm
