// Fine-tuning the BERT-like families (issue 25): RoBERTa (also as XLM-RoBERTa and CamemBERT), DistilBERT and
// MPNet (its steps in tests/test_finetune_mpnet.cpp), sequence classification, token classification and masked LM
// (ModernBERT's steps: test_finetune_modernbert.cpp; its folders and CLI runs here). Optimizer steps with gradient
// accumulation equal PyTorch autograd + the Hugging Face Trainer on the modeling files' heads
// (scripts/make_finetune_family_fixtures.py); the written folders carry the family's Hugging Face names and
// architectures and reload through the inference path (TaskModel, tfm classify / fill-mask) to the trainer's
// logits; a model without training (the tutorial encoder) is refused in one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "finetune_test_util.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "models/heads.h"
#include "run_tfm.h"
#include "test_util.h"
#include "tfm/finetune.h"
#include "train/finetune.h"

namespace tfm {
namespace {

using test::fixture;

// A family_heads folder's config, optionally with model_type or keys replaced (the same weights read as
// XLM-RoBERTa, or DistilBERT with sinusoidal_pos_embds).
EncoderConfig config_of(const std::string& folder, const nlohmann::json& patch = nlohmann::json::object()) {
  const std::string path = fixture("family_heads/" + folder + "/config.json");
  nlohmann::json j = load_json_file(path);
  for (auto& [k, v] : patch.items()) j[k] = v;
  return EncoderConfig::from_json(j, path);
}

struct StepCase {
  const char* fixture;  // finetune_family/<fixture>_steps.safetensors
  const char* model;    // family_heads/<model> (weights)
  const char* patch;    // JSON replacing config.json keys
  HeadKind kind;
  int64_t num_labels;
  const char* architecture;
  std::vector<const char*> names;  // tensors the store must hold (Hugging Face names)
};

void PrintTo(const StepCase& c, std::ostream* os) { *os << c.fixture << " on " << c.model << " " << c.patch; }

class FinetuneFamilySteps : public ::testing::TestWithParam<StepCase> {};

TEST_P(FinetuneFamilySteps, MatchPyTorch) {
  const StepCase& p = GetParam();
  const SafeTensors st = SafeTensors::open(fixture(std::string("finetune_family/") + p.fixture + "_steps.safetensors"));
  const nlohmann::json hj = load_json_file(fixture(std::string("finetune_family/") + p.fixture + "_hyper.json"));
  const EncoderConfig c = config_of(p.model, nlohmann::json::parse(p.patch));
  CheckpointWeights w(fixture(std::string("family_heads/") + p.model));
  std::unique_ptr<FinetuneModel> t =
      test::make_finetune_trainer(p.kind, c, w, p.num_labels, test::hyperparameters_from_json(hj));
  EXPECT_EQ(t->architecture(), p.architecture);
  for (const char* n : p.names) EXPECT_GE(t->params().index_of(n), 0) << n;
  const std::vector<std::string> frozen = hj["frozen"].get<std::vector<std::string>>();
  EXPECT_EQ(t->frozen_parameters(), frozen);
  test::check_finetune_steps(*t, st, hj["parameters"].get<int64_t>(), frozen);
}

INSTANTIATE_TEST_SUITE_P(
    Families, FinetuneFamilySteps,
    ::testing::Values(
        StepCase{"roberta_seqcls", "roberta_seqcls", "{}", HeadKind::SequenceClassification, 3,
                 "RobertaForSequenceClassification",
                 {"roberta.encoder.layer.1.attention.self.query.weight", "classifier.dense.weight",
                  "classifier.out_proj.bias"}},
        // CamemBERT's folder holds roberta_seqcls's weights under model_type camembert.
        StepCase{"roberta_seqcls", "camembert_seqcls", "{}", HeadKind::SequenceClassification, 3,
                 "CamembertForSequenceClassification", {"roberta.embeddings.token_type_embeddings.weight"}},
        StepCase{"roberta_tokcls", "roberta_tokcls", "{}", HeadKind::TokenClassification, 5,
                 "RobertaForTokenClassification", {"classifier.weight"}},
        StepCase{"roberta_tokcls", "roberta_tokcls", R"({"model_type": "xlm-roberta"})", HeadKind::TokenClassification,
                 5, "XLMRobertaForTokenClassification", {"roberta.embeddings.LayerNorm.weight"}},
        StepCase{"roberta_mlm", "roberta_mlm", "{}", HeadKind::MaskedLM, 0, "RobertaForMaskedLM",
                 {"lm_head.dense.weight", "lm_head.layer_norm.bias", "lm_head.bias"}},
        StepCase{"distilbert_seqcls", "distilbert_seqcls", "{}", HeadKind::SequenceClassification, 2,
                 "DistilBertForSequenceClassification",
                 {"distilbert.transformer.layer.1.attention.q_lin.weight", "pre_classifier.weight", "classifier.bias"}},
        StepCase{"distilbert_tokcls", "distilbert_tokcls", "{}", HeadKind::TokenClassification, 5,
                 "DistilBertForTokenClassification", {"distilbert.transformer.layer.0.ffn.lin2.bias"}},
        StepCase{"distilbert_mlm", "distilbert_mlm", "{}", HeadKind::MaskedLM, 0, "DistilBertForMaskedLM",
                 {"vocab_transform.weight", "vocab_layer_norm.weight", "vocab_projector.bias"}},
        // sinusoidal_pos_embds: the position table is not trained (requires_grad False in Hugging Face).
        StepCase{"distilbert_frozen", "distilbert_tokcls", R"({"sinusoidal_pos_embds": true})",
                 HeadKind::TokenClassification, 5, "DistilBertForTokenClassification", {}},
        // ELECTRA: embeddings 24 wide, embeddings_project to the layers' 32; ElectraClassificationHead's gelu.
        StepCase{"electra_seqcls", "electra_seqcls", "{}", HeadKind::SequenceClassification, 2,
                 "ElectraForSequenceClassification",
                 {"electra.embeddings_project.weight", "electra.embeddings.LayerNorm.bias", "classifier.dense.weight",
                  "classifier.out_proj.bias"}},
        StepCase{"electra_tokcls", "electra_tokcls", "{}", HeadKind::TokenClassification, 5,
                 "ElectraForTokenClassification", {"electra.embeddings_project.bias", "classifier.weight"}}),
    [](const ::testing::TestParamInfo<StepCase>& i) {
      std::string n = std::string(i.param.model) + (std::string(i.param.patch) == "{}" ? "" : "_patched");
      return n;
    });

// Central differences through the new head stages: RobertaClassificationHead's tanh, DistilBERT's
// pre_classifier + ReLU, RobertaLMHead's gelu + layer_norm and the tied decoder (dropout off).
TEST(FinetuneFamilies, NewHeadStagesBackwardMatchesFiniteDifferences) {
  FinetuneHyperparameters hp;
  hp.dropout = 0;
  {
    const SafeTensors st = SafeTensors::open(fixture("finetune_family/roberta_seqcls_steps.safetensors"));
    CheckpointWeights w(fixture("family_heads/roberta_seqcls"));
    SequenceClassificationTrainer t(config_of("roberta_seqcls"), w, 3, hp);
    test::check_finetune_finite_differences(t, test::finetune_batch_at(st, "step0.micro0."),
                                            {"classifier.dense.weight", "classifier.dense.bias",
                                             "classifier.out_proj.weight", "roberta.embeddings.position_embeddings.weight"});
  }
  {
    const SafeTensors st = SafeTensors::open(fixture("finetune_family/distilbert_seqcls_steps.safetensors"));
    CheckpointWeights w(fixture("family_heads/distilbert_seqcls"));
    SequenceClassificationTrainer t(config_of("distilbert_seqcls"), w, 2, hp);
    test::check_finetune_finite_differences(t, test::finetune_batch_at(st, "step0.micro0."),
                                            {"pre_classifier.weight", "pre_classifier.bias", "classifier.weight",
                                             "distilbert.transformer.layer.0.attention.q_lin.weight"});
  }
  {
    const SafeTensors st = SafeTensors::open(fixture("finetune_family/roberta_mlm_steps.safetensors"));
    CheckpointWeights w(fixture("family_heads/roberta_mlm"));
    MaskedLMTrainer t(config_of("roberta_mlm"), w, hp);
    test::check_finetune_finite_differences(t, test::finetune_batch_at(st, "step0.micro0."),
                                            {"lm_head.dense.weight", "lm_head.layer_norm.weight", "lm_head.bias",
                                             "roberta.embeddings.word_embeddings.weight"});
  }
  {  // ElectraClassificationHead's gelu, and the embeddings' projection (nn::Embeddings::project)
    const SafeTensors st = SafeTensors::open(fixture("finetune_family/electra_seqcls_steps.safetensors"));
    CheckpointWeights w(fixture("family_heads/electra_seqcls"));
    SequenceClassificationTrainer t(config_of("electra_seqcls"), w, 2, hp);
    test::check_finetune_finite_differences(t, test::finetune_batch_at(st, "step0.micro0."),
                                            {"classifier.dense.weight", "classifier.out_proj.weight",
                                             "electra.embeddings_project.weight", "electra.embeddings.LayerNorm.weight"});
  }
}

// The attention probabilities drop with their own p, as the modeling files do: BertSelfAttention's
// nn.Dropout(attention_probs_dropout_prob) (RoBERTa's and MPNet's alike), DistilBERT's MultiHeadSelfAttention
// nn.Dropout(attention_dropout). It used to be the body's p: with hidden_dropout_prob 0 the attention did not drop
// at all, and a negative attention_probs_dropout_prob went unchecked.
TEST(FinetuneFamilies, AttentionProbabilitiesDropWithTheirOwnP) {
  struct Case {
    const char* folder;
    const char* body_key;
    const char* attention_key;
    int64_t num_labels;
  };
  for (const Case& k : {Case{"roberta_seqcls", "hidden_dropout_prob", "attention_probs_dropout_prob", 3},
                        Case{"distilbert_seqcls", "dropout", "attention_dropout", 2},
                        Case{"mpnet_seqcls", "hidden_dropout_prob", "attention_probs_dropout_prob", 3}}) {
    SCOPED_TRACE(k.folder);
    nlohmann::json j = load_json_file(fixture(std::string("family_heads/") + k.folder + "/config.json"));
    j[k.body_key] = 0.0;
    j[k.attention_key] = 0.25;
    const TrainingDropouts d = training_dropouts(j, HeadKind::SequenceClassification, "c.json");
    EXPECT_EQ(d.body, 0.0f);
    EXPECT_EQ(d.attention, 0.25f);
    j[k.attention_key] = -1;
    EXPECT_THROW(training_dropouts(j, HeadKind::SequenceClassification, "c.json"), std::runtime_error);
    j.erase(k.attention_key);  // the config classes' default
    EXPECT_EQ(training_dropouts(j, HeadKind::SequenceClassification, "c.json").attention, 0.1f);
  }
  const SafeTensors st = SafeTensors::open(fixture("finetune_family/roberta_seqcls_steps.safetensors"));
  const FinetuneBatch b = test::finetune_batch_at(st, "step0.micro0.");
  CheckpointWeights w(fixture("family_heads/roberta_seqcls"));
  FinetuneHyperparameters hp;
  hp.dropout = 0.0f;
  hp.head_dropout = 0.0f;
  hp.attention_dropout = 0.5f;
  SequenceClassificationTrainer t(config_of("roberta_seqcls"), w, 3, hp);
  const double eval = t.compute_gradients(b, /*dropout=*/false);
  EXPECT_NE(t.compute_gradients(b, /*dropout=*/true), eval) << "the attention probabilities must drop alone";
  hp.attention_dropout = 0.0f;
  hp.dropout = 0.5f;
  hp.head_dropout = 0.0f;
  SequenceClassificationTrainer body_only(config_of("roberta_seqcls"), w, 3, hp);
  hp.dropout = 0.0f;
  SequenceClassificationTrainer off(config_of("roberta_seqcls"), w, 3, hp);
  EXPECT_EQ(off.compute_gradients(b, /*dropout=*/true), eval) << "every p 0: training mode is evaluation";
  EXPECT_NE(body_only.compute_gradients(b, /*dropout=*/true), eval);
}

// No token types in DistilBERT, no pooler where the family's head reads h[:, 0], and the tied decoders are not
// separate tensors.
TEST(FinetuneFamilies, StoresHoldTheFamilysTensorsOnly) {
  FinetuneHyperparameters hp;
  {
    CheckpointWeights w(fixture("family_heads/distilbert_seqcls"));
    SequenceClassificationTrainer t(config_of("distilbert_seqcls"), w, 2, hp);
    EXPECT_EQ(t.params().index_of("distilbert.embeddings.token_type_embeddings.weight"), -1);
    for (const auto& e : t.params().entries())
      EXPECT_TRUE(e.name.rfind("distilbert.", 0) == 0 || e.name.rfind("pre_classifier.", 0) == 0 ||
                  e.name.rfind("classifier.", 0) == 0)
          << e.name;
  }
  {
    CheckpointWeights w(fixture("family_heads/roberta_mlm"));
    MaskedLMTrainer t(config_of("roberta_mlm"), w, hp);
    EXPECT_EQ(t.params().index_of("roberta.pooler.dense.weight"), -1);
    EXPECT_EQ(t.params().index_of("lm_head.decoder.weight"), -1);
    EXPECT_EQ(t.params().index_of("lm_head.decoder.bias"), -1);
  }
}

// A family without a trainer is refused by name, with the supported ones listed.
TEST(FinetuneFamilies, OtherFamiliesAreRefusedNamingTheSupportedOnes) {
  EXPECT_EQ(std::string(trainable_model_types()),
            "bert, roberta, xlm-roberta, camembert, distilbert, mpnet, modernbert, electra");
  for (const char* folder : {"transformer_encoder"}) {
    const EncoderConfig c = EncoderConfig::load(fixture(std::string(folder) + "/config.json"));
    CheckpointWeights w(fixture(folder));
    try {
      SequenceClassificationTrainer t(c, w, 2, FinetuneHyperparameters{});
      ADD_FAILURE() << folder << " was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("model_type '" + c.model_type + "' cannot be fine-tuned yet"), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("(supported: ") + trainable_model_types() + ")"), std::string::npos) << m;
    }
  }
}

// ---------------------------------------------------------------- written folders

struct FolderCase {
  const char* model;  // family_heads/<model>
  const char* task;
  HeadKind kind;
  const char* architecture;
  std::vector<const char*> stored, absent;  // tensor names of the written model.safetensors
  const char* patch = nullptr;              // JSON replacing config.json keys of the model (a linked copy)
};

std::string train_file(const std::string& dir, const std::string& task) {
  return dir + "/train_" + task + (task == "token-classify" ? ".jsonl" : ".csv");
}

void write_task_data(const std::string& dir, const std::string& task) {
  const char* texts[] = {"the cat sat on the mat", "the dog is in the park", "people live in london",
                         "the capital of france is paris", "the man has a red car", "friends watch football"};
  std::ostringstream s;
  if (task == "classify") {
    s << "text,label\n";
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < 6; ++i) s << texts[i] << "," << (i % 2 ? "good" : "bad") << "\n";
  } else if (task == "token-classify") {
    for (int r = 0; r < 3; ++r)
      for (const char* l : {"paris", "london", "france"})
        s << "{\"tokens\": [\"the\", \"man\", \"is\", \"in\", \"" << l
          << "\"], \"tags\": [\"O\", \"B-PER\", \"O\", \"O\", \"B-LOC\"]}\n";
  } else {
    s << "text\n";
    for (int r = 0; r < 2; ++r)
      for (const char* t : texts) s << t << "\n";
  }
  test::spit(train_file(dir, task), s.str());
}

void PrintTo(const FolderCase& c, std::ostream* os) { *os << c.model << " " << c.task; }

class FinetuneFamilyFolders : public ::testing::TestWithParam<FolderCase> {};

// tfm finetune (the API) writes a folder that the inference path (TaskModel, what tfm classify and fill-mask load)
// reads to the logits of a trainer built on the same folder, with the family's names and architectures.
TEST_P(FinetuneFamilyFolders, ReloadThroughTheInferencePathToTheTrainersLogits) {
  const FolderCase& p = GetParam();
  test::TempFolder t;
  write_task_data(t.path, p.task);
  FinetuneOptions o;
  o.task = p.task;
  o.train_file = train_file(t.path, o.task);
  o.out_dir = t.path + "/out";
  o.epochs = 1;
  o.batch_size = 4;
  o.learning_rate = 3e-3;
  o.threads = 1;
  std::string model = fixture(std::string("family_heads/") + p.model);
  if (p.patch) {  // the folder as links, its config.json patched
    nlohmann::json cfg = load_json_file(model + "/config.json");
    const nlohmann::json patch = nlohmann::json::parse(p.patch);
    for (auto& [k, v] : patch.items()) cfg[k] = v;
    test::spit(t.path + "/config.json", cfg.dump(2));
    test::link_folder(model, t.path + "/model", {{"config.json", t.path + "/config.json"}});
    model = t.path + "/model";
  }
  const FinetuneSummary s = finetune(model, o);
  EXPECT_GT(s.steps, 0);
  const nlohmann::json cfg = load_json_file(o.out_dir + "/config.json");
  EXPECT_EQ(cfg["architectures"][0], p.architecture);
  EXPECT_EQ(cfg["model_type"], load_json_file(model + "/config.json")["model_type"]);
  const SafeTensors st = SafeTensors::open(o.out_dir + "/model.safetensors");
  for (const char* n : p.stored) EXPECT_TRUE(st.has(n)) << n;
  for (const char* n : p.absent) EXPECT_FALSE(st.has(n)) << n;
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/tokenizer.json"));

  // The same batch through the inference path and through a trainer on the written folder (no dropout).
  const TaskModel tm = TaskModel::load(o.out_dir, p.kind);
  EXPECT_EQ(tm.kind(), p.kind);
  const Encoding e1 = tm.tokenizer().encode(p.kind == HeadKind::MaskedLM ? "the cat sat on the " + tm.mask_token()
                                                                           : std::string("the man is in paris"));
  const Encoding e2 = tm.tokenizer().encode("people live in london");
  const int64_t pad = tm.encoder_config().pad_token_id;
  const BatchTensors bt = make_batch({e1, e2}, pad);
  FinetuneBatch b;
  b.B = bt.input_ids.size(0);
  b.L = bt.input_ids.size(1);
  b.input_ids.assign(bt.input_ids.i64(), bt.input_ids.i64() + b.B * b.L);
  b.token_type_ids.assign(bt.token_type_ids.i64(), bt.token_type_ids.i64() + b.B * b.L);
  for (int64_t i = 0; i < b.B * b.L; ++i) b.attention_mask.push_back((float)bt.attention_mask.i64()[i]);
  const EncoderConfig c = EncoderConfig::load(o.out_dir + "/config.json");
  CheckpointWeights w(o.out_dir);
  if (p.kind == HeadKind::SequenceClassification) {
    SequenceClassificationTrainer tr(c, w, (int64_t)s.labels.size(), FinetuneHyperparameters{});
    const Tensor want = tm.sequence_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask);
    EXPECT_TRUE(test::all_close(tr.logits(b).data(), want.f32(), want.numel(), 1e-4f));
  } else if (p.kind == HeadKind::TokenClassification) {
    TokenClassificationTrainer tr(c, w, (int64_t)s.labels.size(), FinetuneHyperparameters{});
    const Tensor want = tm.token_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask);
    const std::vector<float> got = tr.logits(b);
    const int64_t C = (int64_t)s.labels.size();
    int compared = 0;
    for (int64_t n = 0; n < b.B * b.L; ++n)  // the real tokens (padded rows differ by the pad's own position)
      if (b.attention_mask[n] > 0) {
        EXPECT_TRUE(test::all_close(got.data() + n * C, want.f32() + n * C, C, 1e-4f)) << n;
        ++compared;
      }
    EXPECT_GT(compared, 8);
  } else {
    MaskedLMTrainer tr(c, w, FinetuneHyperparameters{});
    std::vector<std::pair<int64_t, int64_t>> positions;
    b.labels.assign(b.B * b.L, kIgnoreLabel);
    for (int64_t r = 0; r < b.B; ++r)
      for (int64_t l = 1; l < b.L && b.attention_mask[r * b.L + l] > 0; l += 2) {
        positions.push_back({r, l});
        b.labels[r * b.L + l] = b.input_ids[r * b.L + l];
      }
    const Tensor want = tm.mlm_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask, positions);
    int64_t count = 0;
    const double loss = tr.loss_sum(b, &count);
    ASSERT_EQ(count, (int64_t)positions.size());
    double want_loss = 0;
    const int64_t V = c.vocab_size;
    for (size_t m = 0; m < positions.size(); ++m) {
      const float* z = want.f32() + m * V;
      const double mx = *std::max_element(z, z + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp((double)z[v] - mx);
      want_loss += std::log(sum) + mx - z[b.labels[positions[m].first * b.L + positions[m].second]];
    }
    EXPECT_NEAR(loss, want_loss, 1e-4 * std::fabs(want_loss));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, FinetuneFamilyFolders,
    ::testing::Values(
        FolderCase{"roberta_seqcls", "classify", HeadKind::SequenceClassification, "RobertaForSequenceClassification",
                   {"roberta.encoder.layer.0.attention.self.key.weight", "classifier.dense.weight",
                    "classifier.out_proj.weight"},
                   {"roberta.pooler.dense.weight", "classifier.weight"}},
        FolderCase{"camembert_seqcls", "classify", HeadKind::SequenceClassification,
                   "CamembertForSequenceClassification", {"classifier.out_proj.bias"}, {}},
        FolderCase{"roberta_tokcls", "token-classify", HeadKind::TokenClassification, "RobertaForTokenClassification",
                   {"classifier.weight", "roberta.embeddings.position_embeddings.weight"}, {"roberta.pooler.dense.weight"}},
        FolderCase{"roberta_mlm", "mlm", HeadKind::MaskedLM, "RobertaForMaskedLM",
                   {"lm_head.dense.weight", "lm_head.layer_norm.weight", "lm_head.bias"}, {"lm_head.decoder.weight"}},
        FolderCase{"distilbert_seqcls", "classify", HeadKind::SequenceClassification,
                   "DistilBertForSequenceClassification",
                   {"distilbert.transformer.layer.1.sa_layer_norm.weight", "pre_classifier.weight", "classifier.weight"},
                   {"distilbert.embeddings.token_type_embeddings.weight"}},
        FolderCase{"distilbert_tokcls", "token-classify", HeadKind::TokenClassification,
                   "DistilBertForTokenClassification", {"classifier.bias"}, {"pre_classifier.weight"}},
        FolderCase{"distilbert_mlm", "mlm", HeadKind::MaskedLM, "DistilBertForMaskedLM",
                   {"vocab_transform.weight", "vocab_layer_norm.bias", "vocab_projector.bias"},
                   {"vocab_projector.weight"}},
        // ModernBERT: no biases but the classifier's and decoder.bias, no norm biases (norm_bias false).
        FolderCase{"modernbert_seqcls", "classify", HeadKind::SequenceClassification,
                   "ModernBertForSequenceClassification",
                   {"model.layers.1.attn.Wqkv.weight", "model.final_norm.weight", "head.dense.weight",
                    "head.norm.weight", "classifier.weight", "classifier.bias"},
                   {"head.dense.bias", "head.norm.bias", "model.final_norm.bias"}},
        FolderCase{"modernbert_seqcls", "classify", HeadKind::SequenceClassification,
                   "ModernBertForSequenceClassification", {"head.dense.weight", "classifier.bias"}, {},
                   R"({"classifier_pooling": "mean"})"},
        FolderCase{"modernbert_tokcls", "token-classify", HeadKind::TokenClassification,
                   "ModernBertForTokenClassification", {"head.norm.weight", "classifier.weight"}, {}},
        FolderCase{"modernbert_mlm", "mlm", HeadKind::MaskedLM, "ModernBertForMaskedLM",
                   {"head.dense.weight", "decoder.bias", "model.embeddings.tok_embeddings.weight"},
                   {"decoder.weight"}},
        // ELECTRA: no pooler; the projection saved with the body.
        FolderCase{"electra_seqcls", "classify", HeadKind::SequenceClassification, "ElectraForSequenceClassification",
                   {"electra.embeddings_project.weight", "classifier.dense.weight", "classifier.out_proj.weight"},
                   {"electra.pooler.dense.weight", "classifier.weight"}},
        FolderCase{"electra_tokcls", "token-classify", HeadKind::TokenClassification, "ElectraForTokenClassification",
                   {"electra.embeddings_project.bias", "classifier.weight"}, {"classifier.dense.weight"}}),
    [](const ::testing::TestParamInfo<FolderCase>& i) {
      return std::string(i.param.model) + (i.param.patch ? "_patched" : "");
    });

