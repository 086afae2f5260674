// DebertaV2Model (model_type "deberta-v2": DeBERTa-v2 and DeBERTa-v3, microsoft/deberta-v3-* and their NLI,
// cross-encoder and NER fine-tunes; transformers' modeling_deberta_v2.py): a post-LN BERT whose attention adds
// disentangled content-to-position and position-to-content terms over log-bucketed relative positions
// (nn/disentangled_attention.h), without absolute position embeddings in v3.
//
//   x = LayerNorm(embed_proj(word_embeddings[input_ids] (+ position_embeddings[l] when position_biased_input)
//                            (+ token_type_embeddings[token_type_ids] when type_vocab_size > 0))) * attention_mask
//   rel = encoder.LayerNorm(encoder.rel_embeddings) (norm_rel_ebd "layer_norm"; else as stored)
//   layer: a = LN(x + dense(softmax(q k^T / sqrt(head_dim * scale_factor) + c2p + p2c) v)),  x = LN(a + ffn(a))
#pragma once
#include <memory>

#include "models/encoder.h"

namespace tfm {

// DebertaV2Config's keys beyond BERT's, read from EncoderConfig::json (defaults: DebertaV2Config's).
struct DebertaV2Config {
  int64_t embedding_size = 0;          // embedding_size (default hidden_size); != hidden_size: embed_proj [H, E]
  bool position_biased_input = true;   // absolute position embeddings added (v3: false)
  bool token_types = false;            // type_vocab_size > 0 (v3: 0)
  bool relative_attention = false;
  int64_t position_buckets = -1;       // > 0: log buckets (v3: 256)
  int64_t max_relative_positions = 0;  // < 1 in the file: max_position_embeddings
  int64_t span = 0;                    // position_buckets when > 0, else max_relative_positions
  bool c2p = false, p2c = false;       // pos_att_type (a list, or the "p2c|c2p" string form)
  bool share_att_key = false;          // pos_key / pos_query from key_proj / query_proj (v3), else pos_*_proj
  bool norm_rel_ebd = false;           // norm_rel_ebd has "layer_norm": rel_embeddings through encoder.LayerNorm
  ops::Activation pooler_act = ops::Activation::Gelu;  // pooler_hidden_act (the ContextPooler's)

  // Throws std::runtime_error naming c.source and the key for what this implementation does not run: a ConvLayer
  // (conv_kernel_size > 0, DeBERTa-v2 xlarge), attention_head_size other than hidden_size / heads, pos_att_type
  // entries other than c2p / p2c, norm_rel_ebd other than none / layer_norm, pooler_hidden_size other than
  // hidden_size, a non-positive span.
  static DebertaV2Config from(const EncoderConfig& c);
};

// DebertaV2Config's defaults for the keys BERT's reader requires, and type_vocab_size 0 read as 1 (no table:
// DebertaV2Config::token_types false).
nlohmann::json deberta_v2_config_as_bert(const nlohmann::json& config, const std::string& file);

// Weight names as DebertaV2Model.state_dict() writes them ("embeddings.word_embeddings.weight",
// "encoder.rel_embeddings.weight", "encoder.LayerNorm.*", "encoder.layer.N.attention.self.{query,key,value}_proj.*",
// "...pos_key_proj / pos_query_proj" when share_att_key is false, "encoder.layer.N.attention.output.{dense,LayerNorm}",
// "intermediate.dense", "output.{dense,LayerNorm}"), also with the "deberta." prefix of DebertaV2For* checkpoints.
// The pos_key / pos_query of every layer are computed at load from the packed projections. Inference only.
std::unique_ptr<EncoderModel> make_deberta_v2(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype = ops::ComputeType::F32);

}  // namespace tfm
