// Helpers of the fine-tuning step tests (tests/test_finetune*.cpp): comparisons against PyTorch's tensors.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "models/sentence_transformer.h"
#include "train/finetune.h"
#include "train/finetune_embed.h"
#include "test_util.h"

namespace tfm::test {

// Relative to the tensor's scale: gradients and parameters of a few steps agree with PyTorch to float rounding.
inline ::testing::AssertionResult close_to(const float* got, const Tensor& want, double rel) {
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, (double)std::fabs(want.f32()[i]));
  return all_close(got, want.f32(), want.numel(), (float)(rel * std::max(scale, 1e-3)));
}

// ||got - want|| / ||want|| over all elements (a bf16 run's gradients against fp32's).
inline double relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = (double)got[i] - want[i];
    diff += d * d;
    norm += (double)want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// The key projection's bias adds q . b_k to every score of a query row, which softmax cancels: its gradient is 0
// in exact arithmetic, rounding noise on both sides (and Adam turns that noise into steps of +-lr).
inline bool is_key_bias(const std::string& name) {
  return name.find("attention.self.key.bias") != std::string::npos ||  // BERT, RoBERTa
         name.find("attention.k_lin.bias") != std::string::npos ||     // DistilBERT
         name.find("attention.attn.k.bias") != std::string::npos;      // MPNet
}

// The hyperparameters a fixture script wrote (hyper.json's keys are FinetuneHyperparameters' names); dropout 0, as
// the references run without it (torch's RNG is not ours).
inline FinetuneHyperparameters hyperparameters_from_json(const nlohmann::json& j) {
  FinetuneHyperparameters hp;
  hp.learning_rate = j["learning_rate"];
  hp.weight_decay = j["weight_decay"];
  hp.adam_beta1 = j["adam_beta1"];
  hp.adam_beta2 = j["adam_beta2"];
  hp.adam_epsilon = j["adam_epsilon"];
  hp.max_grad_norm = j["max_grad_norm"];
  hp.warmup_steps = j["warmup_steps"];
  hp.total_steps = j["total_steps"];
  hp.dropout = 0.0f;
  return hp;
}

// The batch a fixture script wrote under `p` ("step0.micro0."): input_ids, token_type_ids, attention_mask, labels
// (int64 class ids; float32: regression targets, FinetuneBatch::targets).
inline FinetuneBatch finetune_batch_at(const SafeTensors& st, const std::string& p) {
  Tensor ids = st.get(p + "input_ids"), tt = st.get(p + "token_type_ids"), mask = st.get(p + "attention_mask"),
         labels = st.get(p + "labels");
  FinetuneBatch b;
  b.B = ids.size(0);
  b.L = ids.size(1);
  b.input_ids.assign(ids.i64(), ids.i64() + ids.numel());
  b.token_type_ids.assign(tt.i64(), tt.i64() + tt.numel());
  for (int64_t i = 0; i < mask.numel(); ++i) b.attention_mask.push_back((float)mask.i64()[i]);
  if (labels.dtype() == DType::F32)
    b.targets.assign(labels.f32(), labels.f32() + labels.numel());
  else
    b.labels.assign(labels.i64(), labels.i64() + labels.numel());
  return b;
}

// The sentence batch a fixture script wrote under `p` ("step0.micro0."): columns col0, col1 [, col2] ([B, L_c] ids,
// each padded on its own with pad_id) padded into one SentenceBatch (column after column), attention_mask = ids !=
// pad_id; "scores" [B] when present.
inline SentenceBatch sentence_batch_at(const SafeTensors& st, const std::string& p, int64_t pad_id) {
  SentenceBatch b;
  std::vector<Tensor> cols;
  while (st.has(p + "col" + std::to_string(cols.size())))
    cols.push_back(st.get(p + "col" + std::to_string(cols.size())));
  b.B = cols.at(0).size(0);
  b.columns = (int64_t)cols.size();
  for (const Tensor& c : cols) b.L = std::max(b.L, c.size(1));
  b.input_ids.assign(b.rows() * b.L, pad_id);
  b.attention_mask.assign(b.rows() * b.L, 0.0f);
  for (int64_t c = 0; c < b.columns; ++c)
    for (int64_t i = 0; i < b.B; ++i)
      for (int64_t l = 0; l < cols[c].size(1); ++l) {
        const int64_t id = cols[c].i64()[i * cols[c].size(1) + l];
        b.input_ids[(c * b.B + i) * b.L + l] = id;
        b.attention_mask[(c * b.B + i) * b.L + l] = id != pad_id ? 1.0f : 0.0f;
      }
  if (st.has(p + "scores")) {
    Tensor s = st.get(p + "scores");
    b.scores.assign(s.f32(), s.f32() + s.numel());
  }
  return b;
}

