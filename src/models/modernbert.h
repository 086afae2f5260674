// Hugging Face ModernBertModel (transformers/models/modernbert/modeling_modernbert.py): pre-LN layers without
// biases, rotary position embeddings, sliding-window local attention on all but every n-th layer, a GeGLU
// feed-forward, LayerNorms after the embeddings and after the last layer.
//
//   x = norm(tok_embeddings[input_ids])
//   layer i: x = x + Wo(attention_i(rope_i(Wqkv(attn_norm(x)))))     attn_norm: identity for layer 0
//            x = x + mlp.Wo(act(a) * g),  (a, g) = mlp.Wi(mlp_norm(x)) split in halves
//   last_hidden_state = final_norm(x)
//
// Layer i is global (full attention, rope theta global_rope_theta) when i % global_attn_every_n_layers == 0 (or
// config "layer_types"[i] == "full_attention"), else local: query t sees keys within local_attention // 2
// positions of it (rope theta local_rope_theta). Positions are 0 .. L-1 in every row, padding or not (the eager
// / SDPA path of Hugging Face, which pads rather than unpads). Memory is linear in L: local layers run the banded
// kernel (ops/local_attention.h), global layers the blocked online-softmax attention (ops/attention.h).
// The model is a composition of nn/ modules: nn::EncoderBlock per layer (pre-LN, rotary, window, GeGLU options),
// nn::encoder_stack_inference / encoder_stack_forward / encoder_stack_backward for the stack.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/encoder.h"
#include "models/head_layout.h"
#include "models/trainable_encoder.h"
#include "nn/layers.h"
#include "nn/params.h"
#include "nn/transformer_block.h"
#include "ops/activation.h"

namespace tfm {

// ModernBertConfig's keys beyond EncoderConfig's, read from EncoderConfig::json.
struct ModernBertConfig {
  double norm_eps = 1e-5;
  bool norm_bias = false, attention_bias = false, mlp_bias = false;
  ops::Activation hidden_activation = ops::Activation::Gelu;  // "gelu" is the exact (erf) GELU, as ACT2FN
  int64_t local_attention = 128;                              // the full window; each side sees half
  double global_rope_theta = 160000.0, local_rope_theta = 10000.0;
  std::vector<bool> global_layer;  // [num_hidden_layers]: full attention (true) or sliding window
  // Heads (ModernBertPredictionHead and the classifier).
  std::string classifier_pooling = "cls";  // "cls" or "mean"
  bool classifier_bias = false, decoder_bias = true;
  ops::Activation classifier_activation = ops::Activation::Gelu;

