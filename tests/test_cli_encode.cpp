// `tfm encode`: against PyTorch, the golden BERT and tutorial-encoder weights, a padded batch of texts whose ids the
// fixture script computed from its vocab.txt (tests/fixtures/reference/encode_cli, scripts/make_reference_fixtures.py),
// the whole output compared, padded positions included; then its input checks (texts without tokens, pairs, missing
// weights or pooler), whose expected values come from `tfm tokenize` (tested against Hugging Face) and the encoder
// library (tested against PyTorch).
#include "test_paths.h"
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/npy.h"
#include "io/safetensors.h"
#include "cli_util.h"
#include "models/encoder.h"
#include "test_util.h"

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

using RunOut = TfmRun;
RunOut run_tfm(const std::string& dir, const std::vector<std::string>& args) { return run_tfm_in(dir, args); }

// A model folder: the golden fixture's config.json + model.safetensors, the reference vocab.txt.
std::string model_dir(const std::string& model) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path d = fs::path(::testing::TempDir()) / ("tfm_ref_cli_" + std::to_string(getpid()) + "_" + info->name());
  fs::remove_all(d);
  fs::create_directories(d / "model");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture(model + "/" + f), d / "model" / f);
  fs::copy_file(fixture("reference/encode_cli/vocab.txt"), d / "model" / "vocab.txt");
  return d.string();
}

std::vector<std::string> texts() {
  auto j = nlohmann::json::parse(slurp(fixture("reference/encode_cli/texts.json")));
  return j.at("texts").get<std::vector<std::string>>();
}

// --all-positions: the padded rows as Hugging Face computes them, compared at every position below.
std::vector<std::string> encode_args(const std::string& dir) {
  std::vector<std::string> a = {"encode", "--model", dir + "/model", "--threads", "1", "--all-positions"};
  for (const auto& t : texts()) {
    a.push_back("--text");
    a.push_back(t);
  }
  return a;
}

// The printed ids of every row equal the fixture's (so the comparison below is about the same input).
void expect_ids(const RunOut& r, const Tensor& ids) {
  const int64_t B = ids.size(0), L = ids.size(1);
  for (int64_t b = 0; b < B; ++b) {
    std::string line = "input_ids: [";
    for (int64_t l = 0; l < L; ++l) line += (l ? ", " : "") + std::to_string(ids.i64()[b * L + l]);
    EXPECT_NE(r.out.find(line + "]\n"), std::string::npos) << line << "\n" << r.out;
  }
}

void expect_close(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_TRUE(all_close(got.f32(), want.f32(), got.numel(), 1e-4f, 1e-4f)) << what;
}

}  // namespace

TEST(CliEncodeReference, BertPaddedBatchAllLayersAndPooledMatchPyTorch) {
  std::string dir = model_dir("bert");
  auto fx = SafeTensors::open(fixture("reference/encode_cli/bert.safetensors"));
  std::vector<std::string> a = encode_args(dir);
  a.insert(a.end(), {"-o", dir + "/last.npy", "--pooled", dir + "/pooled.npy"});
  RunOut r = run_tfm(dir, a);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_ids(r, fx.get("input_ids"));
  expect_close(load_npy(dir + "/last.npy"), fx.get("last_hidden_state"), "last_hidden_state");
  expect_close(load_npy(dir + "/pooled.npy"), fx.get("pooler_output"), "pooler_output");
  a = encode_args(dir);
  a.insert(a.end(), {"--all-layers", "-o", dir + "/all.npy"});
  r = run_tfm(dir, a);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_close(load_npy(dir + "/all.npy"), fx.get("hidden_states"), "hidden_states");
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

TEST(CliEncodeReference, TutorialEncoderPaddedBatchAndAllLayersMatchPyTorch) {
  std::string dir = model_dir("transformer_encoder");
  auto fx = SafeTensors::open(fixture("reference/encode_cli/transformer_encoder.safetensors"));
  std::vector<std::string> a = encode_args(dir);
  a.insert(a.end(), {"-o", dir + "/last.npy"});
  RunOut r = run_tfm(dir, a);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_ids(r, fx.get("input_ids"));
  expect_close(load_npy(dir + "/last.npy"), fx.get("last_hidden_state"), "last_hidden_state");
  a = encode_args(dir);
  a.insert(a.end(), {"--all-layers", "-o", dir + "/all.npy"});
  r = run_tfm(dir, a);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_close(load_npy(dir + "/all.npy"), fx.get("hidden_states"), "hidden_states");
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

// Token types reach the model only through a sentence pair: a single text has all-zero token_type_ids, so only
// this test notices `tfm encode` dropping them. Skipped until `tfm encode` has --pair (written for
// `--text A --pair B`, as `tfm tokenize` spells it).
TEST(CliEncodeReference, BertSentencePairMatchesPyTorch) {
  std::string dir = model_dir("bert");
  RunOut help = run_tfm(dir, {"encode", "--help"});
  if (help.out.find("--pair") == std::string::npos) {
    fs::remove_all(dir);
    GTEST_SKIP() << "tfm encode has no --pair yet";
  }
  auto fx = SafeTensors::open(fixture("reference/encode_cli/bert_pair.safetensors"));
  auto j = nlohmann::json::parse(slurp(fixture("reference/encode_cli/pair.json")));
  RunOut r = run_tfm(dir, {"encode", "--model", dir + "/model", "--threads", "1", "--text", j.at("text"), "--pair",
                           j.at("pair"), "-o", dir + "/last.npy", "--pooled", dir + "/pooled.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_ids(r, fx.get("input_ids"));
  expect_close(load_npy(dir + "/last.npy"), fx.get("last_hidden_state"), "last_hidden_state");
  expect_close(load_npy(dir + "/pooled.npy"), fx.get("pooler_output"), "pooler_output");
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}


// A text that gives no tokens is an error in a batch as alone. The defect it catches: alone an error, with --text hi an all-[PAD]
// row written with non-zero hidden and pooled values.
TEST(CliEncodeInput, TextWithoutTokensIsAnErrorInABatchToo) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir);
  TfmRun alone = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--no-special-tokens", "--text", "   "});
  expect_error(alone, "no tokens");
  TfmRun batch = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--no-special-tokens", "--text", "   ", "--text",
                        "the cat", "-o", dir + "/h.npy", "--pooled", dir + "/p.npy"});
  expect_error(batch, "--text 1 of 2 produces no tokens");
  EXPECT_FALSE(fs::exists(dir + "/h.npy"));
  EXPECT_FALSE(fs::exists(dir + "/p.npy"));
  TfmRun empty = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--text", "the", "--text", ""});
  expect_error(empty, "--text 2 of 2 is empty");
}

