// The public C++ API (include/tfm) against the golden fixtures: values, exception types, and concurrent use from
// several std::threads (these also run under the sanitizers, where the Python suite does not).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/safetensors.h"
#include "test_util.h"
#include "tfm/tfm.h"

namespace {
using tfm::test::fixture;

tfm::EncoderOptions encoder_options(const std::string& dtype, int threads) {
  tfm::EncoderOptions o;
  o.dtype = dtype;
  o.threads = threads;
  return o;
}
tfm::ClassifierOptions classifier_options(int threads) {
  tfm::ClassifierOptions o;
  o.threads = threads;
  return o;
}

std::vector<int64_t> ids_of(const tfm::Tensor& t) { return std::vector<int64_t>(t.i64(), t.i64() + t.numel()); }

struct BertGolden {
  tfm::SafeTensors io = tfm::SafeTensors::open(fixture("bert/io.safetensors"));
  std::vector<int64_t> ids = ids_of(io.get("input_ids")), mask = ids_of(io.get("attention_mask")),
                       types = ids_of(io.get("token_type_ids"));
  tfm::EncoderInputs inputs() const { return {ids.data(), mask.data(), types.data(), 3, 6}; }
};
}  // namespace

TEST(Api, EncoderForwardMatchesPyTorch) {
  BertGolden g;
  tfm::Encoder enc(fixture("bert"));
  EXPECT_EQ(enc.model_type(), "bert");
  EXPECT_EQ(enc.hidden_size(), 32);
  EXPECT_FALSE(enc.has_tokenizer());
  tfm::FloatArray out = enc.forward(g.inputs());
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{3, 6, 32}));
  EXPECT_EQ(out.size(-1), 32);
  tfm::Tensor ref = g.io.get("last_hidden_state");
  // Real tokens as PyTorch computes them; padded positions 0 (the layers run on the real tokens only).
  for (int64_t t = 0; t < 18; ++t) {
    std::vector<float> want(ref.f32() + t * 32, ref.f32() + (t + 1) * 32);
    if (g.mask[t] == 0) std::fill(want.begin(), want.end(), 0.0f);
    EXPECT_TRUE(tfm::test::all_close(out.data() + t * 32, want.data(), 32, 1e-4f, 1e-4f)) << "token " << t;
  }
}

// bf16 / int8 (oneDNN) against the fp32 PyTorch golden, per token: cosine >= 0.9999 / 0.999, and not equal to
// our fp32 output (the dtype reached the kernels).
TEST(Api, EncoderDtypesStayCloseToPyTorchFp32) {
  BertGolden g;
  const tfm::Tensor ref = g.io.get("last_hidden_state");
  const tfm::FloatArray fp32 = tfm::Encoder(fixture("bert")).forward(g.inputs());
  for (auto [dtype, min_cos] : {std::pair{"bf16", 0.9999}, std::pair{"int8", 0.999}}) {
    tfm::Encoder enc(fixture("bert"), encoder_options(dtype, 1));
    EXPECT_EQ(enc.dtype(), dtype);
    const tfm::FloatArray out = enc.forward(g.inputs());
    ASSERT_EQ(out.shape(), (std::vector<int64_t>{3, 6, 32}));
    double worst = 1;
    for (int64_t t = 0; t < 18; ++t) {
      if (g.mask[t] == 0) continue;
      double dot = 0, na = 0, nb = 0;
      for (int64_t k = 0; k < 32; ++k) {
        const double a = out[t * 32 + k], b = ref.f32()[t * 32 + k];
        dot += a * b, na += a * a, nb += b * b;
      }
      worst = std::min(worst, dot / std::sqrt(na * nb));
    }
    EXPECT_GE(worst, min_cos) << dtype;
    EXPECT_FALSE(std::equal(out.begin(), out.end(), fp32.begin())) << dtype << " computed exactly as fp32";
  }
  EXPECT_EQ(tfm::Encoder(fixture("bert"), encoder_options("bfloat16", 1)).dtype(), "bf16");
}

// load_tokenizer = false (tfm encode tokenizes with its own Tokenizer): the same forward, and no tokenizer.
TEST(Api, EncoderWithoutItsTokenizerForwardsTheSame) {
  const std::string dir = fixture("heads_seqcls");  // a BERT folder with vocab.txt
  tfm::EncoderOptions o;
  tfm::Encoder with(dir, o);
  ASSERT_TRUE(with.has_tokenizer());
  const std::vector<int64_t> ids = with.tokenizer().encode("a cat on a mat").input_ids;
  const tfm::EncoderInputs in{ids.data(), nullptr, nullptr, 1, (int64_t)ids.size()};
  const tfm::FloatArray want = with.forward(in);
  o.load_tokenizer = false;
  tfm::Encoder enc(dir, o);
  EXPECT_FALSE(enc.has_tokenizer());
  EXPECT_THROW(enc.tokenizer(), std::runtime_error);
  const tfm::FloatArray got = enc.forward(in);
  ASSERT_EQ(got.numel(), want.numel());
  EXPECT_TRUE(std::equal(got.data(), got.data() + got.numel(), want.data()));
}