// MPNet: RoBERTa's heads under "mpnet.", the relative position bias saved with the body.
INSTANTIATE_TEST_SUITE_P(
    MPNet, FinetuneFamilyFolders,
    ::testing::Values(
        FolderCase{"mpnet_seqcls", "classify", HeadKind::SequenceClassification, "MPNetForSequenceClassification",
                   {"mpnet.encoder.relative_attention_bias.weight", "mpnet.encoder.layer.1.attention.attn.o.weight",
                    "classifier.dense.weight", "classifier.out_proj.weight"},
                   {"mpnet.pooler.dense.weight", "mpnet.embeddings.token_type_embeddings.weight"}},
        FolderCase{"mpnet_tokcls", "token-classify", HeadKind::TokenClassification, "MPNetForTokenClassification",
                   {"classifier.weight", "mpnet.encoder.relative_attention_bias.weight"}, {"classifier.dense.weight"}},
        FolderCase{"mpnet_mlm", "mlm", HeadKind::MaskedLM, "MPNetForMaskedLM",
                   {"lm_head.dense.weight", "lm_head.layer_norm.weight", "lm_head.bias"}, {"lm_head.decoder.weight"}}),
    [](const ::testing::TestParamInfo<FolderCase>& i) { return std::string(i.param.model); });