  // Reads config.json's ModernBERT keys: norm_eps, norm_bias, attention_bias, mlp_bias, hidden_activation,
  // local_attention, global_attn_every_n_layers (default 3) or layer_types, global_rope_theta / local_rope_theta
  // (defaults 160000 / 10000) or rope_parameters {"full_attention": {"rope_theta"}, "sliding_attention": ...}
  // (rope_type "default" only), classifier_pooling, classifier_bias, classifier_activation, decoder_bias.
  // Throws std::runtime_error naming c.source and the key on a bad value (odd head_dim, local_attention < 0,
  // a rope_type other than default, an unknown activation or pooling).
  static ModernBertConfig from(const EncoderConfig& c);
};

// Weight names as ModernBertModel.state_dict() writes them: "embeddings.tok_embeddings.weight",
// "embeddings.norm.weight", "layers.N.attn_norm.weight" (N >= 1), "layers.N.attn.Wqkv.weight" [3H, H] (q | k | v
// rows), "layers.N.attn.Wo.weight", "layers.N.mlp_norm.weight", "layers.N.mlp.Wi.weight" [2I, H] (input | gate),
// "layers.N.mlp.Wo.weight" [H, I], "final_norm.weight"; ".bias" tensors too when norm_bias / attention_bias /
// mlp_bias are true. Also accepted with the "model." prefix of ModernBertFor* checkpoints; their head tensors
// ("head.*", "decoder.*", "classifier.*") are ignored here. token_type_ids are ignored (ModernBERT has none).
// Linear weights are packed for `dtype`; prequantised int8 weights (tfm convert) are used as stored.
// Throws std::runtime_error on a missing tensor or a shape mismatch.
std::unique_ptr<EncoderModel> make_modernbert(const EncoderConfig& config, WeightSource& weights,
                                              ops::ComputeType dtype = ops::ComputeType::F32);

// modeling_modernbert.py heads, through models/head_layout.h: ModernBertPredictionHead
// head(x) = head.norm(act(head.dense(x))) (act = classifier_activation; dense bias only when classifier_bias, norm
// bias only when norm_bias), then
//   ModernBertForMaskedLM:               decoder(head(h)) per token; decoder tied to the word embeddings unless
//                                        "decoder.weight" is stored, + "decoder.bias" (when decoder_bias);
//   ModernBertForSequenceClassification: classifier(head(pool(h))), pool per classifier_pooling: "cls" h[:, 0],
//                                        "mean" the mean over attention_mask == 1;
//   ModernBertForTokenClassification:    classifier(head(h)) per token.
// Without "architectures", tensors decide: "classifier.weight" -> sequence classification, "decoder.bias" or
// "head.dense.weight" alone -> masked LM.
FamilyHeads modernbert_heads();

// ModernBertModel for training (fine-tuning): make_modernbert's composition (the same tensor reader) with every
// tensor a trainable entry of an nn::ParamStore, named as the ModernBertFor* checkpoints name them: "model." then
// ModernBertModel's state_dict name ("model.layers.1.attn.Wqkv.weight"), so that the store saves as a Hugging Face
// checkpoint (or under no prefix: a sentence-transformers Transformer module's ModernBertModel names).
// Forward and backward match modeling_modernbert.py's eager (padded) path in training mode: embeddings
// drop(norm(tok_embeddings[ids])); each layer's attention on the rotated q, k with the key padding mask, and on
// sliding layers also the band |i - j| <= local_attention // 2 (the banded kernel's backward: memory linear in L,
// except with attention_dropout > 0, which runs the dense kernel under a band mask); dropout on the attention
// probabilities and after Wo (attention_dropout), on act(input) * gate before mlp.Wo (mlp_dropout), after the
// embeddings' norm (embedding_dropout). Those p come from config.json (default 0), not from nn::Context::dropout:
// a forward drops when ctx.rng is set. The layers' norms, Linears and attention run in fp32 or in the precision
// set_precision gives the Linears. ModernBERT has no pooler: pooler_output() is null.
class ModernBertTrainable final : public TrainableEncoder {
 public:
  // Registers the parameters in `store` under `prefix` ("model.", or "" for a bare ModernBertModel; finalize the
  // store after every module has registered, then load()). Throws std::runtime_error on a bad config
  // (ModernBertConfig::from) or a dropout key outside [0, 1).
  ModernBertTrainable(nn::ParamStore& store, const EncoderConfig& config, const std::string& prefix = "model.");
  // Copies every parameter from `weights`, names with or without the prefix ("model.") accepted. Throws
  // std::runtime_error naming a missing tensor or a wrong shape.
  void load(nn::ParamStore& store, WeightSource& weights) const override;
  // Saving forward. input_ids [B, L] in [0, vocab_size) (std::invalid_argument otherwise); token_type_ids
  // ignored (ModernBERT has none); key_mask [B, L] (1 real, 0 padding; null: none).
  void forward(const nn::Context& ctx, const int64_t* input_ids, const int64_t* token_type_ids, const float* key_mask,
               int64_t B, int64_t L) override;
  const float* last_hidden_state() const override { return last_.data(); }  // [B, L, H] of the last forward
  const float* pooler_output() const override { return nullptr; }
  // dlast [B, L, H]: the gradient of last_hidden_state. dpooled must be null (ModernBERT has no pooler;
  // std::logic_error otherwise). Parameter gradients are added to the store's.
  void backward(const float* dlast, const float* dpooled) override;
  const EncoderConfig& config() const override { return config_; }
  const ModernBertConfig& modernbert_config() const { return m_; }
  // The compute type of every Linear's training products (Wqkv, Wo, Wi, mlp.Wo): F32 or BF16.
  void set_precision(ops::ComputeType precision) override;
  const std::vector<std::string>& names() const override { return names_; }          // registered names
  const std::vector<std::string>& frozen_names() const override { return frozen_; }  // empty: every tensor trains
  const std::string& prefix() const override { return prefix_; }                     // "model." or ""
  std::string word_embeddings_name() const override { return prefix_ + "embeddings.tok_embeddings.weight"; }

 private:
  EncoderConfig config_;
  ModernBertConfig m_;
  float attention_dropout_ = 0;
  std::string prefix_;
  std::vector<std::string> names_, frozen_;
  nn::Embeddings emb_;  // tok_embeddings, norm, embedding_dropout
  std::vector<nn::EncoderBlock> layers_;
  nn::LayerNorm final_norm_;
  int64_t B_ = 0, L_ = 0;
  std::vector<float> key_mask_, last_;
};

}  // namespace tfm
