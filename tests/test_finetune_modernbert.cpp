// Fine-tuning ModernBERT (issue 25): ModernBertTrainable against PyTorch autograd on modeling_modernbert.py's
// ModernBertModel, the optimizer steps of its *ForSequenceClassification (cls and mean pooling),
// *ForTokenClassification, *ForMaskedLM heads and of a sentence-transformers model around it (fixtures from
// scripts/make_finetune_modernbert_fixtures.py), and finite-difference checks of the backward passes it added
// (ops::rotary_backward, ops::glu_backward, LayerNorm without bias, the heads). The written folders and the CLI:
// test_finetune_families.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "finetune_test_util.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "models/modernbert.h"
#include "models/sentence_transformer.h"
#include "nn/params.h"
#include "ops/activation.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/layer_norm.h"
#include "ops/rotary.h"
#include "run_tfm.h"
#include "test_util.h"
#include "tfm/finetune.h"
#include "train/finetune.h"
#include "train/finetune_embed.h"

using namespace tfm;
using tfm::test::close_to;
using tfm::test::fixture;

namespace {

struct Golden {
  EncoderConfig config;
  nn::ParamStore store;
  std::unique_ptr<ModernBertTrainable> model;
  SafeTensors io;
  std::vector<float> mask;
  Golden() : config(EncoderConfig::load(fixture("finetune_modernbert/config.json"))),
             io(SafeTensors::open(fixture("finetune_modernbert/expected.safetensors"))) {
    model = std::make_unique<ModernBertTrainable>(store, config);
    store.finalize();
    SafeTensorsWeights w(fixture("finetune_modernbert/model.safetensors"));
    model->load(store, w);
    Tensor am = io.get("attention_mask");
    for (int64_t i = 0; i < am.numel(); ++i) mask.push_back((float)am.i64()[i]);
  }
  void forward(const nn::Context& ctx) {
    Tensor ids = io.get("input_ids");
    model->forward(ctx, ids.i64(), nullptr, mask.data(), ids.size(0), ids.size(1));
  }
};

}  // namespace

TEST(FinetuneModernBert, LastHiddenStateAndEveryGradientMatchPyTorch) {
  Golden g;
  nn::Context ctx;
  ctx.grad = true;
  g.forward(ctx);
  Tensor want = g.io.get("last_hidden_state");
  EXPECT_TRUE(close_to(g.model->last_hidden_state(), want, 1e-5));
  g.store.zero_grad();
  g.model->backward(g.io.get("upstream").f32(), nullptr);
  EXPECT_EQ(g.model->prefix(), "model.");
  EXPECT_TRUE(g.model->frozen_names().empty());
  int checked = 0;
  for (const std::string& name : g.model->names()) {
    SCOPED_TRACE(name);
    Tensor grad = g.io.get("grad." + name.substr(g.model->prefix().size()));
    EXPECT_TRUE(close_to(g.store.grad(g.store.index_of(name)), grad, 1e-4));
    ++checked;
  }
  EXPECT_EQ(checked, 20);  // every tensor of the fixture: 2 embeddings' + 3 layers' (layer 0 without attn_norm) + final
  EXPECT_THROW(g.model->backward(g.io.get("upstream").f32(), g.io.get("upstream").f32()), std::logic_error);
}

// The band matters: the trainable model's local layer with a window covering the input gives other outputs.
TEST(FinetuneModernBert, SlidingWindowChangesTheOutput) {
  Golden g;
  nn::Context ctx;
  EncoderConfig wide = g.config;
  wide.json["local_attention"] = 64;
  nn::ParamStore store;
  ModernBertTrainable m(store, wide);
  store.finalize();
  SafeTensorsWeights w(fixture("finetune_modernbert/model.safetensors"));
  m.load(store, w);
  Tensor ids = g.io.get("input_ids");
  m.forward(ctx, ids.i64(), nullptr, g.mask.data(), ids.size(0), ids.size(1));
  EXPECT_FALSE(close_to(m.last_hidden_state(), g.io.get("last_hidden_state"), 1e-3));
}