// ---------------------------------------------------------------- the CLI

// tfm finetune on each family and task, then the written folder in tfm classify / fill-mask.
TEST(FinetuneFamiliesCli, EveryFamilyAndTaskTrainsAndLoads) {
  test::TempFolder t;
  for (const char* task : {"classify", "token-classify", "mlm"}) write_task_data(t.path, task);
  struct Run {
    const char* model;
    const char* task;
    std::vector<std::string> use;  // the command run on the written folder
  };
  const std::vector<Run> runs = {
      {"roberta_seqcls", "classify", {"classify", "the man is in paris"}},
      {"roberta_tokcls", "token-classify", {"classify", "the man is in paris"}},
      {"roberta_mlm", "mlm", {"fill-mask", "the cat sat on the <mask>"}},
      {"camembert_seqcls", "classify", {"classify", "the man is in paris"}},
      {"distilbert_seqcls", "classify", {"classify", "the man is in paris"}},
      {"distilbert_tokcls", "token-classify", {"classify", "the man is in paris"}},
      {"distilbert_mlm", "mlm", {"fill-mask", "the cat sat on the [MASK]"}},
      {"modernbert_seqcls", "classify", {"classify", "the man is in paris"}},
      {"modernbert_tokcls", "token-classify", {"classify", "the man is in paris"}},
      {"modernbert_mlm", "mlm", {"fill-mask", "the cat sat on the <mask>"}},
      {"mpnet_seqcls", "classify", {"classify", "the man is in paris"}},
      {"mpnet_tokcls", "token-classify", {"classify", "the man is in paris"}},
      {"mpnet_mlm", "mlm", {"fill-mask", "the cat sat on the <mask>"}},
      {"electra_seqcls", "classify", {"classify", "the man is in paris"}},
      {"electra_tokcls", "token-classify", {"classify", "the man is in paris"}},
  };
  for (const Run& r : runs) {
    const std::string out = t.path + "/" + r.model;
    const std::string train = train_file(t.path, r.task);
    test::TfmRun f = test::run_tfm_in(
        t.path, {"finetune", "--task", r.task, "--model", fixture(std::string("family_heads/") + r.model), "--train",
                 train, "--out", out, "--epochs", "2", "--batch-size", "4", "--lr", "3e-3", "--threads", "1",
                 "--no-progress"});
    ASSERT_EQ(f.exit_code, 0) << r.model << " " << f.describe();
    EXPECT_TRUE(std::filesystem::exists(out + "/train_log.csv")) << r.model;
    std::vector<std::string> use = r.use;
    use.insert(use.begin() + 1, {"--model", out});
    test::TfmRun u = test::run_tfm_in(t.path, use);
    ASSERT_EQ(u.exit_code, 0) << r.model << " " << u.describe();
    EXPECT_TRUE(nlohmann::json::accept(u.out.substr(0, u.out.find('\n')))) << u.out;
  }
}

TEST(FinetuneFamiliesCli, UnsupportedFamilyIsAOneLineError) {
  test::TempFolder t;
  test::spit(t.path + "/train.csv", "text,label\nthe cat,a\nthe dog,b\n");
  for (const char* folder : {"transformer_encoder"}) {
    test::TfmRun r = test::run_tfm_in(t.path, {"finetune", "--model", fixture(folder),
                                               "--train", t.path + "/train.csv", "--out", t.path + "/o",
                                               "--no-progress"});
    test::expect_one_line_error(r, std::string("cannot be fine-tuned yet (supported: ") + trainable_model_types() + ")");
  }
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));
}

}  // namespace
}  // namespace tfm
