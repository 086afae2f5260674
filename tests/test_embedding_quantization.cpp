// Embedding quantisation, semantic search and long inputs (issue 45 items 5 and 8) against the numpy / PyTorch
// references of scripts/make_quantization_fixtures.py (tests/fixtures/tasks/quantization/): sentence-transformers'
// quantize_embeddings (int8 / uint8 with ranges from the embeddings or from calibration embeddings, binary /
// ubinary packed bits), semantic_search and semantic_search_faiss's Hamming search with rescoring; `tfm embed
// --precision / --chunk / --no-truncate`, `tfm search`, `tfm classify` on a long line, /embed and /v1/embeddings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "io/npy.h"
#include "serve_client.h"
#include "tfm/pipeline.h"

using namespace tfm;
using nlohmann::json;
using test::fixture;

namespace {

const json& expected() {
  static const json j = json::parse(test::slurp(fixture("tasks/quantization/expected.json")));
  return j;
}
std::string qfix(const std::string& name) { return fixture("tasks/quantization/" + name); }

std::vector<float> floats(const json& rows, int64_t* n = nullptr, int64_t* d = nullptr) {
  std::vector<float> v;
  for (const json& r : rows)
    for (const json& x : r) v.push_back(x.get<float>());
  if (n) *n = (int64_t)rows.size();
  if (d) *d = (int64_t)rows[0].size();
  return v;
}

std::vector<float> npy_floats(const std::string& path, int64_t* n, int64_t* d) {
  const NpyData a = read_npy(path);
  EXPECT_EQ(a.descr, "<f4");
  *n = a.shape[0], *d = a.shape[1];
  std::vector<float> v((size_t)(*n * *d));
  std::memcpy(v.data(), a.bytes.data(), v.size() * 4);
  return v;
}

// Quantised values equal `want` exactly (tol 0) or within `tol` levels modulo 256 (an embedding computed here and
// by PyTorch can differ by float rounding, which may move a value across one bucket boundary).
void expect_levels(const QuantizedEmbeddings& q, const json& want, int tol, const std::string& where) {
  ASSERT_EQ(q.rows, (int64_t)want.size()) << where;
  ASSERT_EQ(q.dim, (int64_t)want[0].size()) << where;
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t k = 0; k < q.dim; ++k) {
      const int got = (int)q.at(r, k), w = want[r][k].get<int>();
      const int diff = ((got - w) % 256 + 256) % 256;
      EXPECT_TRUE(diff <= tol || 256 - diff <= tol) << where << " [" << r << ", " << k << "]: " << got << " vs " << w;
    }
}

// RFC 4648 base64, written here to check the server's.
std::string base64_of(const std::string& bytes) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) out += t[(acc >> (bits -= 6)) & 63];
  }
  if (bits) out += t[(acc << (6 - bits)) & 63];
  while (out.size() % 4) out += '=';
  return out;
}

QuantizedEmbeddings from_npy(const std::string& path, EmbeddingPrecision p) {
  const NpyData a = read_npy(path);
  QuantizedEmbeddings q;
  q.precision = p;
  EXPECT_EQ(a.descr, q.npy_descr()) << path;
  q.rows = a.shape[0], q.dim = a.shape[1];
  q.values.assign(a.bytes.begin(), a.bytes.end());
  return q;
}

}  // namespace

// ------------------------------------------------------------------------------------------ quantize_embeddings

