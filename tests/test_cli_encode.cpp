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