TEST(FinetuneModernBert, DropoutFromTheConfigIsDrawnOnlyWithAnRng) {
  Golden g;
  g.config.json["attention_dropout"] = 0.1;
  g.config.json["mlp_dropout"] = 0.1;
  g.config.json["embedding_dropout"] = 0.1;
  nn::ParamStore store;
  ModernBertTrainable m(store, g.config);
  store.finalize();
  SafeTensorsWeights w(fixture("finetune_modernbert/model.safetensors"));
  m.load(store, w);
  Tensor ids = g.io.get("input_ids");
  nn::Context eval;
  m.forward(eval, ids.i64(), nullptr, g.mask.data(), ids.size(0), ids.size(1));
  EXPECT_TRUE(close_to(m.last_hidden_state(), g.io.get("last_hidden_state"), 1e-5));
  Rng rng(7);
  nn::Context train;
  train.rng = &rng;
  train.grad = true;
  m.forward(train, ids.i64(), nullptr, g.mask.data(), ids.size(0), ids.size(1));
  EXPECT_FALSE(close_to(m.last_hidden_state(), g.io.get("last_hidden_state"), 1e-3));
  store.zero_grad();
  std::vector<float> up(g.io.get("upstream").f32(), g.io.get("upstream").f32() + g.io.get("upstream").numel());
  m.backward(up.data(), nullptr);  // runs with the drawn masks
  g.config.json["mlp_dropout"] = 1.0;
  nn::ParamStore s2;
  EXPECT_THROW(ModernBertTrainable(s2, g.config), std::runtime_error);
}

// ---------------------------------------------------------------- finite differences of the new backward ops

namespace {
// The directional derivative of sum(f(x) * w) along each coordinate, central differences in double (of an f that
// may compute in fp32: its rounding, ~1e-7, divided by 2 eps is the differences' noise).
void expect_gradient(const std::function<void(std::vector<double>&, const std::vector<double>&)>& f,
                     std::vector<double> x, const std::vector<double>& w, const std::vector<float>& grad, double tol,
                     double eps = 1e-4) {
  std::vector<double> y;
  auto directional = [&] {
    f(y, x);
    double s = 0;
    for (size_t j = 0; j < y.size(); ++j) s += y[j] * w[j];
    return s;
  };
  test::expect_gradient(x, grad, directional, "coordinate", {eps, tol, 0.0});
}
std::vector<double> random_vector(Rng& rng, size_t n) {
  std::vector<double> v(n);
  for (double& x : v) x = rng.uniform() * 2 - 1;
  return v;
}
std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
}  // namespace

TEST(FinetuneModernBert, RotaryBackwardIsTheTransposedRotation) {
  const int64_t B = 2, L = 5, nh = 2, hd = 8, ld = 20, half = hd / 2;  // 2 heads rotated, 4 columns left alone
  std::vector<float> cs(L * half), sn(L * half);
  ops::rotary_tables(cs.data(), sn.data(), L, hd, 10000.0);
  Rng rng(3);
  const size_t n = B * L * ld;
  std::vector<double> x = random_vector(rng, n), w = random_vector(rng, n);
  auto f = [&](std::vector<double>& y, const std::vector<double>& in) {
    std::vector<float> t = to_float(in);
    ops::rotary_apply(t.data(), B, L, nh, hd, ld, cs.data(), sn.data());
    y.assign(t.begin(), t.end());
  };
  for (auto isa : tfm::test::isas()) {
    tfm::test::IsaScope scope(isa);
    std::vector<float> g = to_float(w);
    ops::rotary_backward(g.data(), B, L, nh, hd, ld, cs.data(), sn.data());
    expect_gradient(f, x, w, g, 2e-3);
  }
}

TEST(FinetuneModernBert, GluBackwardMatchesFiniteDifferences) {
  const int64_t N = 3, I = 5;
  Rng rng(4);
  std::vector<double> x = random_vector(rng, N * 2 * I), w = random_vector(rng, N * I);
  for (ops::Activation act : {ops::Activation::Gelu, ops::Activation::GeluTanh, ops::Activation::Silu}) {
    auto f = [&](std::vector<double>& y, const std::vector<double>& in) {
      std::vector<float> t = to_float(in), out(N * I);
      ops::glu_forward(out.data(), t.data(), N, I, act);
      y.assign(out.begin(), out.end());
    };
    std::vector<float> xf = to_float(x), wf = to_float(w), g(N * 2 * I);
    ops::glu_backward(g.data(), wf.data(), xf.data(), N, I, act);
    expect_gradient(f, x, w, g, 2e-3);
  }
}

