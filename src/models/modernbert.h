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
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/encoder.h"
#include "nn/layers.h"
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

// The task heads of ModernBertForMaskedLM, ModernBertForSequenceClassification and
// ModernBertForTokenClassification on a ModernBertModel's last_hidden_state:
//   head(x) = head.norm(act(head.dense(x)))                     (ModernBertPredictionHead; act = classifier_activation)
//   MaskedLM:               logits = decoder(head(h))           [B, L, vocab_size]
//   TokenClassification:    logits = classifier(head(h))        [B, L, num_labels]
//   SequenceClassification: logits = classifier(head(pool(h)))  [B, num_labels]; pool per classifier_pooling:
//                           "cls" h[:, 0], "mean" the attention_mask-weighted mean over tokens.
class ModernBertHead {
 public:
  enum class Kind { MaskedLM, SequenceClassification, TokenClassification };
  // Tensors (top-level names, as the For* checkpoints save them): "head.dense.weight" [H, H] (+ ".bias" when
  // classifier_bias), "head.norm.weight" [H] (+ ".bias" when norm_bias); MaskedLM: "decoder.weight" [vocab, H],
  // or, when absent (tie_word_embeddings: the saved file omits it), the word embeddings
  // "[model.]embeddings.tok_embeddings.weight", and "decoder.bias" [vocab] when decoder_bias; classification:
  // "classifier.weight" [num_labels, H] and "classifier.bias" [num_labels]. Linear weights packed for `dtype`.
  // Throws std::runtime_error on a missing tensor or a shape mismatch.
  static ModernBertHead load(const EncoderConfig& config, WeightSource& weights, Kind kind, int64_t num_labels,
                             ops::ComputeType dtype = ops::ComputeType::F32);
  // MaskedLM or TokenClassification: last_hidden_state [B, L, H] -> [B, L, vocab_size or num_labels].
  Tensor token_logits(const Tensor& last_hidden_state) const;
  // SequenceClassification: last_hidden_state [B, L, H], attention_mask [B, L] int64 or undefined (all ones)
  // -> [B, num_labels].
  Tensor sequence_logits(const Tensor& last_hidden_state, const Tensor& attention_mask) const;
  Kind kind() const { return kind_; }

 private:
  Tensor apply(const float* x, int64_t N, const Shape& out_shape) const;
  Kind kind_ = Kind::MaskedLM;
  int64_t hidden_size_ = 0, out_features_ = 0;
  std::string pooling_ = "cls";
  ops::Activation act_ = ops::Activation::Gelu;
  nn::Linear dense_, out_;
  nn::LayerNorm norm_;
};

}  // namespace tfm
