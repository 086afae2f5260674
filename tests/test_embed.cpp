// Golden tests of sentence embeddings against PyTorch implementations of sentence-transformers' Pooling / Dense /
// Normalize (fixtures from scripts/make_embed_fixtures.py: tests/fixtures/st_mean, st_multi), and of `tfm embed`.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "io/npy.h"
#include "io/safetensors.h"
#include "models/encoder.h"
#include "models/pooling.h"
#include "models/sentence_transformer.h"
#include "run_tfm.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::max_abs_diff;
using tfm::test::run_tfm_in;
using tfm::test::TfmRun;

namespace {

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

std::vector<std::string> sentences() {
  std::vector<std::string> s;
  std::stringstream ss(test::slurp(fixture("st_mean/sentences.txt")));
  for (std::string line; std::getline(ss, line);) s.push_back(line);
  return s;
}

Tensor rows_of_jsonl(const std::string& text) {
  std::vector<float> v;
  int64_t n = 0, d = 0;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    auto j = nlohmann::json::parse(line);
    auto e = j.at("embedding");
    d = (int64_t)e.size();
    for (auto& x : e) v.push_back(x.get<float>());
    ++n;
  }
  return Tensor::from_f32({n, d}, v);
}

Tensor select_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  const int64_t D = t.size(1);
  std::vector<float> v;
  for (int64_t r : rows) v.insert(v.end(), t.f32() + r * D, t.f32() + (r + 1) * D);
  return Tensor::from_f32({(int64_t)rows.size(), D}, v);
}

}  // namespace

// Each pooling mode alone, and all six concatenated in sentence-transformers' order, on the same padded hidden
// states: rows 3 ("hello", 3 tokens of 21) and the others differ in padding, so max/mean/lasttoken must skip it.
TEST(Pooling, EveryModeMatchesSentenceTransformers) {
  auto e = SafeTensors::open(fixture("st_mean/expected.safetensors"));
  Tensor h = e.get("last_hidden_state"), mask = e.get("attention_mask");
  for (const char* mode : {"cls", "max", "mean", "mean_sqrt_len", "weightedmean", "lasttoken"}) {
    Tensor got = pool(PoolingConfig::from_names(mode), h, mask);
    EXPECT_LE(max_abs_diff(got, e.get(std::string("pool_") + mode)), 1e-5) << mode;
  }
  // Names in another order still concatenate as sentence-transformers does (cls, max, mean, ...).
  Tensor all = pool(PoolingConfig::from_names("lasttoken+weightedmean,mean_sqrt_len+mean+max+cls"), h, mask);
  EXPECT_LE(max_abs_diff(all, e.get("pool_all")), 1e-5);
}

TEST(Pooling, ConfigJsonAndErrors) {
  PoolingConfig c = PoolingConfig::from_json(
      nlohmann::json::parse(test::slurp(fixture("st_multi/1_Pooling/config.json"))), "config.json");
  EXPECT_EQ(c.num_modes(), 6);
  EXPECT_FALSE(c.include_prompt);
  EXPECT_EQ(c.output_dim(32), 192);
  EXPECT_THROW(PoolingConfig::from_names("average"), std::invalid_argument);
  EXPECT_THROW(PoolingConfig::from_json(nlohmann::json::parse(R"({"pooling_mode_mean_tokens": false})"), "x"),
               std::runtime_error);
}

TEST(SentenceTransformer, MeanNormalizeFolderMatchesPyTorch) {
  SentenceTransformer m = SentenceTransformer::load(fixture("st_mean"));
  auto e = SafeTensors::open(fixture("st_mean/expected.safetensors"));
  EXPECT_EQ(m.dimension(), 32);
  std::vector<std::string> s = sentences();
  // Tokenization (bert-base-uncased pieces on the reduced vocab) equals the reference's.
  Tensor ids = e.get("input_ids");
  for (size_t b = 0; b < s.size(); ++b) {
    Encoding enc = m.tokenize(s[b]);
    for (int64_t l = 0; l < ids.size(1); ++l)
      EXPECT_EQ(l < (int64_t)enc.input_ids.size() ? enc.input_ids[l] : 0, ids.i64()[b * ids.size(1) + l]) << b;
  }
  EXPECT_LE(max_abs_diff(m.encode(s), e.get("embeddings")), 1e-5);

  SentenceTransformerOptions o;
  o.prompt_name = "query";
  SentenceTransformer q = SentenceTransformer::load(fixture("st_mean"), o);
  EXPECT_EQ(q.prompt(), "query: ");
  EXPECT_LE(max_abs_diff(q.encode(s), e.get("embeddings_query")), 1e-5);
}

