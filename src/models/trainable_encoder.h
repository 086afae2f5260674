// The encoder body of fine-tuning (train/finetune.h, train/finetune_embed.h): a family's base model (BertModel,
// RobertaModel, DistilBertModel, ModernBertModel, ...) with every tensor a trainable entry of an nn::ParamStore,
// named as the family's Hugging Face checkpoints name it, and a saving forward with its backward. The trainers
// hold a body through this interface only; a family adds an implementation (its composition file, models/) and
// names it in its ModelFamily entry (models/registry.h trainable_body).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/encoder.h"
#include "nn/layers.h"
#include "nn/params.h"
#include "ops/gemm.h"

namespace tfm {

// What a trainer asks of a body when it builds one.
struct TrainableEncoderOptions {
  // Register BertModel's pooler (pooler.dense, tanh): BertForSequenceClassification reads pooler_output. Families
  // without a pooler ignore it.
  bool pooler = false;
  // The parameters under no prefix (a base-model folder, the Transformer module of a sentence-transformers folder:
  // "embeddings.word_embeddings.weight") instead of the *For* checkpoints' base_model_prefix ("bert.", "roberta.",
  // "model." ...).
  bool bare = false;
  // The trainer reads position 0 of the last layer only (sequence classification: pooler_output, or
  // last_hidden_state[:, 0]). A family that honours it (first_token_only() true) runs its last layer's queries,
  // attention output, LayerNorms and feed-forward for that position alone (nn::EncoderBlock::forward's
  // first_token_only): the same values there, 1/num_hidden_layers less work, and last_hidden_state() is [B, 1, H].
  bool first_token_only = false;
};

class TrainableEncoder {
 public:
  virtual ~TrainableEncoder() = default;
  // Copies every registered parameter from `weights` (after the store is finalized), names with or without the
  // prefix accepted (and the family's aliases). Throws std::runtime_error naming a missing tensor or a wrong shape.
  virtual void load(nn::ParamStore& store, WeightSource& weights) const = 0;
  // Saving forward (dropout as ctx says; no dropout when ctx.rng is null). input_ids, token_type_ids (null: all 0;
  // ignored by families without token types): [B, L]; key_mask [B, L] (1 real, 0 padding; null: none). Throws
  // std::invalid_argument for ids or types out of range, or a sequence longer than the family allows.
  virtual void forward(const nn::Context& ctx, const int64_t* input_ids, const int64_t* token_type_ids,
                       const float* key_mask, int64_t B, int64_t L) = 0;
  // [B, L, H] of the last forward ([B, 1, H], position 0, when first_token_only()).
  virtual const float* last_hidden_state() const = 0;
  // Whether the body was built with TrainableEncoderOptions::first_token_only and honours it.
  virtual bool first_token_only() const { return false; }
  // [B, H] of the last forward (BertModel: tanh(pooler.dense(h[:, 0]))); null when the body has no pooler.
  virtual const float* pooler_output() const = 0;
  // Gradients of the last forward's outputs: dlast (last_hidden_state's shape) and dpooled [B, H], each may be
  // null (dpooled must be null without a pooler: std::logic_error). Parameter gradients are added to the store's.
  virtual void backward(const float* dlast, const float* dpooled) = 0;
  virtual const EncoderConfig& config() const = 0;
  // The compute type of every Linear's training products: F32, or BF16 (bf16 operands, fp32 accumulation; the
  // parameters stay fp32 master weights).
  virtual void set_precision(ops::ComputeType precision) = 0;
  // The store names this body registered (prefix included).
  virtual const std::vector<std::string>& names() const = 0;
  // The registered names that get no gradient (requires_grad False, e.g. DistilBERT's sinusoidal position table);
  // the fine-tuning optimizer leaves them as loaded.
  virtual const std::vector<std::string>& frozen_names() const = 0;
  // The prefix of the registered names ("bert.", "roberta.", "model.", or "" when bare).
  virtual const std::string& prefix() const = 0;
  // The store name of the input embedding table [vocab_size, H] ("bert.embeddings.word_embeddings.weight",
  // "model.embeddings.tok_embeddings.weight"): a masked-LM decoder tied to it (tie_word_embeddings) uses it.
  virtual std::string word_embeddings_name() const = 0;
};

}  // namespace tfm