TEST(FinetuneModernBert, LayerNormWithoutBiasBackward) {
  const int64_t N = 3, C = 6;
  Rng rng(5);
  std::vector<double> x = random_vector(rng, N * C), w = random_vector(rng, N * C);
  std::vector<float> gamma(C), zero(C, 0.0f);  // nn.LayerNorm(bias=False): a zero shift, no bias gradient
  for (int64_t c = 0; c < C; ++c) gamma[c] = 1.0f + 0.1f * (float)c;
  auto f = [&](std::vector<double>& y, const std::vector<double>& in) {
    std::vector<float> t = to_float(in), out(N * C);
    ops::layer_norm_forward(out.data(), nullptr, nullptr, t.data(), gamma.data(), zero.data(), N, C, 1e-5f);
    y.assign(out.begin(), out.end());
  };
  std::vector<float> xf = to_float(x), wf = to_float(w), out(N * C), mean(N), rstd(N), g(N * C), dgamma(C, 0.0f);
  ops::layer_norm_forward(out.data(), mean.data(), rstd.data(), xf.data(), gamma.data(), zero.data(), N, C, 1e-5f);
  ops::layer_norm_backward(g.data(), dgamma.data(), nullptr, wf.data(), xf.data(), gamma.data(), mean.data(),
                           rstd.data(), N, C);
  // The forward runs in fp32: a step of 3e-3 keeps its rounding noise near 5e-5 (at 1e-4 it reached the tolerance
  // in the -O1 sanitizer build), the truncation error of a step this size is ~1e-5.
  expect_gradient(f, x, w, g, 2e-3, 3e-3);
}

// ---------------------------------------------------------------- the tasks

namespace {

// finetune_modernbert/tasks (the body and every head) with config.json keys replaced by `patch`.
EncoderConfig task_config(const nlohmann::json& patch = nlohmann::json::object()) {
  const std::string path = fixture("finetune_modernbert/tasks/config.json");
  nlohmann::json j = load_json_file(path);
  for (auto& [k, v] : patch.items()) j[k] = v;
  return EncoderConfig::from_json(j, path);
}

struct TaskCase {
  const char* fixture;  // finetune_modernbert/<fixture>_steps.safetensors
  HeadKind kind;
  const char* patch;
  const char* architecture;
};

}  // namespace

// Three optimizer steps of each head (gradient accumulation in the second) equal the Trainer's on the PyTorch
// reference: every micro-batch's loss, every gradient, the norms, the rates and every parameter after the steps.
TEST(FinetuneModernBertTasks, StepsMatchPyTorch) {
  for (const TaskCase& p : {TaskCase{"seqcls", HeadKind::SequenceClassification, "{}", "ModernBertForSequenceClassification"},
                            TaskCase{"seqcls_mean", HeadKind::SequenceClassification, R"({"classifier_pooling": "mean"})",
                                     "ModernBertForSequenceClassification"},
                            TaskCase{"tokcls", HeadKind::TokenClassification, "{}", "ModernBertForTokenClassification"},
                            TaskCase{"mlm", HeadKind::MaskedLM, "{}", "ModernBertForMaskedLM"}}) {
    SCOPED_TRACE(p.fixture);
    const std::string base = fixture(std::string("finetune_modernbert/") + p.fixture);
    const SafeTensors st = SafeTensors::open(base + "_steps.safetensors");
    const nlohmann::json hj = load_json_file(base + "_hyper.json");
    CheckpointWeights w(fixture("finetune_modernbert/tasks"));
    std::unique_ptr<FinetuneModel> t =
        test::make_finetune_trainer(p.kind, task_config(nlohmann::json::parse(p.patch)), w, 3, test::hyperparameters_from_json(hj));
    EXPECT_EQ(t->architecture(), p.architecture);
    EXPECT_TRUE(t->frozen_parameters().empty());
    // No bias where ModernBERT has none (classifier_bias, norm_bias false), no untied decoder.
    for (const char* absent : {"head.dense.bias", "head.norm.bias", "model.final_norm.bias", "decoder.weight"})
      EXPECT_EQ(t->params().index_of(absent), -1) << absent;
    test::check_finetune_steps(*t, st, hj["parameters"].get<int64_t>());
  }
}