// Every pooling mode concatenated, Dense(192 -> 16, tanh), Normalize; do_lower_case with a tokenizer that does
// not lowercase, max_seq_length 16 (3 sentences truncated), default prompt "query" with include_prompt false.
TEST(SentenceTransformer, MultiPoolingDenseNormalizeMatchesPyTorch) {
  auto e = SafeTensors::open(fixture("st_multi/expected.safetensors"));
  std::vector<std::string> s = sentences();
  SentenceTransformer m = SentenceTransformer::load(fixture("st_multi"));
  EXPECT_EQ(m.dimension(), 16);
  EXPECT_EQ(m.prompt(), "query: ");
  EXPECT_EQ(m.prompt_length(), 3);  // [CLS] query :
  EXPECT_LE(max_abs_diff(m.encode(s), e.get("embeddings_query")), 1e-5);

  SentenceTransformerOptions o;
  o.no_prompt = true;
  SentenceTransformer np = SentenceTransformer::load(fixture("st_multi"), o);
  Tensor ids = e.get("input_ids");
  ASSERT_EQ(ids.size(1), 16);
  for (size_t b = 0; b < s.size(); ++b) {
    Encoding enc = np.tokenize(s[b]);
    ASSERT_LE(enc.input_ids.size(), 16u);
    for (size_t l = 0; l < enc.input_ids.size(); ++l) EXPECT_EQ(enc.input_ids[l], ids.i64()[b * 16 + l]) << b;
  }
  EXPECT_LE(max_abs_diff(np.encode(s), e.get("embeddings")), 1e-5);
}

// The Pooling module's output, before Dense and Normalize (the fixtures' `pooled`): the Transformer module's token
// embeddings pooled by the folder's 1_Pooling/config.json, for the mean-only and the six-mode folder.
TEST(SentenceTransformer, PoolingModuleOutputMatchesPyTorch) {
  for (const char* name : {"st_mean", "st_multi"}) {
    SCOPED_TRACE(name);
    auto e = SafeTensors::open(fixture(std::string(name) + "/expected.safetensors"));
    SentenceTransformerOptions o;
    o.no_prompt = true;  // the fixtures' `pooled` is of the texts without a prompt
    SentenceTransformer m = SentenceTransformer::load(fixture(name), o);
    std::vector<std::string> s = sentences();
    std::vector<Encoding> enc;
    for (const std::string& t : s) enc.push_back(m.tokenize(t));
    std::vector<const Encoding*> batch;
    for (const Encoding& x : enc) batch.push_back(&x);
    Tensor h = m.token_embeddings(batch);
    const Tensor mask = e.get("attention_mask");
    ASSERT_EQ(h.size(1), mask.size(1));
    const PoolingConfig pc = PoolingConfig::from_json(
        nlohmann::json::parse(test::slurp(fixture(std::string(name) + "/1_Pooling/config.json"))), "config.json");
    EXPECT_LE(max_abs_diff(pool(pc, h, mask), e.get("pooled")), 1e-5);
  }
}

// The same sentence gives the same vector alone, in a padded batch, or with others of any length.
TEST(SentenceTransformer, VectorDoesNotDependOnTheBatch) {
  SentenceTransformer m = SentenceTransformer::load(fixture("st_multi"));
  std::vector<std::string> s = sentences();
  Tensor all = m.encode(s);
  for (size_t i = 0; i < s.size(); ++i) {
    Tensor one = m.encode({s[i]});
    EXPECT_LE(max_abs_diff(one, select_rows(all, {(int64_t)i})), 1e-5) << i;
  }
  Tensor pair = m.encode({s[4], s[3]});
  EXPECT_LE(max_abs_diff(pair, select_rows(all, {4, 3})), 1e-5);
}

TEST(SentenceTransformer, FolderErrorsNameTheProblem) {
  test::TempFolder t;
  // unknown module type
  test::link_folder(fixture("st_mean"), t.path + "/m", {{"modules.json", ""}});
  test::spit(t.path + "/m/modules.json",
             R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                 {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                 {"idx":2,"name":"2","path":"2_X","type":"sentence_transformers.models.LayerNorm"}])");
  try {
    SentenceTransformer::load(t.path + "/m");
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& ex) {
    EXPECT_NE(std::string(ex.what()).find("sentence_transformers.models.LayerNorm"), std::string::npos) << ex.what();
  }
  SentenceTransformerOptions o;
  o.prompt_name = "document";
  try {
    SentenceTransformer::load(fixture("st_mean"), o);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& ex) {
    EXPECT_NE(std::string(ex.what()).find("prompts: passage, query"), std::string::npos) << ex.what();
  }
  // A plain BERT folder needs a pooling choice.
  EXPECT_THROW(SentenceTransformer::load(fixture("heads_mlm")), std::invalid_argument);
}

