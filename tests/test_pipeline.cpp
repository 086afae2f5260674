// The pipeline core behind include/tfm that the faces share: tfm::Encoder::embed batches texts as `tfm embed` does
// (same numbers, bit for bit, for the same input and limits), embed of encodings, the stored dtype, rerank scores
// and the length_penalty rule.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/npy.h"
#include "io/safetensors.h"
#include "run_tfm.h"
#include "test_util.h"
#include "tfm/tfm.h"

namespace {

using tfm::test::fixture;

std::vector<std::string> lines_of_file(const std::string& path) {
  std::vector<std::string> s;
  std::stringstream ss(tfm::test::slurp(path));
  for (std::string line; std::getline(ss, line);) s.push_back(line);
  return s;
}

// The same sentences embedded by `tfm embed` (a process) and by tfm::Encoder::embed (this one), each with the
// same batch limits: identical bits, whatever the limits (which decide the batches).
TEST(EmbedPipeline, EncoderEmbedEqualsTheCliBitForBit) {
  tfm::test::TempFolder t;
  const std::string in = fixture("st_mean/sentences.txt");
  std::vector<std::string> texts = lines_of_file(in);
  // More texts than one batch holds, of several lengths, repeated in another order.
  const std::vector<std::string> base = texts;
  for (auto it = base.rbegin(); it != base.rend(); ++it) texts.push_back(*it + " " + *it);
  std::string text;
  for (const std::string& s : texts) text += s + "\n";
  tfm::test::spit(t.path + "/in.txt", text);
  for (const char* folder : {"st_mean", "st_multi"}) {
    for (const auto& [bt, bs] : std::vector<std::pair<int64_t, int64_t>>{{40, 128}, {16384, 3}, {1, 1}}) {
      const std::string out = t.path + "/out.npy";
      tfm::test::TfmRun r = tfm::test::run_tfm_in(
          t.path, {"embed", "--model", fixture(folder), "--input", t.path + "/in.txt", "-o", out, "--batch-tokens",
                   std::to_string(bt), "--batch-size", std::to_string(bs), "--threads", "1", "-q"});
      ASSERT_EQ(r.exit_code, 0) << r.describe();
      const tfm::Tensor cli = tfm::load_npy(out);
      tfm::EncoderOptions eo;
      eo.threads = 1;
      const tfm::Encoder enc(fixture(folder), eo);
      tfm::EmbedOptions o;
      o.batch_tokens = bt;
      o.batch_size = bs;
      const tfm::FloatArray api = enc.embed(texts, o);
      ASSERT_EQ(api.shape(), cli.shape());
      EXPECT_EQ(std::memcmp(api.data(), cli.f32(), sizeof(float) * api.numel()), 0)
          << folder << " batch_tokens " << bt << " batch_size " << bs;
      // embed of the encodings tokenize() gives: the same path.
      tfm::TokenizeOptions to;  // cut to max_seq_length as embed() and `tfm embed` cut
      to.max_length = enc.max_input_length();
      std::vector<tfm::TextEncoding> enc_texts;
      for (const std::string& s : texts) enc_texts.push_back(enc.tokenize(s, to));
      const tfm::FloatArray pre = enc.embed(enc_texts, o);
      EXPECT_EQ(std::memcmp(pre.data(), api.data(), sizeof(float) * api.numel()), 0) << folder;
    }
  }
}

// The defaults are the CLI's, and a text's vector depends on its batch only through the batch's composition:
// the PyTorch reference (sentence-transformers) is met whatever the limits.
TEST(EmbedPipeline, DefaultsAreTheCliDefaultsAndEveryBatchingMatchesPyTorch) {
  const tfm::EmbedOptions d;
  EXPECT_EQ(d.batch_size, 128);
  EXPECT_EQ(d.batch_tokens, 16384);
  tfm::EncoderOptions eo;
  eo.threads = 1;
  const tfm::Encoder enc(fixture("st_mean"), eo);
  const std::vector<std::string> texts = lines_of_file(fixture("st_mean/sentences.txt"));
  const tfm::Tensor want = tfm::SafeTensors::open(fixture("st_mean/expected.safetensors")).get("embeddings");
  for (int64_t bt : {1, 30, 16384}) {
    tfm::EmbedOptions o;
    o.batch_tokens = bt;
    const tfm::FloatArray got = enc.embed(texts, o);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(tfm::test::all_close(got.data(), want.f32(), (size_t)got.numel(), 1e-5f)) << "batch_tokens " << bt;
  }
  tfm::EmbedOptions bad;
  bad.batch_tokens = 0;
  EXPECT_THROW(enc.embed(texts, bad), std::invalid_argument);
  bad = {};
  bad.pooling = "cls";
  EXPECT_THROW(enc.embed(std::vector<tfm::TextEncoding>{enc.tokenize("a")}, bad), std::invalid_argument);
  try {
    tfm::EmbedOptions o;
    o.dimensions = 33;
    enc.embed(texts, o);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("dimensions must be >= 1 and at most the embedding size 32, got 33"),
              std::string::npos)
        << e.what();
  }
}