// The pooling matters: the mean-pooled classifier's loss differs from the cls one on the same weights and batch.
TEST(FinetuneModernBertTasks, MeanPoolingIsNotClsPooling) {
  const SafeTensors st = SafeTensors::open(fixture("finetune_modernbert/seqcls_steps.safetensors"));
  const FinetuneBatch b = test::finetune_batch_at(st, "step0.micro0.");
  CheckpointWeights w(fixture("finetune_modernbert/tasks"));
  FinetuneHyperparameters hp;
  SequenceClassificationTrainer cls(task_config(), w, 3, hp), mean(task_config({{"classifier_pooling", "mean"}}), w, 3, hp);
  EXPECT_GT(std::fabs(cls.compute_gradients(b, false) - mean.compute_gradients(b, false)), 1e-3);
}

// Central differences through the new head stages: the mean pooling, head.dense without bias, head.norm without
// bias, the classifier, and the tied decoder with decoder.bias.
TEST(FinetuneModernBertTasks, HeadBackwardMatchesFiniteDifferences) {
  FinetuneHyperparameters hp;
  hp.dropout = 0;
  CheckpointWeights w(fixture("finetune_modernbert/tasks"));
  {
    const SafeTensors st = SafeTensors::open(fixture("finetune_modernbert/seqcls_mean_steps.safetensors"));
    SequenceClassificationTrainer t(task_config({{"classifier_pooling", "mean"}}), w, 3, hp);
    test::check_finetune_finite_differences(t, test::finetune_batch_at(st, "step0.micro0."),
                                            {"head.dense.weight", "head.norm.weight", "classifier.weight",
                                             "classifier.bias", "model.layers.2.mlp.Wo.weight"});
  }
  {
    const SafeTensors st = SafeTensors::open(fixture("finetune_modernbert/mlm_steps.safetensors"));
    MaskedLMTrainer t(task_config(), w, hp);
    test::check_finetune_finite_differences(t, test::finetune_batch_at(st, "step0.micro0."),
                                            {"decoder.bias", "model.embeddings.tok_embeddings.weight",
                                             "head.norm.weight"});
  }
}

// A head the checkpoint lacks is drawn as ModernBERT's _init_weights draws it: truncated normals of std
// initializer_range / sqrt(2 num_hidden_layers) (head.dense) and hidden_size^-0.5 (classifier), cut at
// initializer_cutoff_factor standard deviations; the classifier's bias 0, head.norm's weight 1.
TEST(FinetuneModernBertTasks, MissingHeadIsInitialisedAsModernBertDoes) {
  EncoderConfig c = task_config();
  c.json["initializer_cutoff_factor"] = 2.0;
  SafeTensorsWeights body(fixture("finetune_modernbert/model.safetensors"));  // the body only
  SequenceClassificationTrainer t(c, body, 4, FinetuneHyperparameters{});
  auto check = [&](const std::string& name, double std) {
    const auto& e = t.params().entries()[t.params().index_of(name)];
    const float* v = t.params().all_data().data() + e.offset;
    double sq = 0, mx = 0;
    for (int64_t i = 0; i < e.numel; ++i) {
      sq += (double)v[i] * v[i];
      mx = std::max(mx, (double)std::fabs(v[i]));
    }
    EXPECT_LE(mx, 2.0 * std + 1e-7) << name;
    // The std of a normal truncated at 2 sigma is 0.88 sigma; over hundreds of draws within 25%.
    EXPECT_NEAR(std::sqrt(sq / (double)e.numel), 0.88 * std, 0.25 * std) << name;
  };
  check("head.dense.weight", 0.02 / std::sqrt(2.0 * 3));
  check("classifier.weight", 1.0 / std::sqrt(32.0));
  const auto& bias = t.params().entries()[t.params().index_of("classifier.bias")];
  for (int64_t i = 0; i < bias.numel; ++i) EXPECT_EQ(t.params().all_data()[bias.offset + i], 0.0f);
  const auto& norm = t.params().entries()[t.params().index_of("head.norm.weight")];
  for (int64_t i = 0; i < norm.numel; ++i) EXPECT_EQ(t.params().all_data()[norm.offset + i], 1.0f);
}