// Issue 14 item 7: a BERT folder without pooler weights (BertForMaskedLM) loads; only the pooler output is absent.
TEST(SentenceTransformer, BertFolderWithoutPoolerLoadsAndEmbeds) {
  auto enc = load_encoder(fixture("heads_mlm"));
  Tensor ids = Tensor::from_i64({1, 3}, {2, 10, 3});
  EncoderOutput out = enc->forward(ids, Tensor(), Tensor());
  EXPECT_TRUE(out.last_hidden_state.defined());
  EXPECT_FALSE(out.pooler_output.defined());
  SentenceTransformerOptions o;
  o.pooling = "cls";
  SentenceTransformer m = SentenceTransformer::load(fixture("heads_mlm"), o);
  Tensor v = m.embed({});
  EXPECT_EQ(v.size(0), 0);
  Tensor one = m.encode({"the cat"});
  // CLS pooling is row 0 of the encoder's output for the same ids.
  Encoding e = m.tokenize("the cat");
  Tensor ids2 = Tensor::from_i64({1, (int64_t)e.input_ids.size()}, e.input_ids);
  Tensor h = enc->forward(ids2, Tensor(), Tensor()).last_hidden_state;
  EXPECT_TRUE(test::all_close(one.f32(), h.f32(), 32, 1e-6f));
}

// ------------------------------------------------------------------------------------------------ tfm embed

TEST(EmbedCli, NpyAndJsonlMatchPyTorchWhateverTheBatch) {
  test::TempFolder t;
  auto e = SafeTensors::open(fixture("st_multi/expected.safetensors"));
  const std::string in = fixture("st_mean/sentences.txt");
  for (const char* bt : {"1", "40", "100000"}) {
    test::TfmRun r = test::run_tfm_in(t.path, {"embed", "--model", fixture("st_multi"), "--input", in, "-o",
                                               t.path + "/out.npy", "--batch-tokens", bt, "--threads", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.err.find("embedded 8 sentences"), std::string::npos) << r.err;
    Tensor got = load_npy(t.path + "/out.npy");
    EXPECT_LE(max_abs_diff(got, e.get("embeddings_query")), 1e-5) << "--batch-tokens " << bt;
  }
  test::TfmRun r = test::run_tfm_in(t.path, {"embed", "--model", fixture("st_multi"), "--input", "-", "--no-prompt",
                                             "-q"}, test::slurp(in));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err, "");
  EXPECT_LE(max_abs_diff(rows_of_jsonl(r.out), e.get("embeddings")), 1e-5);
  // the same lines gzip-compressed
  gzFile gz = gzopen((t.path + "/in.txt.gz").c_str(), "wb");
  ASSERT_TRUE(gz != nullptr);
  std::string text = test::slurp(in);
  ASSERT_EQ(gzwrite(gz, text.data(), (unsigned)text.size()), (int)text.size());
  gzclose(gz);
  r = test::run_tfm_in(t.path, {"embed", "--model", fixture("st_multi"), "-i", t.path + "/in.txt.gz", "--no-prompt",
                                "-o", t.path + "/gz.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_LE(max_abs_diff(load_npy(t.path + "/gz.npy"), e.get("embeddings")), 1e-5);
}

// Input order is kept across length buckets and chunks; CRLF line ends read as LF.
TEST(EmbedCli, OrderKeptAcrossChunksAndCrlf) {
  test::TempFolder t;
  auto e = SafeTensors::open(fixture("st_mean/expected.safetensors"));
  std::vector<std::string> s = sentences();
  std::string text;
  std::vector<int64_t> order = {7, 3, 4, 0, 6, 2, 5, 1, 3};
  for (int64_t i : order) text += s[i] + "\r\n";
  test::spit(t.path + "/in.txt", text);
  test::TfmRun r = test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", t.path + "/in.txt", "-o",
                                             t.path + "/o.jsonl", "--chunk-lines", "4", "--batch-size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_LE(max_abs_diff(rows_of_jsonl(test::slurp(t.path + "/o.jsonl")), select_rows(e.get("embeddings"), order)),
            1e-5);
}

TEST(EmbedCli, EmptyLineIsAnErrorNamingItUnlessSkipped) {
  test::TempFolder t;
  auto e = SafeTensors::open(fixture("st_mean/expected.safetensors"));
  std::vector<std::string> s = sentences();
  test::spit(t.path + "/in.txt", s[0] + "\n" + s[1] + "\n   \n" + s[2] + "\n");
  test::TfmRun r = test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", t.path + "/in.txt", "-o",
                                             t.path + "/o.npy"});
  test::expect_one_line_error(r, "line 3 is empty");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o.npy"));
  r = test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", t.path + "/in.txt", "-o",
                                t.path + "/o.npy", "--skip-empty"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("skipped 1 empty line;"), std::string::npos) << r.err;
  EXPECT_LE(max_abs_diff(load_npy(t.path + "/o.npy"), select_rows(e.get("embeddings"), {0, 1, 2})), 1e-5);
  test::spit(t.path + "/bad.txt", s[0] + "\n\xff\xfe\n");
  test::expect_one_line_error(test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", t.path + "/bad.txt"}),
                              "bad.txt: line 2: text is not valid UTF-8");
  // an empty input gives an empty [0, dim] array, not an error
  test::spit(t.path + "/empty.txt", "");
  test::TfmRun r2 = test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", t.path + "/empty.txt", "-o",
                                              t.path + "/e.npy"});
  ASSERT_EQ(r2.exit_code, 0) << r2.describe();
  EXPECT_EQ(load_npy(t.path + "/e.npy").shape(), (Shape{0, 32}));
}

