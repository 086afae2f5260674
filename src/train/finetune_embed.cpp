#include "train/finetune_embed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ops/cross_entropy.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"

namespace tfm {

void pooling_forward(const PoolingConfig& c, const float* h, const float* mask, int64_t N, int64_t L, int64_t H,
                     float* out) {
  // The inference Pooling (models/pooling.h), on views of the training buffers.
  Tensor ht = Tensor::view_of(const_cast<float*>(h), {N, L, H}, DType::F32, nullptr);
  Tensor mt = Tensor::empty({N, L}, DType::I64);
  for (int64_t i = 0; i < N * L; ++i) mt.i64()[i] = mask[i] != 0.0f ? 1 : 0;
  PoolingConfig pc = c;
  pc.include_prompt = true;
  const Tensor pooled = pool(pc, ht, mt, 0);
  std::memcpy(out, pooled.f32(), sizeof(float) * pooled.numel());
}

void pooling_backward(const PoolingConfig& c, const float* dout, const float* h, const float* mask, int64_t N,
                      int64_t L, int64_t H, float* dh) {
  const int64_t D = c.output_dim(H);
  std::fill(dh, dh + N * L * H, 0.0f);
#pragma omp parallel for if (N * L * H > 65536)
  for (int64_t b = 0; b < N; ++b) {
    const float* m = mask + b * L;
    const float* xb = h + b * L * H;
    float* g = dh + b * L * H;
    const float* d = dout + b * D;
    double n = 0, nw = 0;
    int64_t last = -1;
    for (int64_t l = 0; l < L; ++l)
      if (m[l] != 0.0f) {
        n += 1;
        nw += (double)(l + 1);
        last = l;
      }
    n = std::max(n, 1e-9);
    nw = std::max(nw, 1e-9);
    if (c.cls) {  // h[:, 0]
      for (int64_t k = 0; k < H; ++k) g[k] += d[k];
      d += H;
    }
    if (c.max) {  // to the first position holding the maximum over the real tokens
      for (int64_t k = 0; k < H; ++k) {
        int64_t arg = -1;
        float best = -1e9f;
        for (int64_t l = 0; l < L; ++l)
          if (m[l] != 0.0f && (arg < 0 || xb[l * H + k] > best)) {
            best = xb[l * H + k];
            arg = l;
          }
        if (arg >= 0 && best >= -1e9f) g[arg * H + k] += d[k];
      }
      d += H;
    }
    auto spread = [&](double denom, bool weighted) {
      for (int64_t l = 0; l < L; ++l) {
        if (m[l] == 0.0f) continue;
        const float w = (float)((weighted ? (double)(l + 1) : 1.0) / denom);
        for (int64_t k = 0; k < H; ++k) g[l * H + k] += w * d[k];
      }
      d += H;
    };
    if (c.mean) spread(n, false);
    if (c.mean_sqrt_len) spread(std::sqrt(n), false);
    if (c.weightedmean) spread(nw, true);
    if (c.lasttoken) {
      if (last >= 0)
        for (int64_t k = 0; k < H; ++k) g[last * H + k] += d[k];
      d += H;
    }
  }
}

void l2_normalize_forward(float* y, float* norms, const float* x, int64_t N, int64_t D, float eps) {
  for (int64_t i = 0; i < N; ++i) {
    double s = 0;
    for (int64_t k = 0; k < D; ++k) s += (double)x[i * D + k] * x[i * D + k];
    norms[i] = (float)std::sqrt(s);
    const float inv = 1.0f / std::max(norms[i], eps);
    for (int64_t k = 0; k < D; ++k) y[i * D + k] = x[i * D + k] * inv;
  }
}

void l2_normalize_backward(float* dx, const float* dy, const float* y, const float* norms, int64_t N, int64_t D,
                           float eps) {
  for (int64_t i = 0; i < N; ++i) {
    const float* yi = y + i * D;
    const float* gi = dy + i * D;
    float* o = dx + i * D;
    if (norms[i] > eps) {
      double dot = 0;
      for (int64_t k = 0; k < D; ++k) dot += (double)yi[k] * gi[k];
      const float inv = 1.0f / norms[i], p = (float)dot;
      for (int64_t k = 0; k < D; ++k) o[k] = (gi[k] - yi[k] * p) * inv;
    } else {
      for (int64_t k = 0; k < D; ++k) o[k] = gi[k] / eps;
    }
  }
}

double multiple_negatives_ranking_loss(const float* emb, int64_t B, int64_t columns, int64_t D, double scale,
                                       float* demb) {
  if (columns < 2)
    throw std::invalid_argument("MultipleNegativesRankingLoss needs (anchor, positive [, negative]) columns");
  if (B < 1) throw std::invalid_argument("MultipleNegativesRankingLoss: an empty batch");
  const int64_t M = (columns - 1) * B;  // candidates: every positive, then every negative
  const float eps = 1e-12f;             // util.cos_sim: F.normalize(p=2, dim=1)
  std::vector<float> a(B * D), na(B), c(M * D), nc(M), scores(B * M), dscores(B * M), loss(B), da(B * D),
      dc(M * D);
  l2_normalize_forward(a.data(), na.data(), emb, B, D, eps);
  l2_normalize_forward(c.data(), nc.data(), emb + B * D, M, D, eps);
  ops::gemm(false, true, B, M, D, (float)scale, a.data(), D, c.data(), D, 0.0f, scores.data(), M);
  std::vector<int64_t> target(B);
  std::vector<float> weight(B, 1.0f / (float)B);  // CrossEntropyLoss(reduction="mean")
  for (int64_t i = 0; i < B; ++i) target[i] = i;
  ops::cross_entropy_forward_backward(loss.data(), dscores.data(), scores.data(), target.data(), weight.data(), B, M,
                                      0.0f);
  double total = 0;
  for (float l : loss) total += l;
  ops::gemm(false, false, B, D, M, (float)scale, dscores.data(), M, c.data(), D, 0.0f, da.data(), D);
  ops::gemm(true, false, M, D, B, (float)scale, dscores.data(), M, a.data(), D, 0.0f, dc.data(), D);
  l2_normalize_backward(demb, da.data(), a.data(), na.data(), B, D, eps);
  l2_normalize_backward(demb + B * D, dc.data(), c.data(), nc.data(), M, D, eps);
  return total / (double)B;
}

double cosine_similarity_loss(const float* emb, const float* scores, int64_t B, int64_t D, float* demb,
                              float* cos_out) {
  if (B < 1) throw std::invalid_argument("CosineSimilarityLoss: an empty batch");
  const float eps = 1e-8f;  // torch.cosine_similarity
  std::vector<float> u(B * D), nu(B), v(B * D), nv(B), du(B * D), dv(B * D);
  l2_normalize_forward(u.data(), nu.data(), emb, B, D, eps);
  l2_normalize_forward(v.data(), nv.data(), emb + B * D, B, D, eps);
  std::vector<float> cos(B), dcos(B);
  for (int64_t i = 0; i < B; ++i) {
    double cs = 0;
    for (int64_t k = 0; k < D; ++k) cs += (double)u[i * D + k] * v[i * D + k];
    cos[i] = (float)cs;
  }
  if (cos_out) std::copy(cos.begin(), cos.end(), cos_out);
  const double loss = mse_loss(dcos.data(), cos.data(), scores, B, 1.0f);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t k = 0; k < D; ++k) {
      du[i * D + k] = dcos[i] * v[i * D + k];
      dv[i * D + k] = dcos[i] * u[i * D + k];
    }
  l2_normalize_backward(demb, du.data(), u.data(), nu.data(), B, D, eps);
  l2_normalize_backward(demb + B * D, dv.data(), v.data(), nv.data(), B, D, eps);
  return loss;
}