// A plain (not sentence-transformers) folder batches the same way; its vectors match its own one-text batches.
TEST(EmbedPipeline, PlainFolderBatchedByLength) {
  tfm::test::TempFolder t;
  namespace fs = std::filesystem;
  const std::string m = t.path + "/plain";
  fs::create_directories(m);
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"})
    if (fs::exists(fixture(std::string("st_mean/") + f))) fs::copy_file(fixture(std::string("st_mean/") + f), m + "/" + f);
  tfm::EncoderOptions eo;
  eo.threads = 1;
  const tfm::Encoder enc(m, eo);
  ASSERT_FALSE(enc.is_sentence_transformer());
  const std::vector<std::string> texts = lines_of_file(fixture("st_mean/sentences.txt"));
  tfm::EmbedOptions all, one;
  one.batch_size = 1;
  all.normalize = one.normalize = true;
  const tfm::FloatArray a = enc.embed(texts, all), b = enc.embed(texts, one);
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_TRUE(tfm::test::all_close(a.data(), b.data(), (size_t)a.numel(), 1e-6f));
  // embed(encodings) of the same tokens: bit for bit embed(texts).
  std::vector<tfm::TextEncoding> enc_texts;
  for (const std::string& s : texts) enc_texts.push_back(enc.tokenize(s));
  const tfm::FloatArray c = enc.embed(enc_texts, all);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), sizeof(float) * a.numel()), 0);
  tfm::EmbedOptions dims = all;
  dims.dimensions = 8;
  const tfm::FloatArray d8 = enc.embed(enc_texts, dims), t8 = enc.embed(texts, dims);
  ASSERT_EQ(d8.shape(), (std::vector<int64_t>{(int64_t)texts.size(), 8}));
  EXPECT_EQ(std::memcmp(d8.data(), t8.data(), sizeof(float) * d8.numel()), 0);
}

// ------------------------------------------------------------------------------------------ stored dtype

TEST(StoredDtype, AsTheFolderStoresIt) {
  tfm::test::TempFolder t;
  EXPECT_EQ(tfm::stored_dtype(fixture("bert")), "fp32");
  EXPECT_EQ(tfm::stored_dtype(fixture("st_mean")), "fp32");
  tfm::ConvertOptions c;
  c.dtype = "int8";
  tfm::convert(fixture("bert"), t.path + "/int8", c);
  EXPECT_EQ(tfm::stored_dtype(t.path + "/int8"), "int8");
  c.dtype = "bf16";
  tfm::convert(fixture("bert"), t.path + "/bf16", c);
  EXPECT_EQ(tfm::stored_dtype(t.path + "/bf16"), "fp32") << "bf16 weights compute in fp32 unless asked";
  // A sentence-transformers folder with its Transformer module in 0_Transformer.
  std::filesystem::create_directories(t.path + "/st/0_Transformer");
  std::filesystem::copy_file(t.path + "/int8/model.safetensors", t.path + "/st/0_Transformer/model.safetensors");
  EXPECT_EQ(tfm::stored_dtype(t.path + "/st"), "int8");
  std::filesystem::create_directories(t.path + "/empty");
  EXPECT_THROW(tfm::stored_dtype(t.path + "/empty"), tfm::FileNotFoundError);
}