TEST(EmbedCli, BadOptionsGiveOneLineErrors) {
  test::TempFolder t;
  const std::string in = fixture("st_mean/sentences.txt");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", in, "-o", t.path + "/x.txt"}),
      "must end in .npy or .jsonl");
  test::expect_one_line_error(test::run_tfm_in(t.path, {"embed", "--model", fixture("heads_mlm"), "-i", in}),
                              "--pooling");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", in, "--prompt-name", "doc"}),
      "prompt name 'doc'");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", in, "--dtype", "fp16"}), "--dtype");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", t.path + "/none.txt"}),
      "cannot open");
  // A plain BERT folder (no pooler weights) embeds with the pooling asked for.
  test::TfmRun r = test::run_tfm_in(t.path, {"embed", "--model", fixture("heads_mlm"), "-i", in, "--pooling", "mean",
                                             "--normalize", "-o", t.path + "/p.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  Tensor p = load_npy(t.path + "/p.npy");
  ASSERT_EQ(p.shape(), (Shape{8, 32}));
  double n = 0;
  for (int64_t k = 0; k < 32; ++k) n += (double)p.f32()[k] * p.f32()[k];
  EXPECT_NEAR(n, 1.0, 1e-5);
  r = test::run_tfm_in(t.path, {"embed", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--batch-tokens"), std::string::npos);
}

// Issue 14 item 7 at the CLI: encode works on a folder without a pooler; --pooled says why it cannot.
TEST(EmbedCli, EncodeWithoutPoolerWeights) {
  test::TempFolder t;
  test::TfmRun r = test::run_tfm_in(t.path, {"encode", "--model", fixture("heads_mlm"), "--text", "the cat", "-o",
                                             t.path + "/h.npy"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = test::run_tfm_in(t.path, {"encode", "--model", fixture("heads_mlm"), "--text", "the cat", "--pooled",
                                t.path + "/p.npy"});
  test::expect_one_line_error(r, "no pooler");
}

// --skip-empty left no record of which lines were dropped: JSON lines now carry "line", and a .npy output gets
// OUT.lines.txt with the input line of each row, so rows line up with the input.
TEST(EmbedCli, SkipEmptyRowsNameTheirInputLines) {
  tfm::test::TempFolder t;
  const std::string lines = t.path + "/lines.txt";
  tfm::test::spit(lines, "\nthe cat sat\n   \nthe dog ran\n\n");
  TfmRun j = run_tfm_in(t.path, {"embed", "-q", "--model", fixture("st_mean"), "--input", lines, "--skip-empty"});
  ASSERT_EQ(j.exit_code, 0) << j.describe();
  std::vector<nlohmann::json> rows = json_lines(j.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["line"], 2);
  EXPECT_EQ(rows[1]["line"], 4);
  TfmRun n = run_tfm_in(t.path, {"embed", "-q", "--model", fixture("st_mean"), "--input", lines, "--skip-empty", "-o",
                                 t.path + "/v.npy"});
  ASSERT_EQ(n.exit_code, 0) << n.describe();
  EXPECT_EQ(tfm::test::slurp(t.path + "/v.lines.txt"), "2\n4\n");
}
