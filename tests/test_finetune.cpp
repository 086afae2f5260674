// Fine-tuning (issue 25): BertForSequenceClassification steps against PyTorch autograd + the Hugging Face
// Trainer's AdamW, parameter groups, linear warmup schedule and clipping (scripts/make_finetune_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "finetune_test_util.h"
#include "test_util.h"
#include "train/finetune.h"

namespace tfm {
namespace {

using test::close_to;
using test::fixture;
using test::is_key_bias;

ClassificationBatch batch_of(const SafeTensors& st, int k) {
  return test::finetune_batch_at(st, "batch" + std::to_string(k) + ".");
}

FinetuneHyperparameters fixture_hyper() {
  return test::hyperparameters_from_json(load_json_file(fixture("finetune/hyper.json")));
}


TEST(Finetune, SequenceClassificationStepsMatchPyTorchAndTheTrainer) {
  const SafeTensors st = SafeTensors::open(fixture("finetune/steps.safetensors"));
  const EncoderConfig c = EncoderConfig::load(fixture("heads_seqcls/config.json"));
  CheckpointWeights w(fixture("heads_seqcls"));
  SequenceClassificationTrainer t(c, w, 3, fixture_hyper());
  Tensor loss = st.get("loss"), norm = st.get("grad_norm"), lr = st.get("lr");
  for (int k = 0; k < 3; ++k) {
    const ClassificationBatch b = batch_of(st, k);
    if (k == 0) {
      // The first step's gradients, every parameter, before clipping.
      const double l = t.compute_gradients(b, /*dropout=*/false);
      EXPECT_NEAR(l, loss.f32()[0], 1e-5 * std::fabs(loss.f32()[0]));
      EXPECT_NEAR(grad_norm(t.params()), norm.f32()[0], 1e-4 * norm.f32()[0]);
      int checked = 0;
      for (const auto& e : t.params().entries()) {
        const float* g = t.params().all_grad().data() + e.offset;
        if (is_key_bias(e.name)) {  // exactly 0 in exact arithmetic: both sides are rounding noise
          for (int64_t i = 0; i < e.numel; ++i) EXPECT_LE(std::fabs(g[i]), 1e-6f) << e.name;
        } else {
          EXPECT_TRUE(close_to(g, st.get("step0.grad." + e.name), 2e-5)) << e.name;
        }
        ++checked;
      }
      EXPECT_EQ(checked, 2 * 2 * 8 + 3 + 2 + 2 + 2);  // every tensor of the fixture's BertForSequenceClassification
    }
    const double l = t.train_step(b);
    EXPECT_NEAR(l, loss.f32()[k], 1e-5 * std::fabs(loss.f32()[k])) << "step " << k;
    EXPECT_NEAR(t.last_lr(), lr.f32()[k], 1e-9) << "step " << k;
  }
  // Every parameter after three AdamW steps, but the attention key biases: their gradient is rounding noise (see
  // above) that Adam normalises to steps of +-lr, on either side.
  int compared = 0;
  for (const auto& e : t.params().entries()) {
    if (is_key_bias(e.name)) continue;
    EXPECT_TRUE(close_to(t.params().all_data().data() + e.offset, st.get("final." + e.name), 2e-5)) << e.name;
    ++compared;
  }
  EXPECT_EQ(compared, 41 - 2);
}

TEST(Finetune, LinearWarmupScheduleIsTransformers) {
  // transformers.get_linear_schedule_with_warmup(warmup 2, total 5): 0, 0.5, 1, 2/3, 1/3, then 0.
  const double want[] = {0.0, 0.5, 1.0, 2.0 / 3.0, 1.0 / 3.0, 0.0, 0.0};
  for (int s = 0; s < 7; ++s) EXPECT_DOUBLE_EQ(linear_warmup_factor(s, 2, 5), want[s]) << s;
  EXPECT_DOUBLE_EQ(linear_warmup_factor(0, 0, 4), 1.0);
}

TEST(Finetune, RefusesWhatItCannotTrain) {
  EncoderConfig c = EncoderConfig::load(fixture("heads_seqcls/config.json"));
  CheckpointWeights mlm(fixture("heads_mlm"));
  const EncoderConfig cm = EncoderConfig::load(fixture("heads_mlm/config.json"));
  try {
    SequenceClassificationTrainer t(cm, mlm, 2, FinetuneHyperparameters{});
    FAIL() << "a checkpoint without pooler was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("pooler"), std::string::npos) << e.what();
  }
  CheckpointWeights w(fixture("heads_seqcls"));
  SequenceClassificationTrainer t(c, w, 3, FinetuneHyperparameters{});
  ClassificationBatch b;
  b.B = 1;
  b.L = 2;
  b.input_ids = {2, 3};
  b.attention_mask = {1, 1};
  b.labels = {3};
  EXPECT_THROW(t.train_step(b), std::invalid_argument);
}

// A new head (another number of labels than the checkpoint's) starts as BertPreTrainedModel._init_weights:
// N(0, 0.02) weights, zero bias; the body is the checkpoint's.
TEST(Finetune, ANewHeadIsInitialisedAsTransformersDoes) {
  const EncoderConfig c = EncoderConfig::load(fixture("heads_seqcls/config.json"));
  CheckpointWeights w(fixture("heads_seqcls"));
  SequenceClassificationTrainer t(c, w, 5, FinetuneHyperparameters{});
  nn::ParamStore& p = t.params();
  const float* cw = p.data(p.index_of("classifier.weight"));
  const float* cb = p.data(p.index_of("classifier.bias"));
  double sum2 = 0;
  for (int i = 0; i < 5 * 32; ++i) sum2 += (double)cw[i] * cw[i];
  EXPECT_NEAR(std::sqrt(sum2 / 160), 0.02, 0.005);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(cb[i], 0.0f);
  Tensor q = w.get("bert.encoder.layer.1.attention.self.query.weight", {32, 32});
  EXPECT_EQ(std::memcmp(p.data(p.index_of("bert.encoder.layer.1.attention.self.query.weight")), q.f32(), 32 * 32 * 4), 0);
}

}  // namespace
}  // namespace tfm