// The dropouts: ModernBERT's body reads its own keys (checked, [0, 1)), the classifiers classifier_dropout; a
// classifier_dropout alone drops in training (the head's dropout does not depend on the body's p).
TEST(FinetuneModernBertTasks, DropoutsComeFromTheModernBertKeys) {
  nlohmann::json j = task_config().json;
  j["classifier_dropout"] = 0.3;
  EXPECT_EQ(training_dropouts(j, HeadKind::SequenceClassification, "c.json"), (TrainingDropouts{0.0f, 0.0f, 0.3f}));
  EXPECT_EQ(training_dropouts(j, HeadKind::MaskedLM, "c.json"), (TrainingDropouts{0.0f, 0.0f, 0.0f}));
  j["mlp_dropout"] = 1.5;
  EXPECT_THROW(training_dropouts(j, HeadKind::TokenClassification, "c.json"), std::runtime_error);
  const SafeTensors st = SafeTensors::open(fixture("finetune_modernbert/seqcls_steps.safetensors"));
  const FinetuneBatch b = test::finetune_batch_at(st, "step0.micro0.");
  CheckpointWeights w(fixture("finetune_modernbert/tasks"));
  FinetuneHyperparameters hp;
  hp.dropout = 0.0f;
  hp.head_dropout = 0.5f;
  SequenceClassificationTrainer t(task_config(), w, 3, hp);
  const double eval = t.compute_gradients(b, /*dropout=*/false);
  EXPECT_NE(t.compute_gradients(b, /*dropout=*/true), eval);
  EXPECT_EQ(t.compute_gradients(b, /*dropout=*/false), eval);
}

// --precision bf16 on ModernBERT (TrainingArguments(bf16=True) on CPU): Wqkv, Wo, the GLU's Wi / Wo and the head's
// products in bf16 with fp32 accumulation, fp32 master weights. The fixture's three steps (accumulation in the
// second) stay close to fp32's, whose first loss is PyTorch's; the bf16 products do round differently.
TEST(FinetuneModernBertTasks, Bf16StepsStayCloseToFp32) {
  if (!ops::bf16_gemm_available()) GTEST_SKIP() << "no bf16 instructions on this CPU (" << ops::cpu_isa_name() << ")";
  const SafeTensors st = SafeTensors::open(fixture("finetune_modernbert/seqcls_steps.safetensors"));
  const FinetuneHyperparameters hp =
      test::hyperparameters_from_json(load_json_file(fixture("finetune_modernbert/seqcls_hyper.json")));
  CheckpointWeights w(fixture("finetune_modernbert/tasks"));
  SequenceClassificationTrainer f32(task_config(), w, 3, hp), b16(task_config(), w, 3, hp);
  b16.set_precision(ops::ComputeType::BF16);
  EXPECT_THROW(b16.set_precision(ops::ComputeType::I8), std::invalid_argument);
  for (int k = 0; k < 3; ++k) {
    const int micros = k == 1 ? 2 : 1;
    f32.params().zero_grad();
    b16.params().zero_grad();
    for (int j = 0; j < micros; ++j) {
      const FinetuneBatch b = test::finetune_batch_at(st, "step" + std::to_string(k) + ".micro" + std::to_string(j) + ".");
      const double l32 = f32.accumulate_gradients(b, 1.0f / (float)micros, false);
      const double l16 = b16.accumulate_gradients(b, 1.0f / (float)micros, false);
      if (k == 0) {
        EXPECT_NEAR(l32, st.get("micro_loss").f32()[0], 2e-5 * l32);  // the fp32 path is PyTorch's
      }
      EXPECT_NEAR(l16, l32, 0.02 * std::fabs(l32) + 1e-3) << "step " << k << " micro " << j;
      EXPECT_NE(l16, l32) << "bf16 products round differently";
    }
    if (k == 0) {  // the gradients of the first step, relative to their norm
      EXPECT_LT(test::relative_difference(b16.params().all_grad(), f32.params().all_grad()), 0.05);
    }
    f32.optimizer_step();
    b16.optimizer_step();
  }
  double diff = 0, scale = 0;
  for (size_t i = 0; i < f32.params().all_data().size(); ++i) {
    diff = std::max(diff, (double)std::fabs(f32.params().all_data()[i] - b16.params().all_data()[i]));
    scale = std::max(scale, (double)std::fabs(f32.params().all_data()[i]));
  }
  EXPECT_GT(diff, 0.0);
  EXPECT_LE(diff, 0.02 * scale);
}

