// Hugging Face BertModel (post-LN, as the BERT TensorFlow reference code of document 003).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "models/encoder.h"
#include "models/head_layout.h"
#include "models/trainable_encoder.h"
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
// DistilBERT): the inference model (make_bert_variant) and the trainable one (BertTrainable) read it alike.
struct BertVariant {
  // The names to try, in order, after a tensor's own name (the "bert." prefix and LayerNorm.gamma/beta when null).
  std::vector<std::string> (*aliases)(const std::string& name) = nullptr;
  // The body's prefix in the family's *For* checkpoints (base_model_prefix + "."): "bert.", "roberta.",
  // "distilbert."; BertTrainable registers its parameters under it.
  const char* prefix = "bert.";
  // Where the layers are ("encoder.layer" -> "encoder.layer.N") and how one is read from its prefix (null: BERT's
  // BertLayer names). trainable: every Linear a parameter of vb's ParamStore, query, key and value apart (as
  // training's MultiHeadAttention::forward takes them); otherwise packed for inference in `ct`.
  const char* layers = "encoder.layer";
  nn::EncoderBlock (*layer)(const nn::Vars& vb, const EncoderConfig& config, ops::ComputeType ct,
                            bool trainable) = nullptr;
  // false: no embeddings.token_type_embeddings (DistilBERT); forward then ignores token_type_ids.
  bool token_type_embeddings = true;
  // false: position ids 0..L-1 (BERT). true: modeling_roberta.py create_position_ids_from_input_ids (a non-pad
  // token gets pad_token_id + its count of non-pad tokens so far, a pad token pad_token_id); the constructor
  // throws std::runtime_error for a pad_token_id outside [0, max_position_embeddings), forward throws
  // std::invalid_argument when pad_token_id + seq_len reaches max_position_embeddings.
  bool positions_from_padding = false;
  // The padding index of positions_from_padding: -1 = config.pad_token_id (RoBERTa); MPNet's MPNetEmbeddings
  // hard-codes 1 (called "padding_idx" in messages).
  int64_t padding_idx = -1;
  // true: MPNet's relative position bias (models/mpnet.h): encoder.relative_attention_bias.weight
  // [relative_attention_num_buckets, num_attention_heads], one [heads, L, L] table from
  // detail::mpnet_position_bias added to every layer's attention scores; trained (the gradient of the table is the
  // scatter-add over buckets of every layer's score-bias gradient).
  bool relative_attention_bias = false;
  // false: the position table is a constant in training (DistilBERT with sinusoidal_pos_embds:
  // create_sinusoidal_embeddings sets requires_grad False): BertTrainable gives it no gradient and lists it in
  // frozen_names(), which the fine-tuning optimizer leaves as loaded.
  bool trainable_position_embeddings = true;
  // true: ELECTRA's embeddings (modeling_electra.py ElectraModel): the tables and their LayerNorm are
  // embedding_size wide (config "embedding_size", default 128 as ElectraConfig's), and when embedding_size differs from
  // hidden_size "embeddings_project" [hidden_size, embedding_size] (with bias) maps the normed embeddings to the
  // layers' width (after the embeddings' dropout in training); hidden_states[0] is the projected output.
  bool embeddings_project = false;
};
// The width of the variant's embedding tables: config "embedding_size" for embeddings_project variants (absent:
// 128, ElectraConfig's default), else hidden_size. Throws std::runtime_error naming config.source when it is not positive
// or above 2^14.
int64_t embedding_size(const EncoderConfig& config, const BertVariant& variant);
// create_position_ids_from_input_ids(ids [B, L], padding_idx) -> [B * L] (RoBERTa: padding_idx = pad_token_id;
// MPNet: 1). Throws std::invalid_argument when padding_idx + L reaches max_position_embeddings (the message names
// the padding index as `pad_name` and says how far to truncate).
std::vector<int64_t> position_ids_from_padding(const EncoderConfig& config, const int64_t* ids, int64_t B, int64_t L,
                                               int64_t padding_idx, const char* pad_name = "pad_token_id");
// The Linear and LayerNorm names of one post-LN encoder layer, relative to the layer's prefix.
struct PostLnLayerNames {
  const char *query, *key, *value, *output, *norm1, *linear1, *linear2, *norm2;
};
// One post-LN layer (BertLayer, DistilBERT's TransformerBlock) under `vb` with `names`: hidden_act, LayerNorm
// `eps`; trainable as BertVariant::layer says.
nn::EncoderBlock post_ln_layer(const nn::Vars& vb, const EncoderConfig& config, ops::ComputeType ct, bool trainable,
                               const PostLnLayerNames& names, float eps);
// make_bert with `variant`'s names and position ids.
std::unique_ptr<EncoderModel> make_bert_variant(const EncoderConfig& config, WeightSource& weights,
                                                ops::ComputeType dtype, const BertVariant& variant);
// The trainable body of `variant` (BertTrainable), its parameters under variant.prefix, or under none when
// options.bare.
std::unique_ptr<TrainableEncoder> bert_variant_body(nn::ParamStore& store, const EncoderConfig& config,
                                                    const TrainableEncoderOptions& options, BertVariant variant);
}  // namespace detail