TEST(EmbeddingQuantization, EqualsQuantizeEmbeddings) {
  const json& e = expected();
  int64_t n = 0, d = 0;
  // a row length that is not a multiple of 8, a zero, a constant dimension (step 0)
  const std::vector<float> odd = floats(e["odd_dim"]["embeddings"], &n, &d);
  for (const char* p : {"int8", "uint8", "binary", "ubinary"})
    expect_levels(quantize_embeddings(odd.data(), n, d, parse_precision(p)), e["odd_dim"][p], 0,
                  std::string("odd_dim ") + p);
  // the reference embeddings of st_mean's sentences, ranges from themselves and from calibration embeddings
  const std::vector<float> ref = npy_floats(qfix("st_corpus.npy"), &n, &d);
  for (const char* p : {"int8", "uint8", "binary", "ubinary"})
    expect_levels(quantize_embeddings(ref.data(), n, d, parse_precision(p)), e["quantize"][p], 0, p);
  int64_t cn = 0, cd = 0;
  const std::vector<float> cal = npy_floats(qfix("calibration.npy"), &cn, &cd);
  const std::vector<float> ranges = embedding_ranges(cal.data(), cn, cd);
  int64_t wrapped = 0;
  for (const char* p : {"int8", "uint8"}) {
    const QuantizedEmbeddings q = quantize_embeddings(ref.data(), n, d, parse_precision(p), ranges);
    expect_levels(q, e["quantize"][std::string(p) + "_calibrated"], 0, std::string(p) + " calibrated");
    wrapped = q.out_of_range;
  }
  EXPECT_EQ(wrapped, e["quantize"]["calibrated_out_of_range"].get<int64_t>());
  EXPECT_EQ(quantized_dim(EmbeddingPrecision::Binary, 12), 2);
  QuantizedEmbeddings binary;
  binary.precision = EmbeddingPrecision::Binary;
  EXPECT_STREQ(binary.npy_descr(), "|i1");
}

TEST(EmbeddingQuantization, BadPrecisionAndRangesAreRefused) {
  try {
    parse_precision("int4");
    FAIL();
  } catch (const std::invalid_argument& ex) {
    EXPECT_STREQ(ex.what(), "precision 'int4' is not one of float32, int8, uint8, binary, ubinary");
  }
  const float v[4] = {1, 2, 3, 4};
  EXPECT_THROW(quantize_embeddings(v, 2, 2, EmbeddingPrecision::Int8, {0, 0, 1}), std::invalid_argument);
  EXPECT_THROW(quantize_embeddings(v, 0, 2, EmbeddingPrecision::Uint8), std::invalid_argument);
  EXPECT_THROW(chunk_windows(10, 4, 4), std::invalid_argument);
}

// ------------------------------------------------------------------------------------------ tfm embed --precision

TEST(EmbeddingQuantizationCli, EmbedPrecisionNpyAndJson) {
  const json& e = expected()["quantize"];
  test::TempFolder t;
  const std::string sentences = fixture("st_mean/sentences.txt");
  struct Case {
    const char* precision;
    const char* key;
    bool calibrated;
    EmbeddingPrecision p;
    int tol;
  };
  for (const Case& c : {Case{"int8", "int8", false, EmbeddingPrecision::Int8, 1},
                        Case{"uint8", "uint8", false, EmbeddingPrecision::Uint8, 1},
                        Case{"binary", "binary", false, EmbeddingPrecision::Binary, 0},
                        Case{"ubinary", "ubinary", false, EmbeddingPrecision::Ubinary, 0},
                        Case{"int8", "int8_calibrated", true, EmbeddingPrecision::Int8, 1},
                        Case{"uint8", "uint8_calibrated", true, EmbeddingPrecision::Uint8, 1}}) {
    const std::string out = t.path + "/" + c.key + ".npy";
    std::vector<std::string> args = {"embed", "--model", fixture("st_mean"), "--input", sentences, "--output", out,
                                     "--precision", c.precision};
    if (c.calibrated) args.insert(args.end(), {"--calibration", qfix("calibration.npy")});
    const test::TfmRun r = test::run_tfm_in(t.path, args);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    expect_levels(from_npy(out, c.p), e[c.key], c.tol, c.key);
    if (c.calibrated) {
      EXPECT_NE(r.err.find("outside the calibration ranges and wrapped around"), std::string::npos) << r.err;
    } else if (c.p == EmbeddingPrecision::Int8) {
      EXPECT_NE(r.err.find("ranges from 8 embeddings"), std::string::npos) << r.err;
    }
  }
  // JSON lines hold the integers
  const test::TfmRun r = test::run_tfm_in(
      t.path, {"embed", "--model", fixture("st_mean"), "--input", sentences, "--precision", "binary", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<json> rows = test::json_lines(r.out);
  ASSERT_EQ(rows.size(), e["binary"].size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i]["embedding"], e["binary"][i]) << i;
  // wrong uses
  test::expect_one_line_error(test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "--input", sentences,
                                                        "--calibration", qfix("calibration.npy"), "-q"}),
                              "--calibration gives the ranges of --precision int8 or uint8");
  test::expect_one_line_error(test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "--input", sentences,
                                                        "--precision", "int8", "--calibration", qfix("corpus_int8.npy"),
                                                        "-q"}),
                              "calibration embeddings must be float32 [N >= 1, 32] (the model's dimension), got |i1");
  test::expect_one_line_error(test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "--input", sentences,
                                                        "--precision", "int4", "-q"}),
                              "--precision");
}