TEST(Api, EncoderIsSafeToShareBetweenThreads) {
  BertGolden g;
  tfm::Encoder enc(fixture("bert"), encoder_options("fp32", 2));
  const tfm::FloatArray expected = enc.forward(g.inputs());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        tfm::FloatArray out = enc.forward(g.inputs());
        if (!std::equal(out.begin(), out.end(), expected.begin())) ++mismatches[t];
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(Api, ErrorsHaveTheirTypesAndMessages) {
  namespace fs = std::filesystem;
  try {
    tfm::Encoder enc(fixture("no_such_model"));
    FAIL() << "loaded a missing folder";
  } catch (const tfm::FileNotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_model: no such model folder"), std::string::npos) << e.what();
  }
  try {
    tfm::Encoder enc(fixture("bert"), encoder_options("fp16", 0));
    FAIL() << "accepted dtype fp16";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown dtype 'fp16' (expected fp32, bf16 or int8)");
  }
  tfm::Encoder enc(fixture("bert"));
  const int64_t bad[2] = {1, 60};
  EXPECT_THROW(enc.forward(tfm::EncoderInputs{bad, nullptr, nullptr, 1, 2}), std::invalid_argument);
  EXPECT_THROW(enc.embed({"hello"}), std::runtime_error);  // no tokenizer in this folder
  try {
    tfm::Translator tr(fixture("bert"));
    FAIL() << "an encoder folder loaded as a translator";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("this is a bert folder (an encoder), not a translation model"), std::string::npos);
  }
  EXPECT_THROW(tfm::bleu::corpus({"a"}, {"a", "b"}), std::invalid_argument);
  EXPECT_THROW(tfm::train(fixture("no_such.json"), ::testing::TempDir() + "/api_train"), tfm::FileNotFoundError);
}

TEST(Api, TranslatorMatchesTheD2lReferenceAndScores) {
  std::ifstream f(fixture("d2l_trained/predictions.json"));
  const nlohmann::json pred = nlohmann::json::parse(f)["predictions"];
  std::vector<std::string> src, expected;
  for (const auto& p : pred) {
    src.push_back(p["src"].get<std::string>());
    expected.push_back(p["pred"].get<std::string>());
  }
  const tfm::Translator tr(fixture("d2l_trained"), tfm::TranslatorOptions{1});
  tfm::TranslateOptions o;
  o.return_scores = true;
  std::vector<tfm::Translation> out = tr.translate_batch(src, o);
  ASSERT_EQ(out.size(), src.size());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].text, expected[i]);
    EXPECT_TRUE(out[i].finished);
    EXPECT_LT(out[i].logp, 0);
    EXPECT_EQ(out[i].score, out[i].logp);  // length_penalty 0
  }
  // Two threads sharing the translator get the single-thread results.
  std::vector<std::vector<tfm::Translation>> res(2);
  std::thread a([&] { res[0] = tr.translate_batch(src, o); }), b([&] { res[1] = tr.translate_batch(src, o); });
  a.join();
  b.join();
  for (const auto& r : res)
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(r[i].text, expected[i]);
      EXPECT_EQ(r[i].score, out[i].score);
    }
}

TEST(Api, BleuTakesReferencesFirst) {
  const tfm::bleu::CorpusScore s = tfm::bleu::corpus({"the cat sat on the mat today"}, {"the cat sat"});
  EXPECT_LT(s.bp, 1.0);  // the short side is the hypothesis
  EXPECT_EQ(s.hyp_len, 3);
  EXPECT_EQ(s.ref_len, 7);
  EXPECT_EQ(s.format().rfind("BLEU = ", 0), 0u);
}

TEST(Api, ClassifierMatchesPyTorch) {
  tfm::SafeTensors e = tfm::SafeTensors::open(fixture("heads_seqcls/expected.safetensors"));
  std::ifstream f(fixture("st_mean/sentences.txt"));
  std::vector<std::string> s;
  for (std::string line; std::getline(f, line);) s.push_back(line);
  const tfm::Classifier c(fixture("heads_seqcls"), classifier_options(1));
  EXPECT_EQ(c.labels(), (std::vector<std::string>{"negative", "neutral", "positive"}));
  const tfm::Tensor want = e.get("logits"), scores = e.get("scores");
  tfm::ClassifyOptions three;
  three.batch_size = 3;
  const tfm::FloatArray lg = c.logits(s, three);
  ASSERT_EQ(lg.shape(), (std::vector<int64_t>{8, 3}));
  EXPECT_TRUE(tfm::test::all_close(lg.data(), want.f32(), 24, 1e-4f, 1e-4f));
  const std::vector<tfm::Classification> r = c.classify(s);
  ASSERT_EQ(r.size(), 8u);
  for (size_t b = 0; b < 8; ++b) {
    const float* row = scores.f32() + b * 3;
    const int64_t k = std::max_element(row, row + 3) - row;
    EXPECT_EQ(r[b].label(), c.labels()[k]) << b;
    EXPECT_NEAR(r[b].score(), row[k], 1e-4) << b;
    ASSERT_EQ(r[b].scores.size(), 3u);
    EXPECT_GE(r[b].scores[0], r[b].scores[1]);
  }
  tfm::ClassifyOptions tanh;
  tanh.function = "tanh";
  EXPECT_THROW(c.classify({"hello"}, tanh), std::invalid_argument);
  EXPECT_THROW(tfm::Classifier(fixture("heads_mlm")), std::runtime_error);
}