// A trained sentence-transformers folder `dir` embeds `texts` through the inference path (SentenceTransformer, what
// tfm embed runs) as a SentenceEmbeddingTrainer built on its weights and modules does (no dropout): the reload
// gives the trainer's model.
inline ::testing::AssertionResult embeds_as_its_trainer(const std::string& dir, const std::vector<std::string>& texts) {
  const SentenceTransformer m = SentenceTransformer::load(dir);
  const Tensor want = m.encode(texts);
  SentenceBatch b;
  b.B = (int64_t)texts.size();
  b.columns = 1;
  std::vector<Encoding> enc;
  for (const std::string& x : texts) {
    enc.push_back(m.tokenize(x));
    b.L = std::max<int64_t>(b.L, (int64_t)enc.back().input_ids.size());
  }
  b.input_ids.assign(b.B * b.L, m.encoder_config().pad_token_id);
  b.attention_mask.assign(b.B * b.L, 0.0f);
  for (int64_t i = 0; i < b.B; ++i)
    for (size_t l = 0; l < enc[i].input_ids.size(); ++l) {
      b.input_ids[i * b.L + l] = enc[i].input_ids[l];
      b.attention_mask[i * b.L + l] = 1.0f;
    }
  const SentenceTransformerLayout lay = read_sentence_transformer_layout(dir);
  CheckpointWeights w(lay.transformer_dir);
  SentenceEmbeddingTrainer tr(EncoderConfig::load(lay.transformer_dir + "/config.json"), w, lay.pooling, lay.normalize,
                              EmbeddingLoss::MultipleNegativesRanking, FinetuneHyperparameters{});
  const std::vector<float> got = tr.embed(b);
  if ((int64_t)got.size() != want.numel())
    return ::testing::AssertionFailure() << got.size() << " trainer values, " << want.numel() << " inference values";
  return close_to(got.data(), want, 1e-4);
}

// A CSV of numbers with a header line (train_log.csv): the header in *header, a row of doubles per line (an empty
// cell NaN).
inline std::vector<std::vector<double>> csv_rows(const std::string& path, std::string* header) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  *header = line;
  std::vector<std::vector<double>> rows;
  while (std::getline(f, line)) {
    std::vector<double> v;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) v.push_back(cell.empty() ? NAN : std::stod(cell));
    rows.push_back(v);
  }
  return rows;
}

// The *For<kind> trainer of the task (num_labels C; masked LM: none).
inline std::unique_ptr<FinetuneModel> make_finetune_trainer(HeadKind kind, const EncoderConfig& c, WeightSource& w,
                                                            int64_t C, const FinetuneHyperparameters& hp) {
  if (kind == HeadKind::SequenceClassification) return std::make_unique<SequenceClassificationTrainer>(c, w, C, hp);
  if (kind == HeadKind::TokenClassification) return std::make_unique<TokenClassificationTrainer>(c, w, C, hp);
  return std::make_unique<MaskedLMTrainer>(c, w, hp);
}