// Where the CPU has no bf16 instructions (as this project's AMD Zen 3 machines), asking for bf16 is one clear
// error: the trainer's set_precision names the ISA; tfm finetune (classify on ModernBERT, embed) refuses before it
// loads or writes anything. The CLI runs cap oneDNN at AVX2, so they test the refusal on any CPU.
TEST(FinetuneModernBertTasks, Bf16IsRefusedWithoutBf16Instructions) {
  if (!ops::bf16_gemm_available()) {
    CheckpointWeights w(fixture("finetune_modernbert/tasks"));
    SequenceClassificationTrainer t(task_config(), w, 3, FinetuneHyperparameters{});
    try {
      t.set_precision(ops::ComputeType::BF16);
      ADD_FAILURE() << "bf16 was accepted on " << ops::cpu_isa_name();
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("precision 'bf16' needs a CPU with bf16 instructions"), std::string::npos) << m;
      EXPECT_NE(m.find(ops::cpu_isa_name()), std::string::npos) << m;
    }
  }
  (void)ops::has_bf16_gemm();  // this process has read its own ISA before the variables are set for the children
  test::TempFolder t;
  test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe cat is bad,neg\n");
  std::optional<test::EnvScope> dnnl(std::in_place, "DNNL_MAX_CPU_ISA", "AVX2");
  std::optional<test::EnvScope> onednn(std::in_place, "ONEDNN_MAX_CPU_ISA", "AVX2");
  std::optional<test::EnvScope> native(std::in_place, "TFM_EMULATE_BF16", nullptr);  // the suite's emulation off
  const test::TfmRun cls = test::run_tfm_in(
      t.path, {"finetune", "--model", fixture("family_heads/modernbert_seqcls"), "--train", t.path + "/train.csv",
               "--out", t.path + "/o", "--precision", "bf16", "--no-progress"});
  const test::TfmRun emb = test::run_tfm_in(
      t.path, {"finetune", "--task", "embed", "--model", fixture("st_mean"), "--train",
               fixture("finetune_embed/e2e_train.csv"), "--out", t.path + "/o", "--precision", "bf16"});
  dnnl.reset(), onednn.reset(), native.reset();
  for (const test::TfmRun* r : {&cls, &emb}) {
    test::expect_one_line_error(*r, "--precision bf16 needs a CPU with bf16 instructions (AVX512_BF16 or AMX)");
    EXPECT_NE(r->err.find("avx2"), std::string::npos) << r->err;
    EXPECT_NE(r->err.find("use --precision fp32"), std::string::npos) << r->err;
  }
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));
}

// Every name of ModernBERT's norms is left out of weight decay, as get_decay_parameter_names leaves them.
TEST(FinetuneModernBertTasks, NormsAreNotDecayed) {
  for (const char* n : {"model.embeddings.norm.weight", "model.layers.1.attn_norm.weight",
                        "model.layers.0.mlp_norm.weight", "model.final_norm.weight", "head.norm.weight",
                        "decoder.bias", "bert.encoder.layer.0.output.LayerNorm.weight", "lm_head.layer_norm.weight",
                        "distilbert.transformer.layer.0.sa_layer_norm.weight"})
    EXPECT_TRUE(is_no_decay_parameter(n)) << n;
  for (const char* n : {"model.layers.1.attn.Wqkv.weight", "head.dense.weight", "classifier.weight",
                        "model.embeddings.tok_embeddings.weight", "normal.weight", "layers.0.normx.weight"})
    EXPECT_FALSE(is_no_decay_parameter(n)) << n;
}

