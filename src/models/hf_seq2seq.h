// Hugging Face translation checkpoints as Seq2SeqModel compositions of the same nn/ blocks:
//  - MarianMTModel (model_type "marian", OPUS-MT; transformers' modeling_marian.py): post-LN blocks (norm_first
//    false), attention with biases (q_proj, k_proj, v_proj, out_proj), activation_function (swish = SiLU),
//    embeddings * sqrt(d_model) when scale_embedding, sinusoidal positions from 0 (MarianSinusoidalPositionalEmbedding:
//    P[pos, j] = sin(pos / 10000^(2j/d)) for j < d/2 and P[pos, d/2 + j] = cos(pos / 10000^(2j/d)), computed, or
//    read from model.encoder.embed_positions.weight when saved), logits = x shared^T + final_logits_bias.
//  - M2M100ForConditionalGeneration (model_type "m2m_100": M2M100 and NLLB; modeling_m2m_100.py): pre-LN blocks
//    with model.encoder.layer_norm / model.decoder.layer_norm after the stacks, ReLU, M2M100's sinusoidal table
//    (half = d/2, f_i = exp(-i log(10000) / (half - 1)), [sin(p f) | cos(p f)]) at positions pad_token_id + 1 + t
//    (create_position_ids_from_input_ids for unpadded tokens), logits = x shared^T.
// Tensor names are transformers' (model.shared.weight, model.encoder.layers.N.self_attn.q_proj.weight, ...).
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/seq2seq.h"

namespace tfm {

// Whether config.json's model_type is one of these ("marian", "m2m_100").
bool is_hf_seq2seq_type(const std::string& model_type);
// The Seq2SeqConfig of a Hugging Face config.json (d_model, encoder_layers, decoder_layers, encoder_attention_heads,
// encoder_ffn_dim, activation_function, scale_embedding, max_position_embeddings, vocab_size, decoder_vocab_size,
// share_encoder_decoder_embeddings, pad_token_id, normalize_before), absent keys at MarianConfig's /
// M2M100Config's defaults (activation_function gelu / relu, scale_embedding false / true; the families' tables in
// ModelFamily::config_keys list them). Throws std::runtime_error naming `file` and the key for a missing or invalid
// one, and for options these families do not have here (encoder and decoder sizes that differ, normalize_before on
// Marian, a decoder_vocab_size other than vocab_size with shared embeddings).
Seq2SeqConfig hf_seq2seq_config(const nlohmann::json& config, const std::string& file);

// The modules of model.config() under transformers' names, registered in a parameter store or read from a file
// by `vb` (Seq2SeqModel's constructors call it for family != "d2l"; the caller finalizes a store). Over a file,
// Linear weights stored prequantised by `tfm convert --dtype int8` (I8 + "<name>_scale") are dequantised
// (w = q * scale of the row), as Seq2SeqModel::load does.
void build_hf_seq2seq(Seq2SeqModel& model, const nn::Vars& vb);
// Other names a tied matrix is saved under (model.shared.weight: model.encoder.embed_tokens.weight, ...).
std::vector<std::string> hf_seq2seq_aliases(const std::string& name);
// After the parameters: the optional tensors of the file (the tied copies, a stored sinusoidal table, which must
// have shape [max_position_embeddings, d_model] and then replaces the computed one) are added to `seen`.
void hf_seq2seq_load_extras(Seq2SeqModel& model, const SafeTensors& st, const std::string& path,
                            std::set<std::string>& seen);

}  // namespace tfm