// The fixture's three optimizer steps ([1 micro-batch], [2 micro-batches accumulated], [1 micro-batch], as
// make_finetune_task_fixtures.py / make_finetune_family_fixtures.py write them): each micro-batch's loss, every
// gradient of the first step ("step0.grad.<name>"), each step's gradient norm and learning rate, and every
// parameter after the steps ("final.<name>"). `trained`: the number of trained tensors the script counted;
// `frozen`: tensors that must get no gradient and stay as loaded. Trainer: a FinetuneModel or a
// SentenceEmbeddingTrainer; batch_at(prefix) its batch of "step{k}.micro{j}.".
template <class Trainer, class BatchAt>
void check_trainer_steps(Trainer& t, const SafeTensors& st, int64_t trained, const std::vector<std::string>& frozen,
                         BatchAt batch_at) {
  auto is_frozen = [&](const std::string& n) { return std::find(frozen.begin(), frozen.end(), n) != frozen.end(); };
  Tensor micro_loss = st.get("micro_loss"), norm = st.get("grad_norm"), lr = st.get("lr");
  int m = 0;
  for (int k = 0; k < 3; ++k) {
    const int micros = k == 1 ? 2 : 1;
    t.params().zero_grad();
    for (int j = 0; j < micros; ++j, ++m) {
      const auto b = batch_at("step" + std::to_string(k) + ".micro" + std::to_string(j) + ".");
      const double l = t.accumulate_gradients(b, 1.0f / (float)micros, /*dropout=*/false);
      EXPECT_NEAR(l, micro_loss.f32()[m], 2e-5 * std::fabs(micro_loss.f32()[m])) << "step " << k << " micro " << j;
    }
    if (k == 0) {
      int checked = 0;
      for (const auto& e : t.params().entries()) {
        const float* g = t.params().all_grad().data() + e.offset;
        if (is_key_bias(e.name) || is_frozen(e.name)) {
          const float tol = is_frozen(e.name) ? 0.0f : 1e-5f;
          for (int64_t i = 0; i < e.numel; ++i) ASSERT_LE(std::fabs(g[i]), tol) << e.name;
        } else {
          EXPECT_TRUE(close_to(g, st.get("step0.grad." + e.name), 3e-5)) << e.name;
        }
        checked += !is_frozen(e.name);
      }
      EXPECT_EQ(checked, trained);
    }
    EXPECT_NEAR(t.optimizer().step(t.params()), norm.f32()[k], 1e-4 * norm.f32()[k]) << "step " << k;
    EXPECT_NEAR(t.last_lr(), lr.f32()[k], 1e-9) << "step " << k;
  }
  int compared = 0, key_biases = 0;
  for (const auto& e : t.params().entries()) {
    if (is_key_bias(e.name)) {
      ++key_biases;
      continue;
    }
    const Tensor want = st.get("final." + e.name);
    if (is_frozen(e.name)) {  // exactly as loaded
      EXPECT_EQ(0, std::memcmp(t.params().all_data().data() + e.offset, want.f32(), sizeof(float) * e.numel)) << e.name;
    } else {
      EXPECT_TRUE(close_to(t.params().all_data().data() + e.offset, want, 3e-5)) << e.name;
    }
    ++compared;
  }
  EXPECT_EQ(compared + key_biases, trained + (int64_t)frozen.size());
}

// check_trainer_steps of a FinetuneModel on the fixture's FinetuneBatch micro-batches.
inline void check_finetune_steps(FinetuneModel& t, const SafeTensors& st, int64_t trained,
                                 const std::vector<std::string>& frozen = {}) {
  check_trainer_steps(t, st, trained, frozen, [&](const std::string& p) { return finetune_batch_at(st, p); });
}

// Central differences of the loss against the analytic gradient for a few entries of every head tensor (and the
// tied word embeddings), dropout off.
inline void check_finetune_finite_differences(FinetuneModel& t, const FinetuneBatch& b, const std::vector<std::string>& names) {
  t.compute_gradients(b, /*dropout=*/false);
  const std::vector<float> grad = t.params().all_grad();
  std::vector<float>& p = t.params().all_data();
  for (const std::string& name : names) {
    const int64_t e = t.params().index_of(name);
    ASSERT_GE(e, 0) << name;
    const auto& entry = t.params().entries()[e];
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t i = entry.offset + (k * 7919) % entry.numel;
      const double fd = central_difference(p.data(), (size_t)i, 1e-2f, [&] { return (double)t.compute_gradients(b, false); });
      EXPECT_NEAR(grad[i], fd, 3e-3 + 0.03 * std::fabs(fd)) << name << " [" << i - entry.offset << "]";
    }
  }
}

}  // namespace tfm::test
