// The pre-LN encoder of document 000 (TutorialTransformerEncoder in reference_modules.py):
//   x = LayerNorm_1e-12(token_emb + position_emb)
//   per layer: x = x + MHA(LN1(x)); x = x + FFN(LN2(x)), LN eps 1e-5, FFN = linear2(GELU(linear1)); no final LN.
#pragma once
#include <memory>

#include "models/encoder.h"

namespace tfm {
// Weight names are that module's state_dict names: "embeddings.token_embeddings.weight",
// "embeddings.position_embeddings.weight", "embeddings.layer_norm.{weight,bias}", "layers.N.layer_norm_{1,2}.*",
// "layers.N.attention.heads.H.{q,k,v}.{weight,bias}" (one Linear(hidden_size, head_dim) per head),
// "layers.N.attention.output_linear.*", "layers.N.feed_forward.linear{1,2}.*".
// attention_mask is applied as a key padding mask (the module's mask argument of shape [B, 1, L]).
// Linear weights are packed for `dtype` at load, the per-head q/k/v projections stacked into one GEMM.
std::unique_ptr<EncoderModel> make_transformer_encoder(const EncoderConfig& config, WeightSource& weights,
                                                      ops::ComputeType dtype = ops::ComputeType::F32);
}  // namespace tfm
