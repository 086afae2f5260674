// Fine-tuning token classification and masked LM (issue 25): optimizer steps with gradient accumulation against
// PyTorch autograd + the Hugging Face Trainer (scripts/make_finetune_task_fixtures.py), finite differences of the
// new heads' backward, DataCollatorForLanguageModeling's masking, seqeval's entities, saved folders reloading to
// the same outputs, and resume after a stop equal bit for bit to an uninterrupted run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>

#include "eval/seqeval.h"
#include "finetune_test_util.h"
#include "io/json_util.h"
#include "io/safetensors.h"
#include "io/table.h"
#include "models/checkpoint_weights.h"
#include "models/encoder.h"
#include "ops/gemm_bf16.h"
#include "ops/isa.h"
#include "run_tfm.h"
#include "test_util.h"
#include "tfm/classifier.h"
#include "tfm/finetune.h"
#include "tfm/tokenizer.h"
#include "train/finetune.h"
#include "train/group_texts.h"

namespace tfm {
namespace {

using test::fixture;

FinetuneBatch batch_at(const SafeTensors& st, const std::string& p) { return test::finetune_batch_at(st, p); }

FinetuneHyperparameters hyper(const std::string& name, int64_t* parameters) {
  const nlohmann::json j = load_json_file(fixture("finetune/" + name));
  *parameters = j["parameters"];
  return test::hyperparameters_from_json(j);
}

void check_steps(FinetuneModel& t, const SafeTensors& st, int64_t parameters) {
  test::check_finetune_steps(t, st, parameters);
}

TEST(FinetuneTasks, TokenClassificationStepsWithAccumulationMatchPyTorch) {
  const SafeTensors st = SafeTensors::open(fixture("finetune/token_steps.safetensors"));
  const EncoderConfig c = EncoderConfig::load(fixture("heads_tokcls/config.json"));
  CheckpointWeights w(fixture("heads_tokcls"));
  int64_t parameters = 0;
  const FinetuneHyperparameters hp = hyper("token_hyper.json", &parameters);
  TokenClassificationTrainer t(c, w, 5, hp);
  EXPECT_EQ(t.params().index_of("bert.pooler.dense.weight"), -1);  // add_pooling_layer=False
  check_steps(t, st, parameters);
}

TEST(FinetuneTasks, MaskedLMStepsWithTiedDecoderMatchPyTorch) {
  const SafeTensors st = SafeTensors::open(fixture("finetune/mlm_steps.safetensors"));
  const EncoderConfig c = EncoderConfig::load(fixture("heads_mlm/config.json"));
  CheckpointWeights w(fixture("heads_mlm"));
  int64_t parameters = 0;
  const FinetuneHyperparameters hp = hyper("mlm_hyper.json", &parameters);
  MaskedLMTrainer t(c, w, hp);
  EXPECT_EQ(t.params().index_of("cls.predictions.decoder.weight"), -1);  // tied: the word embeddings
  check_steps(t, st, parameters);
}

void check_finite_differences(FinetuneModel& t, const FinetuneBatch& b, const std::vector<std::string>& names) {
  test::check_finetune_finite_differences(t, b, names);
}

TEST(FinetuneTasks, NewHeadsBackwardMatchesFiniteDifferences) {
  const SafeTensors tok = SafeTensors::open(fixture("finetune/token_steps.safetensors"));
  const SafeTensors mlm = SafeTensors::open(fixture("finetune/mlm_steps.safetensors"));
  int64_t n = 0;
  {
    TokenClassificationTrainer t(EncoderConfig::load(fixture("heads_tokcls/config.json")),
                                 *std::make_unique<CheckpointWeights>(fixture("heads_tokcls")), 5,
                                 hyper("token_hyper.json", &n));
    check_finite_differences(t, batch_at(tok, "step0.micro0."),
                             {"classifier.weight", "classifier.bias", "bert.encoder.layer.1.output.dense.weight"});
  }
  {
    CheckpointWeights w(fixture("heads_mlm"));
    MaskedLMTrainer t(EncoderConfig::load(fixture("heads_mlm/config.json")), w, hyper("mlm_hyper.json", &n));
    check_finite_differences(t, batch_at(mlm, "step0.micro0."),
                             {"cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
                              "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
                              "cls.predictions.bias", "bert.embeddings.word_embeddings.weight"});
  }
}

// Gradient accumulation of two equal micro-batches (loss / 2 each) is the big batch's mean (classification).
TEST(FinetuneTasks, GradientAccumulationEqualsTheBigBatch) {
  const EncoderConfig c = EncoderConfig::load(fixture("heads_seqcls/config.json"));
  CheckpointWeights w(fixture("heads_seqcls"));
  FinetuneHyperparameters hp;
  hp.dropout = 0;
  SequenceClassificationTrainer t(c, w, 3, hp);
  FinetuneBatch big;
  big.B = 4;
  big.L = 4;
  big.input_ids = {2, 17, 60, 3, 2, 44, 45, 3, 2, 57, 21, 3, 2, 31, 66, 3};
  big.attention_mask.assign(16, 1.0f);
  big.labels = {0, 2, 1, 2};
  auto half = [&](int h) {
    FinetuneBatch b;
    b.B = 2;
    b.L = 4;
    b.input_ids.assign(big.input_ids.begin() + 8 * h, big.input_ids.begin() + 8 * h + 8);
    b.attention_mask.assign(8, 1.0f);
    b.labels.assign(big.labels.begin() + 2 * h, big.labels.begin() + 2 * h + 2);
    return b;
  };
  const double loss = t.compute_gradients(big, false);
  const std::vector<float> g_big = t.params().all_grad();
  t.params().zero_grad();
  const double l0 = t.accumulate_gradients(half(0), 0.5f, false), l1 = t.accumulate_gradients(half(1), 0.5f, false);
  EXPECT_NEAR((l0 + l1) / 2, loss, 1e-6);
  double scale = 0;
  for (float g : g_big) scale = std::max(scale, (double)std::fabs(g));
  EXPECT_TRUE(test::all_close(t.params().all_grad(), g_big, (float)(1e-5 * scale)));
}

// --precision bf16 (TrainingArguments(bf16=True) on CPU): the step's loss and gradients stay close to fp32's, and
// the parameters are fp32 master weights (updates smaller than a bf16 step of the weight are kept).
TEST(FinetuneTasks, Bf16StepsStayCloseToFp32WithFp32MasterWeights) {
  if (!ops::bf16_gemm_available()) GTEST_SKIP() << "no bf16 instructions on this CPU (" << ops::cpu_isa_name() << ")";
  const SafeTensors st = SafeTensors::open(fixture("finetune/token_steps.safetensors"));
  const EncoderConfig c = EncoderConfig::load(fixture("heads_tokcls/config.json"));
  CheckpointWeights w(fixture("heads_tokcls"));
  int64_t n = 0;
  const FinetuneHyperparameters hp = hyper("token_hyper.json", &n);
  TokenClassificationTrainer f32(c, w, 5, hp), bf16(c, w, 5, hp);
  bf16.set_precision(ops::ComputeType::BF16);
  EXPECT_THROW(bf16.set_precision(ops::ComputeType::I8), std::invalid_argument);
  const FinetuneBatch b = batch_at(st, "step0.micro0.");
  const double l32 = f32.compute_gradients(b, false), l16 = bf16.compute_gradients(b, false);
  EXPECT_NEAR(l16, l32, 2e-2 * l32);
  EXPECT_NEAR(l32, st.get("micro_loss").f32()[0], 1e-4 * l32);  // the fp32 path is PyTorch's
  const double diff = test::relative_difference(bf16.params().all_grad(), f32.params().all_grad());
  EXPECT_LT(diff, 0.05);
  EXPECT_GT(diff, 0.0);  // the products did run in bf16
  // Two steps (the first at lr 0 of the warmup): the second's small updates are kept in the fp32 weights.
  const FinetuneBatch b1 = batch_at(st, "step2.micro0.");
  bf16.train_step(b);
  const std::vector<float> before = bf16.params().all_data();
  bf16.train_step(b1);
  int64_t below_bf16_step = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const float d = std::fabs(bf16.params().all_data()[i] - before[i]);
    if (d > 0 && d < std::fabs(before[i]) / 512) ++below_bf16_step;  // under half a bf16 ulp (8 mantissa bits)
  }
  EXPECT_GT(below_bf16_step, 100);
}

// DataCollatorForLanguageModeling.torch_mask_tokens: 15% of the non-special positions chosen, of those 80%
// [MASK], 10% a random id, 10% unchanged; special tokens and padding never; a seed repeats the masks.
TEST(FinetuneTasks, MaskingIsTheCollators) {
  FinetuneBatch b;
  b.B = 100;
  b.L = 200;
  std::vector<bool> special(b.B * b.L, false);
  for (int64_t i = 0; i < b.B * b.L; ++i) {
    b.input_ids.push_back(5 + i % 70);
    if (i % b.L == 0 || i % b.L >= 190) special[i] = true, b.input_ids.back() = 2;
  }
  b.attention_mask.assign(b.B * b.L, 1.0f);
  FinetuneBatch a = b;
  Rng rng(7);
  mask_tokens_for_mlm(a, special, 4, 79, 0.15, rng);
  int64_t chosen = 0, masked = 0, kept = 0, eligible = 0;
  for (int64_t i = 0; i < b.B * b.L; ++i) {
    eligible += !special[i];
    if (a.labels[i] == kIgnoreLabel) {
      EXPECT_EQ(a.input_ids[i], b.input_ids[i]);
      continue;
    }
    ASSERT_FALSE(special[i]) << i;
    EXPECT_EQ(a.labels[i], b.input_ids[i]);
    ++chosen;
    masked += a.input_ids[i] == 4;
    kept += a.input_ids[i] == b.input_ids[i];
  }
  const double frac = (double)chosen / eligible;
  EXPECT_NEAR(frac, 0.15, 0.01);  // 18,900 eligible: sd 0.0026
  EXPECT_NEAR((double)masked / chosen, 0.8, 0.03);
  EXPECT_NEAR((double)kept / chosen, 0.1 + 0.1 / 79, 0.025);  // a random id may equal the original
  FinetuneBatch again = b;
  Rng rng2(7);
  mask_tokens_for_mlm(again, special, 4, 79, 0.15, rng2);
  EXPECT_EQ(again.input_ids, a.input_ids);
  EXPECT_EQ(again.labels, a.labels);
}

// seqeval's documented examples (README and get_entities' docstring).
TEST(FinetuneTasks, SeqevalEntitiesAndMicroF1) {
  using E = std::tuple<std::string, int64_t, int64_t>;
  EXPECT_EQ(seqeval_entities({{"B-PER", "I-PER", "O", "B-LOC"}}), (std::vector<E>{{"PER", 0, 1}, {"LOC", 3, 3}}));
  // Lenient (default) mode: I- after O starts a chunk; a change of type ends one.
  EXPECT_EQ(seqeval_entities({{"O", "I-PER", "I-PER", "I-LOC"}}), (std::vector<E>{{"PER", 1, 2}, {"LOC", 3, 3}}));
  const std::vector<std::vector<std::string>> y_true = {{"O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"},
                                                        {"B-PER", "I-PER", "O"}};
  const std::vector<std::vector<std::string>> y_pred = {{"O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"},
                                                        {"B-PER", "I-PER", "O"}};
  const SeqevalScores s = seqeval_scores(y_true, y_pred);
  EXPECT_DOUBLE_EQ(s.f1, 0.5);
  EXPECT_DOUBLE_EQ(s.precision, 0.5);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
}

// ---------------------------------------------------------------- the API end to end

void write_ner_task(const std::string& dir) {
  // Locations after "in"; persons ("man", "friends", with a continuation sub-token in "friendsie") first.
  const char* locs[] = {"paris", "london", "england", "france", "londonie"};
  const char* pers[] = {"man", "friends", "men", "friendsie"};
  std::ostringstream train, eval;
  int i = 0;
  for (const char* p : pers)
    for (const char* l : locs) {
      const std::string row = std::string("{\"tokens\": [\"the\", \"") + p + "\", \"is\", \"in\", \"" + l +
                              "\"], \"tags\": [\"O\", \"B-PER\", \"O\", \"O\", \"B-LOC\"]}\n";
      ((i++ % 5 == 4) ? eval : train) << row;
      train << "{\"tokens\": [\"" << l << "\", \"has\", \"a\", \"park\"], \"tags\": [\"B-LOC\", \"O\", \"O\", \"O\"]}\n";
    }
  test::spit(dir + "/train.jsonl", train.str());
  test::spit(dir + "/eval.jsonl", eval.str());
}

void write_mlm_task(const std::string& dir) {
  std::ostringstream train, eval;
  train << "text\n";
  eval << "text\n";
  const char* s[] = {"the cat sat on the mat", "the dog is in the park", "people live in london",
                     "the capital of france is paris", "the man has a red car", "friends watch football"};
  for (int r = 0; r < 4; ++r)
    for (const char* t : s) train << t << "\n";
  for (const char* t : s) eval << t << "\n";
  test::spit(dir + "/train.csv", train.str());
  test::spit(dir + "/eval.csv", eval.str());
}

TEST(FinetuneTasks, TokenClassifierFolderReloadsToTheTrainersLogits) {
  test::TempFolder t;
  write_ner_task(t.path);
  FinetuneOptions o;
  o.task = "token-classify";
  o.train_file = t.path + "/train.jsonl";
  o.out_dir = t.path + "/ner";
  o.epochs = 2;
  o.batch_size = 4;
  o.learning_rate = 3e-3;
  o.threads = 1;
  // The model's id2label holds every tag of the data: it is kept (continued fine-tuning of its classifier).
  const FinetuneSummary s = finetune(fixture("heads_tokcls"), o);
  EXPECT_EQ(s.labels, (std::vector<std::string>{"O", "B-LOC", "I-LOC", "B-PER", "I-PER"}));
  const nlohmann::json cfg = load_json_file(o.out_dir + "/config.json");
  EXPECT_EQ(cfg["architectures"][0], "BertForTokenClassification");
  EXPECT_EQ(cfg["id2label"]["3"], "B-PER");
  EXPECT_EQ(cfg["label2id"]["B-LOC"], 1);
  EXPECT_FALSE(SafeTensors::open(o.out_dir + "/model.safetensors").has("bert.pooler.dense.weight"));
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/trainer_state.safetensors"));  // removed when done
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/loss.png"));
  // The written folder through the inference engine (tfm classify's TokenClassifier) and through the trainer.
  const TokenClassifier tc(o.out_dir);
  const TextEncoding e = tc.tokenizer().encode("the man is in paris");
  TagOptions to;
  to.function = "none";
  to.all_tokens = true;
  const auto tags = tc.tag({e}, to);
  CheckpointWeights w(o.out_dir);
  TokenClassificationTrainer tr(EncoderConfig::load(o.out_dir + "/config.json"), w, 5, FinetuneHyperparameters{});
  FinetuneBatch b;
  b.B = 1;
  b.L = (int64_t)e.input_ids.size();
  b.input_ids = e.input_ids;
  b.token_type_ids = e.token_type_ids;
  b.attention_mask.assign(b.L, 1.0f);
  const std::vector<float> logits = tr.logits(b);
  ASSERT_EQ(tags[0].size(), (size_t)b.L - 2);
  for (const TokenTag& tag : tags[0]) {
    const float* z = logits.data() + tag.index * 5;
    const int64_t arg = std::max_element(z, z + 5) - z;
    EXPECT_EQ(tag.entity, s.labels[arg]) << tag.word;
    EXPECT_NEAR(tag.score, z[arg], 1e-4) << tag.word;
  }
}

TEST(FinetuneTasks, MaskedLMFolderReloadsToTheTrainersLoss) {
  test::TempFolder t;
  write_mlm_task(t.path);
  FinetuneOptions o;
  o.task = "mlm";
  o.train_file = t.path + "/train.csv";
  o.eval_file = t.path + "/eval.csv";
  o.out_dir = t.path + "/mlm";
  o.epochs = 2;
  o.batch_size = 4;
  o.learning_rate = 2e-3;
  o.threads = 1;
  const FinetuneSummary s = finetune(fixture("heads_mlm"), o);
  ASSERT_EQ(s.best_eval_metrics.size(), 2u);
  EXPECT_EQ(s.best_eval_metrics[1].first, "eval_perplexity");
  EXPECT_NEAR(s.best_eval_metrics[1].second, std::exp(s.best_eval_metrics[0].second), 1e-9);
  const nlohmann::json cfg = load_json_file(o.out_dir + "/config.json");
  EXPECT_EQ(cfg["architectures"][0], "BertForMaskedLM");
  EXPECT_FALSE(cfg.contains("id2label"));
  const SafeTensors st = SafeTensors::open(o.out_dir + "/model.safetensors");
  EXPECT_TRUE(st.has("cls.predictions.bias"));
  EXPECT_FALSE(st.has("cls.predictions.decoder.weight"));  // tied, as save_pretrained leaves it out
  // fill-mask's probability of the true token at a [MASK] equals exp(-loss) of the trainer on the written folder.
  const MaskFiller mf(o.out_dir);
  const TextEncoding e = mf.tokenizer().encode("the cat sat on the [MASK]");
  const auto cands = mf.fill({e}, mf.vocab_size());
  const int64_t mat = mf.tokenizer().token_to_id("mat");
  double p_mat = -1;
  for (const MaskCandidate& c : cands[0][0])
    if (c.token == mat) p_mat = c.score;
  CheckpointWeights w(o.out_dir);
  MaskedLMTrainer tr(EncoderConfig::load(o.out_dir + "/config.json"), w, FinetuneHyperparameters{});
  FinetuneBatch b;
  b.B = 1;
  b.L = (int64_t)e.input_ids.size();
  b.input_ids = e.input_ids;
  b.token_type_ids = e.token_type_ids;
  b.attention_mask.assign(b.L, 1.0f);
  b.labels.assign(b.L, kIgnoreLabel);
  for (int64_t l = 0; l < b.L; ++l)
    if (e.input_ids[l] == mf.mask_token_id()) b.labels[l] = mat;
  int64_t n = 0;
  const double loss = tr.loss_sum(b, &n);
  ASSERT_EQ(n, 1);
  EXPECT_NEAR(p_mat, std::exp(-loss), 1e-5 + 1e-4 * p_mat);
}

// A run stopped after a saved state and resumed ends with the same bytes as one that never stopped (same machine
// and threads): weights, AdamW moments, step, shuffling, dropout and masking generators all come back.
void expect_resume_bit_exact(const std::string& model, FinetuneOptions o, int64_t stop_at_step) {
  const std::string whole = o.out_dir + "_whole", stopped = o.out_dir + "_stopped";
  o.out_dir = whole;
  const FinetuneSummary a = finetune(model, o);
  o.out_dir = stopped;
  FinetuneOptions first = o;
  first.progress = [stop_at_step](const FinetuneProgress& p) {
    if (!p.epoch_end && p.step == stop_at_step) throw std::runtime_error("stopped");
  };
  EXPECT_THROW(finetune(model, first), std::runtime_error);
  ASSERT_TRUE(std::filesystem::exists(stopped + "/trainer_state.safetensors"));
  // A resumed run must have the saved run's options; without --resume the folder is not empty.
  FinetuneOptions other = o;
  other.resume = true;
  other.learning_rate *= 2;
  try {
    finetune(model, other);
    ADD_FAILURE() << "resumed with another learning rate";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("learning_rate"), std::string::npos) << e.what();
  }
  EXPECT_THROW(finetune(model, o), std::invalid_argument);
  FinetuneOptions second = o;
  second.resume = true;
  const FinetuneSummary b = finetune(model, second);
  EXPECT_GT(b.resumed_from_step, 0);
  EXPECT_LT(b.resumed_from_step, stop_at_step);
  EXPECT_EQ(a.steps, b.steps);
  // step_seconds: one time per step this call ran (the resumed call: only those after the saved step).
  EXPECT_EQ((int64_t)a.step_seconds.size(), a.steps);
  EXPECT_EQ((int64_t)b.step_seconds.size(), b.steps - b.resumed_from_step);
  for (double sec : b.step_seconds) EXPECT_GT(sec, 0.0);
  for (const char* f : {"model.safetensors", "train_log.csv", "config.json"})
    EXPECT_EQ(test::slurp(whole + "/" + f), test::slurp(stopped + "/" + f)) << f;
  EXPECT_EQ(a.best_epoch, b.best_epoch);
}