// ---------------------------------------------------------------- SentenceEmbeddingTrainer


SentenceEmbeddingTrainer::SentenceEmbeddingTrainer(const EncoderConfig& config, WeightSource& weights,
                                                   const PoolingConfig& pooling, bool normalize, EmbeddingLoss loss,
                                                   const FinetuneHyperparameters& hp, double scale)
    : config_(config), pooling_(pooling), normalize_(normalize), loss_(loss), hp_(hp), scale_(scale), rng_(hp.seed) {
  if (pooling.num_modes() == 0) throw std::invalid_argument("the Pooling module has no mode");
  if (!std::isfinite(scale)) throw std::invalid_argument("the MultipleNegativesRankingLoss scale must be finite");
  TrainableEncoderOptions body_options;
  body_options.bare = true;  // the Transformer module's model.safetensors: the base model's own names
  body_ = make_trainable_encoder(store_, config, body_options);
  store_.finalize();
  body_->load(store_, weights);
  const int64_t H = config.hidden_size;
  for (const auto& [leaf, shape] : std::vector<std::pair<std::string, Shape>>{{"weight", {H, H}}, {"bias", {H}}}) {
    const std::string name = "pooler.dense." + leaf;
    if (weights.has(name) || weights.has("bert." + name))
      pooler_.emplace_back(name, weights.get(name, shape, {"bert." + name}).clone());
  }
  opt_ = std::make_unique<FinetuneOptimizer>(store_, hp);
}

