// Fine-tuning a sentence-transformers model (tfm finetune --task embed), as SentenceTransformerTrainer runs it:
// the Transformer module (a family of train/finetune.h, as a models/trainable_encoder.h TrainableEncoder) ->
// Pooling -> [Normalize] gives one embedding per text, and a loss of sentence_transformers.losses compares them:
//  - MultipleNegativesRankingLoss (losses/MultipleNegativesRankingLoss.py): (anchor, positive [, negative]) rows;
//    scores = util.cos_sim(anchors, cat(positives, negatives)) * scale (scale 20), loss = CrossEntropyLoss(scores,
//    arange(B)): every other row's positive (and every negative) is an in-batch negative of an anchor.
//  - CosineSimilarityLoss (losses/CosineSimilarityLoss.py): (sentence1, sentence2, score) rows; loss =
//    MSELoss(torch.cosine_similarity(u, v), score).
// The optimizer is the Hugging Face Trainer's (train/finetune.h). The BertModel pooler of the Transformer module
// takes no part in the loss (sentence-transformers pools last_hidden_state), so it gets no gradient and AdamW
// leaves it untouched, as torch.optim.AdamW skips parameters whose grad is None.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "models/trainable_encoder.h"
#include "models/pooling.h"
#include "nn/params.h"
#include "train/finetune.h"
#include "train/optim.h"

namespace tfm {

// The texts of B examples of `columns` texts each, all padded into one batch of columns * B rows, column after
// column: rows [0, B) are the first column (anchors / sentence1), [B, 2B) the second (positives / sentence2),
// [2B, 3B) a third (negatives). sentence-transformers runs one forward per column; one padded forward gives the
// same embeddings (padding is masked out of attention and pooling).
struct SentenceBatch {
  int64_t B = 0, columns = 0, L = 0;
  std::vector<int64_t> input_ids, token_type_ids;  // [columns * B, L]
  std::vector<float> attention_mask;               // [columns * B, L]: 1 real token, 0 padding
  std::vector<float> scores;                       // [B]: CosineSimilarityLoss labels (empty otherwise)
  int64_t rows() const { return B * columns; }
};

enum class EmbeddingLoss { MultipleNegativesRanking, CosineSimilarity };

// sentence_transformers.models.Pooling.forward on [N, L, H] hidden states h with mask [N, L] (1 real token):
// out [N, pooling.output_dim(H)], the modes concatenated in its order (see PoolingConfig; prompts are not used in
// training, so include_prompt has no effect). Equal to models/pooling.h pool().
void pooling_forward(const PoolingConfig& pooling, const float* h, const float* mask, int64_t N, int64_t L, int64_t H,
                     float* out);
// The gradient of pooling_forward: dh [N, L, H] (overwritten) from dout [N, output_dim]. max sends each gradient
// to the position of the maximum (the first one on a tie), as torch.max(dim) does.
void pooling_backward(const PoolingConfig& pooling, const float* dout, const float* h, const float* mask, int64_t N,
                      int64_t L, int64_t H, float* dh);

// torch.nn.functional.normalize(x, p=2, dim=1, eps): y = x / max(||x||_2, eps) per row of [N, D]; norms [N]
// (||x||_2) are saved for the backward. y may be x.
void l2_normalize_forward(float* y, float* norms, const float* x, int64_t N, int64_t D, float eps);
// dx = (dy - y (y . dy)) / ||x|| where ||x|| > eps, dy / eps elsewhere (the clamp is constant). dx may be dy.
void l2_normalize_backward(float* dx, const float* dy, const float* y, const float* norms, int64_t N, int64_t D,
                           float eps);

// MultipleNegativesRankingLoss on embeddings emb [columns * B, D] (rows as SentenceBatch): the mean cross-entropy
// of scale * cos_sim(anchor_i, candidate_j) over the (columns - 1) * B candidates, target j = i (nats). Writes
// d(loss)/d(emb) to demb [columns * B, D]. Throws std::invalid_argument when columns < 2.
double multiple_negatives_ranking_loss(const float* emb, int64_t B, int64_t columns, int64_t D, double scale,
                                       float* demb);
// CosineSimilarityLoss on emb [2B, D] (u = rows [0, B), v = rows [B, 2B)): mean over i of (cos(u_i, v_i) -
// scores_i)^2, cos = u . v / (max(||u||, 1e-8) max(||v||, 1e-8)). Writes d(loss)/d(emb) to demb [2B, D]; cos_out
// [B], when not null, receives the similarities.
double cosine_similarity_loss(const float* emb, const float* scores, int64_t B, int64_t D, float* demb,
                              float* cos_out = nullptr);

// A sentence-transformers model in training: the Transformer module's base model (BertModel, MPNetModel,
// ModernBertModel, ...; store names as its model.safetensors names them: "embeddings.*", "encoder.layer.N.*",
// MPNet's "encoder.relative_attention_bias.weight", "layers.N.*"), Pooling, Normalize when the folder has it.
class SentenceEmbeddingTrainer {
 public:
  // Loads the body of config.model_type's family (make_trainable_encoder, bare: the base model's names, e.g.
  // BertModel's with or without "bert.", MPNetModel's with or without "mpnet.", ModernBertModel's with or without
  // "model."); a BERT pooler in the checkpoint is kept as it is for saving. Throws std::runtime_error naming a
  // missing tensor, std::invalid_argument for a model_type outside trainable_model_types(), a pooling without
  // modes or a scale that is not finite.
  SentenceEmbeddingTrainer(const EncoderConfig& config, WeightSource& weights, const PoolingConfig& pooling,
                           bool normalize, EmbeddingLoss loss, const FinetuneHyperparameters& hp, double scale = 20.0);