// ------------------------------------------------------------------------------------------ tfm search

TEST(EmbeddingQuantizationCli, SearchEqualsNumpyReference) {
  const json& s = expected()["search"];
  test::TempFolder t;
  auto run = [&](std::vector<std::string> extra, const json& want, const std::string& what) {
    std::vector<std::string> args = {"search", "--queries", qfix("queries.npy"), "--top-k", "5"};
    args.insert(args.end(), extra.begin(), extra.end());
    const test::TfmRun r = test::run_tfm_in(t.path, args);
    ASSERT_EQ(r.exit_code, 0) << what << ": " << r.describe();
    const std::vector<json> got = test::json_lines(r.out);
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t q = 0; q < want.size(); ++q) {
      ASSERT_EQ(got[q].size(), want[q].size()) << what << " query " << q << ": " << got[q].dump();
      for (size_t i = 0; i < want[q].size(); ++i) {
        EXPECT_EQ(got[q][i]["corpus_id"], want[q][i]["corpus_id"]) << what << " query " << q << " hit " << i;
        if (want[q][i].contains("score"))
          EXPECT_NEAR(got[q][i]["score"].get<double>(), want[q][i]["score"].get<double>(), 1e-5) << what;
        else
          EXPECT_EQ(got[q][i]["hamming_distance"], want[q][i]["hamming_distance"]) << what;
      }
    }
  };
  run({"--corpus", qfix("corpus_f32.npy")}, s["cosine"], "cosine");
  run({"--corpus", qfix("corpus_int8.npy")}, s["int8"], "int8");
  run({"--corpus", qfix("corpus_ubinary.npy")}, s["hamming_float"], "ubinary, float rescoring");
  run({"--corpus", qfix("corpus_binary.npy")}, s["hamming_float"], "binary, float rescoring");
  run({"--corpus", qfix("corpus_ubinary.npy"), "--rescore-multiplier", "4"}, s["hamming_float_x4"], "x4");
  run({"--corpus", qfix("corpus_binary.npy"), "--rescore-multiplier", "3", "--rescore-embeddings",
       qfix("corpus_int8.npy")},
      s["hamming_int8"], "int8 rescoring");
  run({"--corpus", qfix("corpus_ubinary.npy"), "--no-rescore"}, s["hamming_only"], "Hamming only");

  // query texts embedded with the corpus's model
  const json& tx = s["texts"];
  std::vector<std::string> args = {"search", "--model", fixture("st_mean"), "--corpus", qfix("st_corpus.npy"),
                                   "--top-k", "3", "--texts", fixture("st_mean/sentences.txt")};
  for (const json& q : tx["queries"]) args.push_back(q.get<std::string>());
  const test::TfmRun r = test::run_tfm_in(t.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<json> got = test::json_lines(r.out);
  ASSERT_EQ(got.size(), 2u);
  for (size_t q = 0; q < 2; ++q)
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[q][i]["corpus_id"], tx["hits"][q][i]["corpus_id"]) << q << " " << i;
      EXPECT_NEAR(got[q][i]["score"].get<double>(), tx["hits"][q][i]["score"].get<double>(), 1e-4);
    }
  EXPECT_EQ(got[0][0]["text"], tx["queries"][0]);
}