void SentenceEmbeddingTrainer::forward(const SentenceBatch& batch, bool dropout) {
  const int64_t N = batch.rows(), L = batch.L, H = config_.hidden_size, D = dimension();
  if (batch.B < 1 || batch.columns < 1 || L < 1 || (int64_t)batch.input_ids.size() != N * L ||
      (int64_t)batch.attention_mask.size() != N * L ||
      (!batch.token_type_ids.empty() && (int64_t)batch.token_type_ids.size() != N * L))
    throw std::invalid_argument("sentence batch: arrays do not match [columns * B, L]");
  const nn::Context ctx = training_context(hp_, rng_, dropout);
  body_->forward(ctx, batch.input_ids.data(), batch.token_type_ids.empty() ? nullptr : batch.token_type_ids.data(),
                 batch.attention_mask.data(), N, L);
  mask_ = batch.attention_mask;
  rows_ = N;
  L_ = L;
  pooled_.resize(N * D);
  pooling_forward(pooling_, body_->last_hidden_state(), mask_.data(), N, L, H, pooled_.data());
  emb_ = pooled_;
  norms_.assign(N, 0.0f);
  if (normalize_) l2_normalize_forward(emb_.data(), norms_.data(), pooled_.data(), N, D, 1e-12f);
}

std::vector<float> SentenceEmbeddingTrainer::embed(const SentenceBatch& batch) {
  forward(batch, /*dropout=*/false);
  return emb_;
}

const std::vector<float>& SentenceEmbeddingTrainer::forward_embeddings(const SentenceBatch& batch, bool dropout) {
  forward(batch, dropout);
  return emb_;
}

namespace {

void check_loss_columns(EmbeddingLoss loss, int64_t columns, bool has_scores) {
  if (loss == EmbeddingLoss::MultipleNegativesRanking && columns < 2)
    throw std::invalid_argument("MultipleNegativesRankingLoss needs (anchor, positive [, negative]) columns");
  if (loss == EmbeddingLoss::CosineSimilarity && (columns != 2 || !has_scores))
    throw std::invalid_argument("CosineSimilarityLoss needs (sentence1, sentence2) columns and a score per pair");
}

}  // namespace

double SentenceEmbeddingTrainer::loss_of_embeddings(const float* emb, int64_t B, int64_t columns, const float* scores,
                                                    float* demb) const {
  check_loss_columns(loss_, columns, scores != nullptr);
  return loss_ == EmbeddingLoss::MultipleNegativesRanking
             ? multiple_negatives_ranking_loss(emb, B, columns, dimension(), scale_, demb)
             : cosine_similarity_loss(emb, scores, B, dimension(), demb);
}

void SentenceEmbeddingTrainer::backward_embeddings(const float* demb_in, float scale) {
  const int64_t N = rows_, L = L_, H = config_.hidden_size, D = dimension();
  std::vector<float> demb(demb_in, demb_in + N * D);
  if (scale != 1.0f)
    for (float& g : demb) g *= scale;
  if (normalize_) l2_normalize_backward(demb.data(), demb.data(), emb_.data(), norms_.data(), N, D, 1e-12f);
  std::vector<float> dh(N * L * H);
  pooling_backward(pooling_, demb.data(), body_->last_hidden_state(), mask_.data(), N, L, H, dh.data());
  body_->backward(dh.data(), nullptr);
}

double SentenceEmbeddingTrainer::accumulate_gradients(const SentenceBatch& batch, float scale, bool dropout) {
  check_loss_columns(loss_, batch.columns, (int64_t)batch.scores.size() == batch.B);
  forward(batch, dropout);
  std::vector<float> demb(emb_.size());
  const double loss = loss_of_embeddings(emb_.data(), batch.B, batch.columns, batch.scores.data(), demb.data());
  backward_embeddings(demb.data(), scale);
  return loss;
}

double SentenceEmbeddingTrainer::compute_gradients(const SentenceBatch& batch, bool dropout) {
  store_.zero_grad();
  return accumulate_gradients(batch, 1.0f, dropout);
}

double SentenceEmbeddingTrainer::train_step(const SentenceBatch& batch) {
  const double loss = compute_gradients(batch, /*dropout=*/true);
  if (!std::isfinite(loss)) throw std::runtime_error("the training loss is not finite (" + std::to_string(loss) + ")");
  opt_->step(store_);
  return loss;
}

void SentenceEmbeddingTrainer::set_precision(ops::ComputeType precision) {
  if (precision == ops::ComputeType::I8) throw std::invalid_argument("training precision must be fp32 or bf16, not int8");
  if (precision == ops::ComputeType::BF16) ops::require_bf16_gemm();
  body_->set_precision(precision);
}

std::vector<std::pair<std::string, Tensor>> SentenceEmbeddingTrainer::state_dict() {
  std::vector<std::pair<std::string, Tensor>> out = store_.named_tensors();
  for (const auto& p : pooler_) out.push_back(p);
  return out;
}

}  // namespace tfm