  // One optimizer step: forward with dropout, the loss, backward, clip_grad_norm_, AdamW at learning_rate *
  // linear_warmup_factor(step). Returns the loss (nats for MNRL, squared cosine error for CosineSimilarityLoss).
  // Throws std::invalid_argument for a malformed batch (shapes, columns the loss cannot take, missing scores) and
  // std::runtime_error when the loss or the gradient norm is not finite (the parameters are left unchanged).
  double train_step(const SentenceBatch& batch);
  // Forward and backward only (gradients zeroed first, then left in params()): the loss.
  double compute_gradients(const SentenceBatch& batch, bool dropout = true);
  // Forward and backward of `batch`, adding scale * d(loss)/d(parameter) to the gradients (gradient accumulation:
  // scale = 1 / micro-batches of the step). Returns the batch's loss (unscaled).
  double accumulate_gradients(const SentenceBatch& batch, float scale, bool dropout);

  // The two halves of accumulate_gradients, for a loss whose batch spans ranks (data-parallel training gathers
  // every rank's embeddings, computes the loss of the whole batch and backpropagates each rank's own rows):
  // forward_embeddings runs the forward of `batch` (dropout when `dropout`), keeps what the backward needs and
  // returns the embeddings [batch.rows(), dimension()]; backward_embeddings adds scale * the gradient that demb
  // [batch.rows(), dimension()] (d(loss)/d(embeddings) of that forward) sends to the parameters.
  const std::vector<float>& forward_embeddings(const SentenceBatch& batch, bool dropout);
  void backward_embeddings(const float* demb, float scale);
  // The trainer's loss over embeddings emb [columns * B, D] (SentenceBatch row order) and, for
  // CosineSimilarityLoss, scores [B]; writes d(loss)/d(emb) to demb [columns * B, D]. Throws
  // std::invalid_argument for columns or scores the loss cannot take.
  double loss_of_embeddings(const float* emb, int64_t B, int64_t columns, const float* scores, float* demb) const;
  // Sentence embeddings [rows, dimension()] of every row of `batch`, without dropout (SentenceTransformer.encode).
  std::vector<float> embed(const SentenceBatch& batch);

  nn::ParamStore& params() { return store_; }
  // What the Transformer module's model.safetensors holds: the trained parameters and the untouched pooler.
  std::vector<std::pair<std::string, Tensor>> state_dict();
  int64_t dimension() const { return pooling_.output_dim(config_.hidden_size); }
  int64_t steps() const { return opt_->steps(); }
  double last_lr() const { return opt_->last_lr(); }
  EmbeddingLoss loss() const { return loss_; }
  FinetuneOptimizer& optimizer() { return *opt_; }
  Rng& dropout_rng() { return rng_; }  // dropout masks are drawn from it (its state is part of a checkpoint)
  // TrainingArguments(bf16=True) on CPU: the Transformer module's Linear products in `precision` (F32, or BF16:
  // bf16 operands, fp32 accumulation), parameters, gradients and AdamW state staying fp32. Throws
  // std::invalid_argument for int8 and std::runtime_error when BF16 is asked on a CPU without bf16 instructions.
  void set_precision(ops::ComputeType precision);

 private:
  void forward(const SentenceBatch& batch, bool dropout);
  EncoderConfig config_;
  PoolingConfig pooling_;
  bool normalize_;
  EmbeddingLoss loss_;
  FinetuneHyperparameters hp_;
  double scale_;
  nn::ParamStore store_;
  std::unique_ptr<TrainableEncoder> body_;
  std::unique_ptr<FinetuneOptimizer> opt_;
  std::vector<std::pair<std::string, Tensor>> pooler_;
  Rng rng_;
  // Saved by forward: the mask, pooled vectors, Normalize's norms and the embeddings, and the batch's shape.
  std::vector<float> mask_, pooled_, norms_, emb_;
  int64_t rows_ = 0, L_ = 0;
};

}  // namespace tfm