TEST(FinetuneTasks, MaskedLMResumeIsBitExact) {
  test::TempFolder t;
  write_mlm_task(t.path);
  FinetuneOptions o;
  o.task = "mlm";
  o.train_file = t.path + "/train.csv";  // 24 texts, batch 3, accumulation 2: 4 steps an epoch
  o.eval_file = t.path + "/eval.csv";
  o.out_dir = t.path + "/run";
  o.epochs = 2;
  o.batch_size = 3;
  o.gradient_accumulation_steps = 2;
  o.save_steps = 3;
  o.learning_rate = 2e-3;
  o.threads = 1;
  expect_resume_bit_exact(fixture("heads_mlm"), o, 7);  // saved at 3, 4 (epoch end) and 6; resumed from 6
}

TEST(FinetuneTasks, TokenClassificationResumeIsBitExact) {
  test::TempFolder t;
  write_ner_task(t.path);
  FinetuneOptions o;
  o.task = "token-classify";
  o.train_file = t.path + "/train.jsonl";
  o.eval_file = t.path + "/eval.jsonl";
  o.out_dir = t.path + "/run";
  o.epochs = 3;
  o.batch_size = 8;
  o.learning_rate = 3e-3;
  o.threads = 1;
  expect_resume_bit_exact(fixture("heads_tokcls"), o, 6);  // 36 rows: 5 steps an epoch; saved at 5, resumed from 5
}

}  // namespace
}  // namespace tfm