TEST(EmbeddingQuantizationCli, SearchRefusesMismatches) {
  test::TempFolder t;
  const std::vector<float> q16(16, 0.5f);
  write_npy(t.path + "/q16.npy", "<f4", {1, 16}, q16.data(), q16.size() * 4);
  test::expect_one_line_error(test::run_tfm_in(t.path, {"search", "--corpus", qfix("corpus_f32.npy")}),
                              "give query texts (with --model) or --queries FILE.npy");
  test::expect_one_line_error(test::run_tfm_in(t.path, {"search", "--corpus", qfix("corpus_f32.npy"), "--queries",
                                                        qfix("queries.npy"), "--no-rescore"}),
                              "--no-rescore and --rescore-embeddings are for a binary / ubinary corpus");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"search", "--corpus", qfix("corpus_f32.npy"), "--queries", t.path + "/q16.npy"}),
      "the queries have 16 values, the float32 corpus rows 32 values");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"search", "--corpus", qfix("corpus_int8.npy"), "--queries", t.path + "/q16.npy"}),
      "corpus rows have 32 values; the queries' 16 values need 16 (int8 / uint8) or 2 (binary / ubinary");
}

// ------------------------------------------------------------------------------------------ long inputs

TEST(LongInputsCli, EmbedTruncatesRefusesOrChunks) {
  const json& L = expected()["long"];
  test::TempFolder t;
  auto embed = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"embed", "--model", fixture("st_mean"), "--input", qfix("long.txt"), "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_tfm_in(t.path, args);
  };
  auto expect_row = [](const json& got, const json& want, const std::string& what) {
    ASSERT_EQ(got["embedding"].size(), want.size()) << what;
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_NEAR(got["embedding"][k].get<double>(), want[k].get<double>(), 1e-5) << what << " [" << k << "]";
  };
  test::TfmRun r = test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "--input", qfix("long.txt")});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<json> rows = test::json_lines(r.out);
  ASSERT_EQ(rows.size(), 2u);
  expect_row(rows[0], L["truncated"], "truncated");
  expect_row(rows[1], L["short"], "short");
  EXPECT_EQ(test::lines(r.err).size(), 2u) << r.err;  // the note and the summary
  EXPECT_NE(r.err.find("note: 1 line was longer than the model's 64 tokens (max_seq_length) and was truncated"),
            std::string::npos) << r.err;

  test::expect_one_line_error(embed({"--no-truncate"}), "line 1 has " + std::to_string(L["tokens"].get<int>()) +
                                                            " tokens, more than the model's 64 (max_seq_length)");

  const std::string chunk = std::to_string(L["chunk"].get<int>()), stride = std::to_string(L["stride"].get<int>());
  for (const char* mode : {"mean", "max"}) {
    r = embed({"--chunk", chunk, "--stride", stride, "--chunk-pooling", mode});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    rows = test::json_lines(r.out);
    ASSERT_EQ(rows.size(), 2u);
    expect_row(rows[0], L[mode], std::string("chunk ") + mode);
    expect_row(rows[1], L["short"], "short line under --chunk");
    EXPECT_EQ(r.err, "");
  }
  const std::vector<std::pair<int64_t, int64_t>> w =
      chunk_windows(L["tokens"].get<int64_t>() - 2, L["chunk"].get<int64_t>() - 2, L["stride"].get<int64_t>());
  ASSERT_EQ(w.size(), L["windows"].size());
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w[i].first, L["windows"][i][0].get<int64_t>());
    EXPECT_EQ(w[i].second, L["windows"][i][1].get<int64_t>());
  }
  test::expect_one_line_error(embed({"--chunk", "16", "--stride", "14"}), "the stride (14 tokens shared");
  test::expect_one_line_error(embed({"--chunk", "65"}), "--chunk 65 is more than the model's 64 tokens");
  test::expect_one_line_error(embed({"--stride", "4"}), "--stride and --chunk-pooling are for --chunk N");
}