// ------------------------------------------------------------------------------------------ rerank score

// CrossEncoder.rank of the fixture (sentence-transformers, one label, sigmoid): the scores of expected.json.
TEST(RerankScore, OnePairAsCrossEncoderRank) {
  const auto j = nlohmann::json::parse(tfm::test::slurp(fixture("heads_cross/expected.json")));
  tfm::ClassifierOptions co;
  co.threads = 1;
  const tfm::Classifier c(fixture("heads_cross"), co);
  const std::string query = j["query"];
  for (const auto& r : j["ranking"]) {
    const std::string passage = j["passages"][r["index"].get<size_t>()];
    const tfm::FloatArray lg = c.logits(std::vector<tfm::TextEncoding>{c.tokenizer().encode_pair(query, passage)});
    EXPECT_NEAR(c.rerank_score(lg.data()), r["score"].get<float>(), 1e-5) << passage;
    EXPECT_FLOAT_EQ(c.rerank_score(lg.data(), true), lg.data()[0]) << "raw: the logit";
  }
}

// ------------------------------------------------------------------------------------------ length_penalty

TEST(LengthPenalty, OneRuleForTheLibraryAndTheCli) {
  tfm::TranslatorOptions to;
  to.threads = 1;
  const tfm::Translator tr(fixture("d2l_trained"), to);
  EXPECT_NO_THROW(tr.check_length_penalty(NAN, 1, false));
  EXPECT_NO_THROW(tr.check_length_penalty(0.6f, 4, false));
  EXPECT_NO_THROW(tr.check_length_penalty(0.6f, 1, true));  // the returned scores show it
  EXPECT_NO_THROW(tr.check_length_penalty(0.0f, 1, false));
  auto message = [&](float lp, int64_t beam, bool scores, bool cli) {
    try {
      tr.check_length_penalty(lp, beam, scores, cli);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(0.6f, 1, false, false),
            "length_penalty applies to beam search only (or the returned scores); give beam_size > 1 or "
            "return_scores as well");
  EXPECT_EQ(message(0.6f, 0, false, true),
            "--length-penalty applies to beam search only (or the returned scores); give --beam N (N > 1) or "
            "--scores as well");
  EXPECT_EQ(message(-1.0f, 4, false, false), "length_penalty must be a finite number >= 0 (the GNMT alpha), got "
                                              "-1.000000");
  EXPECT_EQ(message(INFINITY, 4, false, true).rfind("--length-penalty must be a finite number", 0), 0u);
  // The library applies the same rule.
  tfm::TranslateOptions o;
  o.length_penalty = 0.6f;
  EXPECT_THROW(tr.translate_batch({"go ."}, o), std::invalid_argument);
  o.return_scores = true;
  EXPECT_NO_THROW(tr.translate_batch({"go ."}, o));
  // A Hugging Face folder takes any finite number, with any beam.
  const tfm::Translator marian(fixture("marian"), to);
  EXPECT_NO_THROW(marian.check_length_penalty(-0.5f, 1, false));
  EXPECT_THROW(marian.check_length_penalty(INFINITY, 4, false), std::invalid_argument);
}

// `tfm translate` says so in its own option names, exit status 2, and takes --scores as the library does.
TEST(LengthPenalty, CliRefusesWhatGreedyDecodingWouldIgnore) {
  tfm::test::TempFolder t;
  tfm::test::TfmRun r =
      tfm::test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--length-penalty", "1", "go ."});
  tfm::test::expect_one_line_error(r, "--length-penalty applies to beam search only");
  EXPECT_EQ(r.exit_code, 2);
  r = tfm::test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--length-penalty", "1",
                                     "--scores", "--threads", "1", "go ."});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
}

}  // namespace