namespace tfm {
namespace {

// --task embed resumes as the other tasks do: with gradient accumulation and a state saved every step.
TEST(FinetuneTasks, EmbedResumeWithAccumulationIsBitExact) {
  test::TempFolder t;
  std::ostringstream train;
  train << "anchor,positive,negative\n";
  const char* a[] = {"the cat sat on the mat.", "paris is the capital of france.", "two men are playing football",
                     "what time is it?"};
  const char* p[] = {"a cat is on the mat", "the capital of france is paris", "men playing football", "the time"};
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 4; ++i) train << a[i] << "," << p[i] << "," << p[(i + 1 + r) % 4] << "\n";
  test::spit(t.path + "/train.csv", train.str());
  FinetuneOptions o;
  o.task = "embed";
  o.train_file = t.path + "/train.csv";  // 8 triplets, batch 2, accumulation 2: 2 steps an epoch
  o.eval_file = t.path + "/train.csv";
  o.out_dir = t.path + "/run";
  o.epochs = 3;
  o.batch_size = 2;
  o.gradient_accumulation_steps = 2;
  o.save_steps = 3;
  o.learning_rate = 1e-3;
  o.threads = 1;
  expect_resume_bit_exact(fixture("st_mean"), o, 5);  // saved at 2, 3 and 4 (epoch ends and step 3); resumed from 4
}

// --group-texts: the blocks of run_mlm.py's group_texts (the fixture script's Python copy of it) from our
// tokenization of the same texts, 1,000 texts per map batch.
TEST(FinetuneTasks, GroupTextsCutsTheBlocksOfRunMlm) {
  const SafeTensors st = SafeTensors::open(fixture("finetune/group_texts.safetensors"));
  const Table table = read_table(fixture("finetune/group_texts.csv"));
  const Tokenizer tok(fixture("heads_mlm"));
  std::vector<TokenizedText> texts;
  for (const auto& row : table.rows) {
    const TextEncoding e = tok.encode(row[0]);
    texts.push_back({e.input_ids, e.token_type_ids, e.special});
  }
  ASSERT_EQ(texts.size(), 1002u);
  const std::vector<TokenizedText> blocks = group_texts(texts, 8);
  const Tensor lengths = st.get("lengths"), ids = st.get("input_ids"), types = st.get("token_type_ids"),
               special = st.get("special_tokens_mask");
  ASSERT_EQ((int64_t)blocks.size(), lengths.numel());
  int64_t at = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    ASSERT_EQ((int64_t)blocks[b].input_ids.size(), lengths.i64()[b]) << "block " << b;
    for (size_t i = 0; i < blocks[b].input_ids.size(); ++i, ++at) {
      ASSERT_EQ(blocks[b].input_ids[i], ids.i64()[at]) << "block " << b << " token " << i;
      ASSERT_EQ(blocks[b].token_type_ids[i], types.i64()[at]) << "block " << b << " token " << i;
      ASSERT_EQ(blocks[b].special_tokens_mask[i], special.i64()[at] != 0) << "block " << b << " token " << i;
    }
  }
  EXPECT_EQ(at, ids.numel());
  EXPECT_EQ(blocks.back().input_ids.size(), 6u);  // the last map batch: 2 texts, one short block
  EXPECT_THROW(group_texts(texts, 0), std::invalid_argument);
  texts[3].special_tokens_mask.pop_back();
  EXPECT_THROW(group_texts(texts, 8), std::invalid_argument);
}

TEST(FinetuneTasks, GroupTextsTrainsOnTheBlocks) {
  test::TempFolder t;
  FinetuneOptions o;
  o.task = "mlm";
  o.train_file = fixture("finetune/group_texts.csv");
  o.out_dir = t.path + "/run";
  o.group_texts = true;
  o.max_length = 8;
  o.epochs = 1;
  o.batch_size = 128;
  o.threads = 1;
  const FinetuneSummary s = finetune(fixture("heads_mlm"), o);
  EXPECT_EQ(s.train_examples, SafeTensors::open(fixture("finetune/group_texts.safetensors")).get("lengths").numel());
  EXPECT_EQ(s.steps, (s.train_examples + 127) / 128);
  o.group_texts = false;  // a row an example
  o.out_dir = t.path + "/lines";
  o.epochs = 1;
  EXPECT_EQ(finetune(fixture("heads_mlm"), o).train_examples, 1002);
}

}  // namespace
}  // namespace tfm