// BertModel for training (fine-tuning), and the families of detail::BertVariant (RobertaModel, XLMRobertaModel,
// CamembertModel, DistilBertModel, MPNetModel): make_bert's composition (the same layer readers) with every tensor
// a trainable entry of an nn::ParamStore, named as the family's *For* checkpoints name it: the prefix ("bert.",
// "roberta.", "distilbert.", "mpnet.") then the base model's state_dict name (e.g.
// "roberta.encoder.layer.0.attention.self.query.weight", "distilbert.transformer.layer.0.attention.q_lin.weight",
// "mpnet.encoder.relative_attention_bias.weight"), so that the store saves as a Hugging Face checkpoint. Forward
// and backward match the modeling file's base model in training mode: dropout p (nn::Context::dropout: HF
// hidden_dropout_prob; DistilBERT's dropout) after the embeddings' LayerNorm and on each sublayer's output before
// its residual LayerNorm (DistilBERT: the feed-forward's only), and nn::Context::attention_p() on the attention
// probabilities (attention_probs_dropout_prob; DistilBERT's attention_dropout). Position ids, token types and MPNet's relative position bias as the variant says.
class BertTrainable final : public TrainableEncoder {
 public:
  // BERT, its parameters under `prefix` ("bert.", or "" for a bare BertModel folder).
  BertTrainable(nn::ParamStore& store, const EncoderConfig& config, bool pooler, const std::string& prefix = "bert.");
  // A family of `variant`, its parameters under variant.prefix. Registers the parameters in `store` (finalize
  // the store after every module has registered, then load()). Throws std::runtime_error for a pad_token_id
  // outside [0, max_position_embeddings) when positions come from padding.
  // first_token_only: TrainableEncoderOptions::first_token_only (honoured by every variant; MPNet's last layer reads
  // row 0 of its position bias).
  BertTrainable(nn::ParamStore& store, const EncoderConfig& config, const detail::BertVariant& variant, bool pooler,
                bool first_token_only = false);
  // Copies every parameter from `weights`, names with or without the prefix (and the variant's aliases; BERT's:
  // LayerNorm.gamma/beta) accepted, as make_bert / make_bert_variant read them. Throws std::runtime_error naming
  // a missing tensor or a wrong shape.
  void load(nn::ParamStore& store, WeightSource& weights) const override;
  // Saving forward. input_ids, token_type_ids (null: all 0; ignored without token type embeddings): [B, L];
  // key_mask [B, L] (1 real, 0 padding; null: none). Throws std::invalid_argument for ids or types out of range,
  // or a sequence longer than the position table allows.
  void forward(const nn::Context& ctx, const int64_t* input_ids, const int64_t* token_type_ids, const float* key_mask,
               int64_t B, int64_t L) override;
  const float* last_hidden_state() const override;  // [B, L, H] of the last forward ([B, 1, H]: first_token_only)
  bool first_token_only() const override { return first_token_only_ && !layers_.empty(); }
  // [B, H] = tanh(pooler.dense(h[:, 0])); null without a pooler.
  const float* pooler_output() const override { return pooler_.weight.defined() ? pooled_.data() : nullptr; }
  // Gradients of the last forward's outputs: dlast (last_hidden_state's shape) and dpooled [B, H], each may be
  // null. Parameter gradients are added to the store's.
  void backward(const float* dlast, const float* dpooled) override;
  const EncoderConfig& config() const override { return config_; }
  // The compute type of every Linear's training products (query, key, value, attention output, intermediate,
  // output, pooler): F32, or BF16 (bf16 operands, fp32 accumulation; the parameters stay fp32 master weights).
  void set_precision(ops::ComputeType precision) override;
  // The store names this module registered (prefix included).
  const std::vector<std::string>& names() const override { return names_; }
  // The registered names that get no gradient (DistilBERT's sinusoidal position table); empty otherwise.
  const std::vector<std::string>& frozen_names() const override { return frozen_; }
  // The prefix of the registered names ("bert.", "roberta.", "distilbert.", or "").
  const std::string& prefix() const override { return prefix_; }
  std::string word_embeddings_name() const override { return prefix_ + "embeddings.word_embeddings.weight"; }

 private:
  EncoderConfig config_;
  detail::BertVariant variant_;
  std::string prefix_;
  std::vector<std::string> names_, frozen_;
  nn::Embeddings emb_;  // word, position, token type, LayerNorm, dropout
  nn::Param rel_bias_;
  std::vector<nn::EncoderBlock> layers_;
  nn::Linear pooler_;
  // Saved by forward.
  int64_t B_ = 0, L_ = 0;
  std::vector<int64_t> ids_, types_, positions_;
  std::vector<float> key_mask_, cls_, pooled_, dx_, tmp_;
  std::vector<float> score_bias_, dscore_bias_;  // [heads, L, L]: MPNet's position bias and its gradient
  ops::AttentionMask mask_;
  bool first_token_only_ = false;
};
}  // namespace tfm