TEST(LongInputsCli, ClassifyTruncatesALongLineInsteadOfRefusingTheFile) {
  test::TempFolder t;
  std::string long_line;
  for (int i = 0; i < 200; ++i) long_line += "the cat sat on the mat ";
  test::spit(t.path + "/in.txt", "The cat sat on the mat.\n" + long_line + "\nParis is the capital of France.\n");
  const std::string model = fixture("heads_seqcls");
  test::TfmRun r = test::run_tfm_in(t.path, {"classify", "--model", model, "--input", t.path + "/in.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(test::json_lines(r.out).size(), 3u);
  EXPECT_EQ(test::lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("note: 1 input was longer than the model's"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--no-truncate refuses them"), std::string::npos) << r.err;
  // the long line's answer is that of its first max_position_embeddings tokens
  const json info = json::parse(test::slurp(model + "/config.json"));
  const std::string limit = std::to_string(info["max_position_embeddings"].get<int64_t>());
  const test::TfmRun cut =
      test::run_tfm_in(t.path, {"classify", "--model", model, "--max-length", limit, "--input", t.path + "/in.txt"});
  ASSERT_EQ(cut.exit_code, 0) << cut.describe();
  EXPECT_EQ(cut.out, r.out);
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"classify", "--model", model, "--no-truncate", "--input", t.path + "/in.txt"}),
      "input 2 has");
}

// ------------------------------------------------------------------------------------------ tfm serve

TEST(EmbeddingQuantizationServe, EmbedAndOpenAIPrecision) {
  const json& e = expected()["quantize"];
  std::vector<std::string> sentences = test::lines(test::slurp(fixture("st_mean/sentences.txt")));
  test::ServeProcess s({"--model", fixture("st_mean"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  test::Reply r = test::http("POST", s.url("/embed"), json{{"inputs", sentences}, {"precision", "ubinary"}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j(), e["ubinary"]);
  // ranges of the calibration embeddings, given in the request
  int64_t n = 0, d = 0;
  const std::vector<float> cal = npy_floats(qfix("calibration.npy"), &n, &d);
  const std::vector<float> ranges = embedding_ranges(cal.data(), n, d);
  const json jr = {std::vector<float>(ranges.begin(), ranges.begin() + d), std::vector<float>(ranges.begin() + d, ranges.end())};
  r = test::http("POST", s.url("/embed"),
                 json{{"inputs", sentences}, {"parameters", {{"precision", "int8"}, {"ranges", jr}}}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  QuantizedEmbeddings got;
  got.precision = EmbeddingPrecision::Int8;
  got.rows = (int64_t)r.j().size(), got.dim = (int64_t)r.j()[0].size();
  for (const json& row : r.j())
    for (const json& x : row) got.values.push_back((uint8_t)(int8_t)x.get<int>());
  expect_levels(got, e["int8_calibrated"], 1, "/embed int8 ranges");
  // OpenAI: the binary bytes in base64
  r = test::http("POST", s.url("/v1/embeddings"),
                 json{{"input", sentences[0]}, {"precision", "binary"}, {"encoding_format", "base64"}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  std::string bytes;
  for (const json& x : e["binary"][0]) bytes += (char)(int8_t)x.get<int>();
  EXPECT_EQ(r.j()["data"][0]["embedding"], base64_of(bytes));
  r = test::http("POST", s.url("/v1/embeddings"), json{{"input", sentences}, {"precision", "uint8"}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["data"].size(), sentences.size());
  // bad values are 422 naming the field
  r = test::http("POST", s.url("/embed"), json{{"inputs", "a"}, {"precision", "int4"}}.dump());
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_NE(r.body.find("`precision` 'int4'"), std::string::npos) << r.body;
  r = test::http("POST", s.url("/embed"), json{{"inputs", "a"}, {"precision", "int8"}, {"ranges", {{0, 0}, {1, 1}}}}.dump());
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_NE(r.body.find("`ranges` has 2 values per row, the embeddings 32"), std::string::npos) << r.body;
  r = test::http("POST", s.url("/embed"), json{{"inputs", "a"}, {"precision", "binary"}, {"ranges", {{0}, {1}}}}.dump());
  EXPECT_EQ(r.status, 422) << r.body;
}