// An empty --text fails with one line before any weights are made (it came after "initialising ... randomly").
TEST(CliEncodeInput, EmptyTextIsOneErrorLineBeforeInit) {
  TempFolder tmp;
  TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", data_dir() + "/bert-base-uncased", "--init", "random",
                                   "--text", "time flies", "--text", ""});
  expect_one_line_error(r, "--text 2 of 2 is empty");
}

// encode --pair gives token_type_ids 1 to the second segment, as tokenize --pair (tested against Hugging Face),
// and the hidden states are the encoder's on those ids (the encoder is tested against PyTorch).
TEST(CliEncodeInput, PairGivesTokenTypeIds) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir);
  TfmRun t = tfm(dir, {"tokenize", "--model", bert, "the cat sat", "--pair", "a dog"});
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  nlohmann::json tj = nlohmann::json::parse(t.out);
  TfmRun e = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--text", "the cat sat", "--pair", "a dog", "-o",
                    dir + "/h.npy"});
  ASSERT_EQ(e.exit_code, 0) << describe(e);
  const auto ids = tj["input_ids"].get<std::vector<int64_t>>(), tt = tj["token_type_ids"].get<std::vector<int64_t>>();
  EXPECT_TRUE(has(e.out, "token_type_ids: [0, 0, 0, 0, 0, 1, 1, 1]")) << e.out;  // [CLS] the cat sat [SEP] a dog [SEP]
  Tensor h = load_npy(dir + "/h.npy");
  const int64_t L = (int64_t)ids.size();
  ASSERT_EQ(h.shape(), (std::vector<int64_t>{1, L, 32}));
  auto model = load_encoder(bert);
  Tensor in = Tensor::empty({1, L}, DType::I64), types = Tensor::empty({1, L}, DType::I64);
  Tensor zeros = Tensor::empty({1, L}, DType::I64), mask = Tensor::empty({1, L}, DType::I64);
  for (int64_t i = 0; i < L; ++i) {
    in.i64()[i] = ids[i];
    types.i64()[i] = tt[i];
    zeros.i64()[i] = 0;
    mask.i64()[i] = 1;
  }
  Tensor want = model->forward(in, types, mask, false).last_hidden_state;
  Tensor without = model->forward(in, zeros, mask, false).last_hidden_state;
  EXPECT_TRUE(all_close(h.f32(), want.f32(), (size_t)want.numel(), 1e-6f));
  EXPECT_FALSE(all_close(h.f32(), without.f32(), (size_t)want.numel(), 1e-4f)) << "token_type_ids were all 0";
}