// A sentence-transformers model around ModernBertModel (mean pooling, Normalize) trains as PyTorch with
// MultipleNegativesRankingLoss: the bare body names, loaded from the "model."-prefixed checkpoint.
TEST(FinetuneModernBertTasks, SentenceEmbeddingStepsMatchPyTorch) {
  const SafeTensors st = SafeTensors::open(fixture("finetune_modernbert/embed_steps.safetensors"));
  const nlohmann::json hj = load_json_file(fixture("finetune_modernbert/embed_hyper.json"));
  CheckpointWeights w(fixture("finetune_modernbert/tasks"));
  PoolingConfig pooling;
  pooling.mean = true;
  SentenceEmbeddingTrainer t(task_config(), w, pooling, /*normalize=*/true, EmbeddingLoss::MultipleNegativesRanking,
                             test::hyperparameters_from_json(hj), hj["scale"].get<double>());
  EXPECT_GE(t.params().index_of("layers.1.attn_norm.weight"), 0);
  EXPECT_EQ(t.params().index_of("model.layers.1.attn_norm.weight"), -1);
  test::check_trainer_steps(t, st, hj["parameters"].get<int64_t>(), {},
                            [&](const std::string& p) { return test::sentence_batch_at(st, p, 0); });
}

// tfm finetune --task embed (the API) on a sentence-transformers folder around ModernBertModel (family_heads/
// modernbert_seqcls's weights under "model.", mean pooling, Normalize): it trains, writes the bare
// ModernBertModel names, and the folder loads for inference (SentenceTransformer, what tfm embed runs) to the
// embeddings of a trainer built on it.
TEST(FinetuneModernBertTasks, EmbedFolderTrainsAndReloadsToTheTrainersEmbeddings) {
  namespace fs = std::filesystem;
  test::TempFolder t;
  const std::string src = fixture("family_heads/modernbert_seqcls"), model = t.path + "/st", out = t.path + "/out";
  fs::create_directories(model + "/1_Pooling");
  fs::create_directories(model + "/2_Normalize");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    fs::create_symlink(src + "/" + f, model + "/" + f);
  test::spit(model + "/modules.json", R"([
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])");
  test::spit(model + "/1_Pooling/config.json", R"({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": true})");
  test::spit(model + "/sentence_bert_config.json", R"({"max_seq_length": 64, "do_lower_case": false})");
  FinetuneOptions o;
  o.task = "embed";
  o.train_file = fixture("finetune_embed/e2e_train.csv");
  o.out_dir = out;
  o.epochs = 2;
  o.batch_size = 4;
  o.learning_rate = 3e-3;
  o.threads = 1;
  const FinetuneSummary s = finetune(model, o);
  EXPECT_EQ(s.steps, 2);
  const SafeTensors saved = SafeTensors::open(out + "/model.safetensors"), orig = SafeTensors::open(src + "/model.safetensors");
  EXPECT_FALSE(saved.has("model.layers.1.attn.Wqkv.weight"));
  ASSERT_TRUE(saved.has("layers.1.attn.Wqkv.weight"));
  EXPECT_FALSE(close_to(saved.get("layers.1.attn.Wqkv.weight").f32(), orig.get("model.layers.1.attn.Wqkv.weight"), 1e-6));
  EXPECT_FALSE(saved.has("classifier.weight"));  // the ModernBertFor* head is not part of the Transformer module

  std::vector<std::string> sentences;
  std::ifstream sf(fixture("finetune_embed/e2e_sentences.txt"));
  for (std::string line; std::getline(sf, line);) sentences.push_back(line);
  ASSERT_GE(sentences.size(), 3u);
  EXPECT_TRUE(test::embeds_as_its_trainer(out, sentences));
}
