// NomicBertModel (nomic-embed-text-v1 / v1.5, model_type "nomic_bert"; the remote code modeling_hf_nomic_bert.py):
// a post-LN BERT with rotary positions over a fraction of each head, a fused bias-free Wqkv, a gated (SwiGLU)
// feed-forward without biases, and token type embeddings; GPT-2 config key names.
//
//   x = emb_ln(word_embeddings[input_ids] + token_type_embeddings[token_type_ids])   (+ position_embeddings[l]
//                                                                                      when rotary_emb_fraction <= 0)
//   layer: x = norm1(x + out_proj(attention(rope(Wqkv(x)))))
//          x = norm2(x + fc2(fc11(x) * silu(fc12(x))))     (swiglu; geglu: gelu(fc12(x)); gelu: fc2(gelu(fc1(x))))
//
// Rotary: each head's first head_dim * rotary_emb_fraction columns, GPT-NeoX halves (rotary_emb_interleaved false),
// base rotary_emb_base, positions 0 .. L-1 of the padded row (each sentence's own on the unpadded path).
#pragma once
#include <memory>

#include "models/encoder.h"

namespace tfm {

// NomicBertConfig's keys beyond BERT's, read from EncoderConfig::json.
struct NomicBertConfig {
  double rotary_base = 10000.0;
  int64_t rotary_dim = 0;        // head_dim * rotary_emb_fraction; 0: learned absolute positions instead
  bool qkv_bias = true, fc1_bias = true, fc2_bias = true;
  bool gated = true;             // activation_function swiglu / geglu (NomciBertGatedMLP), else NomicBertMLP
  ops::Activation act = ops::Activation::Silu;
  bool token_types = true;       // type_vocab_size > 0

  // Reads activation_function, rotary_emb_fraction / _base / _interleaved, rotary_scaling_factor,
  // rotary_emb_scale_base, qkv_proj_bias, mlp_fc1_bias, mlp_fc2_bias, prenorm, causal, type_vocab_size. Throws
  // std::runtime_error naming c.source and the key for what this implementation does not run: interleaved rotary,
  // dynamic NTK scaling (rotary_scaling_factor), xPos (rotary_emb_scale_base), prenorm true, causal true, an odd
  // or too large rotary dimension, activation "glu", mixture-of-experts layers (moe_every_n_layers > 0).
  static NomicBertConfig from(const EncoderConfig& c);
};

// config.json's GPT-2 names as BERT's: n_embd -> hidden_size, n_head -> num_attention_heads, n_layer ->
// num_hidden_layers, n_inner -> intermediate_size (gated: rounded up to a multiple of 256 as NomciBertGatedMLP
// does; absent: 4 n_embd, gated int(8 n_embd / 3) rounded so), n_positions -> max_position_embeddings (default
// 1024), layer_norm_epsilon -> layer_norm_eps (default 1e-5), activation_function -> hidden_act (swiglu: silu,
// geglu: gelu), type_vocab_size 0 -> 1 (no table; NomicBertConfig::token_types false).
nlohmann::json nomic_bert_config_as_bert(const nlohmann::json& config, const std::string& file);

// Weight names as NomicBertModel.state_dict() writes them: "embeddings.word_embeddings.weight",
// "embeddings.token_type_embeddings.weight", "emb_ln.weight" / ".bias", "encoder.layers.N.attn.Wqkv.weight" [3H, H]
// (q | k | v rows), "encoder.layers.N.attn.out_proj.weight", "encoder.layers.N.norm1.*", "encoder.layers.N.mlp.fc11
// / fc12 / fc2.weight" (gated; else mlp.fc1 / fc2), "encoder.layers.N.norm2.*"; ".bias" where the config has biases;
// also with the "bert." prefix of NomicBertFor* checkpoints (their "cls.*" heads ignored). Linear weights packed for
// `dtype`; prequantised int8 used as stored. Throws std::runtime_error on a missing tensor or a shape mismatch.
std::unique_ptr<EncoderModel> make_nomic_bert(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype = ops::ComputeType::F32);

}  // namespace tfm