// encode on a folder without model.safetensors names --init random; encode --pooled on a checkpoint without a
// pooler fails before running the model (nothing printed on stdout).
TEST(CliEncodeInput, MissingWeightsAndMissingPoolerAreNamedBeforeRunning) {
  tfm::test::TempFolder t;
  const std::string dir = t.path + "/noweights";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture("heads_mlm/config.json"), dir + "/config.json");
  std::filesystem::copy_file(fixture("heads_mlm/vocab.txt"), dir + "/vocab.txt");
  TfmRun r = run_tfm_in(t.path, {"encode", "--model", dir, "the cat"});
  tfm::test::expect_one_line_error(r, "--init random");
  // heads_mlm has no pooler (BertForMaskedLM).
  TfmRun p = run_tfm_in(t.path, {"encode", "--model", fixture("heads_mlm"), "--pooled", t.path + "/p.npy", "the cat"});
  tfm::test::expect_one_line_error(p, "has no pooler");
  EXPECT_EQ(p.out, "") << "failed before the forward pass";
}

}  // namespace tfm::test

// tfm encode --init random --save: the weights BertModel(config) starts from (transformers'
// BertPreTrainedModel._init_weights: Linear and Embedding weights N(0, initializer_range), the padding_idx row of
// the word embeddings zero, biases zero, LayerNorm weight 1 and bias 0), and a config.json whose architectures
// names the base model written (BertModel), not the source folder's BertForMaskedLM.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "run_tfm.h"
#include "test_util.h"

namespace tfm {
namespace {

TEST(CliEncode, RandomInitIsBertModelsInitAndSavesABaseModel) {
  test::TempFolder t;
  const std::string src = t.path + "/src", out = t.path + "/out";
  std::filesystem::create_directories(src);
  nlohmann::json cfg = nlohmann::json::parse(test::slurp(test::data_dir() + "/bert-base-uncased/config.json"));
  cfg["hidden_size"] = 64;
  cfg["intermediate_size"] = 128;
  cfg["num_hidden_layers"] = 2;
  cfg["num_attention_heads"] = 4;
  cfg["initializer_range"] = 0.05;  // not the default, so the test sees that the config's value is used
  ASSERT_EQ(cfg["architectures"][0], "BertForMaskedLM");
  test::spit(src + "/config.json", cfg.dump(2));
  std::filesystem::copy_file(test::data_dir() + "/bert-base-uncased/vocab.txt", src + "/vocab.txt");
  auto r = test::run_tfm_in(t.path, {"encode", "--model", src, "--init", "random", "--seed", "3", "--save", out,
                                     "--text", "the cat", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();

  const nlohmann::json saved = nlohmann::json::parse(test::slurp(out + "/config.json"));
  EXPECT_EQ(saved["architectures"], nlohmann::json::array({"BertModel"}));
  EXPECT_EQ(saved["hidden_size"], 64);

  auto st = SafeTensors::open(out + "/model.safetensors");
  int matrices = 0, vectors = 0, norms = 0;
  for (const std::string& name : st.names()) {
    Tensor w = st.get(name);
    const float* p = w.f32();
    const int64_t n = w.numel();
    const bool norm = name.find("LayerNorm") != std::string::npos;
    if (norm) {
      const float want = name.ends_with(".weight") ? 1.0f : 0.0f;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], want) << name;
      ++norms;
    } else if (w.shape().size() == 1) {  // biases
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], 0.0f) << name;
      ++vectors;
    } else {
      int64_t first = 0;
      if (name.find("word_embeddings") != std::string::npos) {  // padding_idx = pad_token_id 0: a zero row
        const int64_t H = w.shape()[1];
        for (int64_t i = 0; i < H; ++i) ASSERT_EQ(p[i], 0.0f) << name;
        first = H;
      }
      double sum = 0, sq = 0;
      for (int64_t i = first; i < n; ++i) sum += p[i], sq += (double)p[i] * p[i];
      const double m = (double)(n - first), mean = sum / m, sd = std::sqrt(sq / m - mean * mean);
      // Four standard errors of the sample deviation (sd / sqrt(2m)) and of the mean (sd / sqrt(m)).
      EXPECT_NEAR(sd, 0.05, 4 * 0.05 / std::sqrt(2 * m)) << name << " (" << m << " values)";
      EXPECT_NEAR(mean, 0.0, 4 * 0.05 / std::sqrt(m)) << name;
      ++matrices;
    }
  }
  EXPECT_GE(matrices, 3 + 2 * 6);  // three embeddings and six Linear weights a layer (and the pooler)
  EXPECT_GT(vectors, 0);
  EXPECT_GT(norms, 0);

  // The saved folder loads and gives the outputs of the random model it was saved from.
  auto again = test::run_tfm_in(t.path, {"encode", "--model", out, "--text", "the cat", "--threads", "1"});
  ASSERT_EQ(again.exit_code, 0) << again.describe();
}

}  // namespace
}  // namespace tfm
