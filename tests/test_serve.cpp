// Integration tests of `tfm serve`: the real binary on a free loopback port, called with libcurl. Every wait is
// bounded; each test stops its server with SIGTERM and checks it exits 0.
#include "test_paths.h"
#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <netinet/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <cctype>
#include <sstream>
#include <thread>

#include "io/npy.h"
#include "io/safetensors.h"
#include "run_tfm.h"
#include "serve_client.h"
#include "test_util.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TempDir {
  std::string path;
  TempDir() {
    path = (fs::temp_directory_path() / ("tfm_serve_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())))
               .string();
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The encoder folder of test_cli's encode tests: tests/fixtures/bert (vocab 60, hidden 32,
// max_position_embeddings 20) plus a 60-line WordPiece vocab.txt.
std::string make_bert_dir(const std::string& dir) {
  std::string m = dir + "/bert";
  fs::create_directories(m);
  fs::copy_file(test::fixture("bert/config.json"), m + "/config.json");
  fs::copy_file(test::fixture("bert/model.safetensors"), m + "/model.safetensors");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  const char* words[] = {"the",   "a",     "an",    "time",  "flies", "like",  "arrow", "fruit", "banana", "i",
                         "have",  "dream", "cat",   "dog",   "sat",   "on",    "mat",   "is",    "was",    "and",
                         "or",    "to",    "of",    "in",    "it",    "he",    "she",   "we",    "they",   "you",
                         "red",   "blue",  "green", "big",   "small", "run",   "walk",  "eat",   "drink",  "sleep",
                         "house", "car",   "tree",  "bird",  "fish",  "sun",   "moon",  "star",  "water",  "fire",
                         "one",   "two",   "three", "four",  "five"};
  for (const char* w : words) vocab += std::string(w) + "\n";
  std::ofstream(m + "/vocab.txt") << vocab;
  return m;
}

using test::collect;
using test::http;
using test::Reply;
using test::ServeProcess;

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += (double)x * x;
  return std::sqrt(s);
}

void expect_error(const Reply& r, long status, const std::string& type, const std::string& needle = "") {
  EXPECT_EQ(r.status, status) << r.body;
  json j = r.j();
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j.value("error_type", ""), type) << r.body;
  EXPECT_NE(j.value("error", ""), "") << r.body;
  if (!needle.empty()) {
    EXPECT_NE(j.value("error", "").find(needle), std::string::npos) << r.body;
  }
}

// Last hidden state [1, L, 32] of `text` from `tfm encode` (the CLI path, tested against PyTorch elsewhere).
Tensor encode_cli(const std::string& model, const std::string& text, const std::string& dir) {
  const std::string out = dir + "/h.npy";
  const std::string cmd = std::string(TFM_BINARY) + " encode --threads 1 --model " + model + " --text '" + text +
                          "' -o " + out + " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return load_npy(out);
}

TEST(Serve, EmbeddingRoutes) {
  TempDir tmp;
  const std::string m = make_bert_dir(tmp.path);
  ServeProcess s({"--model", m});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_TRUE(s.wait_ready()) << s.log();

  json info = http("GET", s.url("/info")).j();
  EXPECT_EQ(info["model_kind"], "embedding");
  EXPECT_EQ(info["max_input_length"], 20);  // max_position_embeddings
  EXPECT_EQ(info["hidden_size"], 32);
  EXPECT_EQ(http("GET", s.url("/health")).j()["status"], "ok");

  // /embed = mean of tfm encode's last hidden state over the tokens, L2-normalised.
  Tensor h = encode_cli(m, "the cat sat on the mat", tmp.path);
  ASSERT_EQ(h.size(1), 8);
  std::vector<float> mean(32, 0.0f);
  for (int64_t l = 0; l < 8; ++l)
    for (int j = 0; j < 32; ++j) mean[j] += h.f32()[l * 32 + j] / 8.0f;
  Reply raw = http("POST", s.url("/embed"), R"({"inputs": "the cat sat on the mat", "normalize": false})");
  ASSERT_EQ(raw.status, 200) << raw.body;
  auto v = raw.j()[0].get<std::vector<float>>();
  ASSERT_EQ(v.size(), 32u);
  EXPECT_TRUE(test::all_close(v, mean, 1e-5f));
  Reply unit = http("POST", s.url("/embed"), R"({"inputs": ["the cat sat on the mat"]})");
  ASSERT_EQ(unit.status, 200) << unit.body;
  auto u = unit.j()[0].get<std::vector<float>>();
  EXPECT_NEAR(norm(u), 1.0, 1e-5);
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(u[j], mean[j] / norm(mean), 1e-5);

  // A padded batch gives each input what it gets alone.
  Reply batch = http("POST", s.url("/embed"), R"({"inputs": ["red car", "the cat sat on the mat", "one"]})");
  ASSERT_EQ(batch.status, 200) << batch.body;
  ASSERT_EQ(batch.j().size(), 3u);
  EXPECT_TRUE(test::all_close(batch.j()[1].get<std::vector<float>>(), u, 1e-5f));
  auto alone = http("POST", s.url("/embed"), R"({"inputs": "red car"})").j()[0].get<std::vector<float>>();
  EXPECT_TRUE(test::all_close(batch.j()[0].get<std::vector<float>>(), alone, 1e-5f));

  // /embed_all: every token's vector.
  Reply all = http("POST", s.url("/embed_all"), R"({"inputs": "the cat sat on the mat"})");
  ASSERT_EQ(all.status, 200) << all.body;
  json rows = all.j()[0];
  ASSERT_EQ(rows.size(), 8u);
  for (int64_t l = 0; l < 8; ++l)
    EXPECT_TRUE(test::all_close(rows[l].get<std::vector<float>>().data(), h.f32() + l * 32, 32, 1e-5f)) << l;

  // OpenAI shape.
  Reply oa = http("POST", s.url("/v1/embeddings"), R"({"input": ["the cat sat on the mat", "red car"], "model": "x"})");
  ASSERT_EQ(oa.status, 200) << oa.body;
  json o = oa.j();
  EXPECT_EQ(o["object"], "list");
  EXPECT_EQ(o["model"], "x");
  ASSERT_EQ(o["data"].size(), 2u);
  EXPECT_EQ(o["data"][1]["object"], "embedding");
  EXPECT_EQ(o["data"][1]["index"], 1);
  EXPECT_TRUE(test::all_close(o["data"][0]["embedding"].get<std::vector<float>>(), u, 1e-5f));
  EXPECT_EQ(o["usage"]["prompt_tokens"], 8 + 4);  // [CLS] red car [SEP]

  // /tokenize: ids are vocab.txt line numbers: [CLS]=2, the=5, cat=17, sat=19, on=20, mat=21, [SEP]=3.
  Reply tk = http("POST", s.url("/tokenize"), R"({"inputs": "the cat sat on the mat"})");
  ASSERT_EQ(tk.status, 200) << tk.body;
  const json toks = tk.j();
  std::vector<int64_t> ids;
  for (const auto& t : toks[0]) ids.push_back(t["id"]);
  EXPECT_EQ(ids, (std::vector<int64_t>{2, 5, 17, 19, 20, 5, 21, 3}));
  EXPECT_EQ(toks[0][0]["text"], "[CLS]");
  EXPECT_EQ(toks[0][0]["special"], true);
  EXPECT_EQ(toks[0][1]["special"], false);
  // /decode: text-embeddings-inference's inverse of /tokenize (WordPiece decoder; special tokens skipped unless asked).
  Reply dec = http("POST", s.url("/decode"), R"({"ids": [2, 5, 17, 19, 20, 5, 21, 3]})");
  ASSERT_EQ(dec.status, 200) << dec.body;
  EXPECT_EQ(dec.j(), json::array({"the cat sat on the mat"}));
  dec = http("POST", s.url("/decode"), R"({"ids": [[2, 7, 3], [8]], "skip_special_tokens": false})");
  ASSERT_EQ(dec.status, 200) << dec.body;
  EXPECT_EQ(dec.j(), json::array({"[CLS] an [SEP]", "time"}));
  // Ids without a token (the vocabulary has 60) are skipped, as tokenizers' decode and tfm tokenize --decode do.
  dec = http("POST", s.url("/decode"), R"({"ids": [[5, 60, 17, 100000], []]})");
  ASSERT_EQ(dec.status, 200) << dec.body;
  EXPECT_EQ(dec.j(), json::array({"the cat", ""}));
  EXPECT_EQ(http("POST", s.url("/decode"), R"({"ids": ["x"]})").status, 422);
  EXPECT_EQ(http("POST", s.url("/decode"), R"({"tokens": [1]})").status, 422);
  // start / stop: character offsets in the text as Hugging Face's offset_mapping (accents stripped, punctuation
  // split, [UNK] for what the 60-word vocab lacks); null for special tokens. By hand: "The  C\u00e4t, sat!" has
  // T0 h1 e2 _3 _4 C5 \u00e46 t7 ,8 _9 s10 a11 t12 !13.
  tk = http("POST", s.url("/tokenize"), json({{"inputs", "The  C\u00e4t, sat!"}}).dump());
  ASSERT_EQ(tk.status, 200) << tk.body;
  const json off = tk.j()[0];
  ASSERT_EQ(off.size(), 7u) << off;
  const std::vector<std::pair<int, int>> want_off = {{0, 3}, {5, 8}, {8, 9}, {10, 13}, {13, 14}};
  EXPECT_TRUE(off[0]["start"].is_null() && off[0]["stop"].is_null()) << off;
  EXPECT_TRUE(off[6]["start"].is_null() && off[6]["stop"].is_null()) << off;
  for (size_t i = 0; i < want_off.size(); ++i) {
    EXPECT_EQ(off[i + 1]["start"], want_off[i].first) << off;
    EXPECT_EQ(off[i + 1]["stop"], want_off[i].second) << off;
  }

  // Errors.
  expect_error(http("POST", s.url("/embed"), "{not json"), 422, "validation", "JSON");
  expect_error(http("POST", s.url("/embed"), R"({"input": "x"})"), 422, "validation", "`inputs`");
  expect_error(http("POST", s.url("/embed"), R"({"inputs": []})"), 422, "validation", "empty");
  expect_error(http("POST", s.url("/embed"), R"({"inputs": ["x", true]})"), 422, "validation", "inputs[1]");
  expect_error(http("POST", s.url("/embed"), R"({"inputs": ""})"), 422, "validation", "empty");
  expect_error(http("POST", s.url("/embed"), R"({"inputs": "x", "normalize": "yes"})"), 422, "validation",
               "normalize");
  const std::string long_text =  // 20 words + [CLS] [SEP] = 22 tokens
      R"({"inputs": ["one", "one two three four five one two three four five one two three four five )"
      R"(one two three four five"]})";
  expect_error(http("POST", s.url("/embed"), long_text), 422, "validation", "limit of 20");
  std::string trunc = long_text;
  trunc.insert(trunc.size() - 1, R"(, "truncate": true)");
  EXPECT_EQ(http("POST", s.url("/embed"), trunc).status, 200);
  json many = {{"inputs", std::vector<std::string>(33, "one")}};
  expect_error(http("POST", s.url("/embed"), many.dump()), 413, "payload_too_large", "32");
  {  // OpenAI's error shape on /v1/embeddings
    Reply bad = http("POST", s.url("/v1/embeddings"), R"({"input": "x", "encoding_format": "hex"})");
    EXPECT_EQ(bad.status, 400) << bad.body;
    EXPECT_EQ(bad.j()["error"]["type"], "invalid_request_error") << bad.body;
    EXPECT_EQ(bad.j()["error"]["param"], "encoding_format") << bad.body;
    EXPECT_NE(bad.j()["error"]["message"].get<std::string>().find("encoding_format"), std::string::npos) << bad.body;
  }
  expect_error(http("GET", s.url("/nope")), 404, "not_found");
  expect_error(http("POST", s.url("/predict"), R"({"inputs": "x"})"), 501, "not_implemented");
  expect_error(http("POST", s.url("/rerank"), R"({"query": "x", "texts": ["y"]})"), 501, "not_implemented");
  expect_error(http("POST", s.url("/translate"), R"({"q": "x", "target": "fr"})"), 404, "not_found", "translation");

  // Metrics count what happened, in Prometheus text.
  Reply met = http("GET", s.url("/metrics"));
  ASSERT_EQ(met.status, 200);
  EXPECT_NE(met.body.find("# TYPE tfm_request_count counter"), std::string::npos);
  EXPECT_NE(met.body.find("tfm_request_count{route=\"/embed\"} 13"), std::string::npos) << met.body;
  EXPECT_NE(met.body.find("tfm_request_failure{route=\"/embed\",status=\"413\"} 1"), std::string::npos);
  EXPECT_NE(met.body.find("tfm_batch_size_bucket{le=\"+Inf\"}"), std::string::npos);
  EXPECT_NE(met.body.find("tfm_inference_duration_seconds_count"), std::string::npos);
  EXPECT_NE(met.body.find("tfm_queue_size 0"), std::string::npos);

  EXPECT_EQ(s.terminate(), 0) << s.log();
  // One access-log line per request, with method, path and status.
  EXPECT_NE(s.log().find("\"POST /embed\" 413"), std::string::npos) << s.log();
  EXPECT_NE(s.log().find("\"GET /nope\" 404"), std::string::npos) << s.log();
  // A model request's line also says where its time went; other requests (and failed ones) do not.
  EXPECT_TRUE(std::regex_search(s.log(), std::regex("\"POST /embed\" 200 [0-9]+ [0-9.]+ms \\(tokenize [0-9.]+ms, "
                                                     "queue [0-9.]+ms, model [0-9.]+ms, answer [0-9.]+ms\\)\n")))
      << s.log();
  EXPECT_TRUE(std::regex_search(s.log(), std::regex("\"GET /nope\" 404 [0-9]+ [0-9.]+ms\n"))) << s.log();
  EXPECT_TRUE(std::regex_search(s.log(), std::regex("\"POST /embed\" 413 [0-9]+ [0-9.]+ms\n"))) << s.log();
}

TEST(Serve, TranslationRoutes) {
  ServeProcess s({"--model", test::fixture("d2l_trained")});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json langs = http("GET", s.url("/languages")).j();
  ASSERT_EQ(langs.size(), 2u) << langs;
  EXPECT_EQ(langs[0]["code"], "en");
  EXPECT_EQ(langs[0]["name"], "English");
  EXPECT_EQ(langs[0]["targets"], json::array({"fr"}));
  EXPECT_EQ(langs[1]["code"], "fr");
  EXPECT_EQ(langs[1]["name"], "French");
  EXPECT_EQ(langs[1]["targets"], json::array());

  // d2l's own greedy translations (tests/fixtures/d2l_trained/predictions.json, from PyTorch).
  json pred = json::parse(std::ifstream(test::fixture("d2l_trained/predictions.json")));
  std::vector<std::string> src, expect;
  for (const auto& p : pred["predictions"]) src.push_back(p["src"]), expect.push_back(p["pred"]);
  ASSERT_GE(src.size(), 2u);
  Reply one = http("POST", s.url("/translate"), json{{"q", src[0]}, {"source", "en"}, {"target", "fr"}}.dump());
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.j()["translatedText"], expect[0]);
  Reply list = http("POST", s.url("/translate"), json{{"q", src}, {"source", "auto"}, {"target", "fr"}}.dump());
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(list.j()["translatedText"].get<std::vector<std::string>>(), expect);
  Reply beam = http("POST", s.url("/translate"), json{{"q", src}, {"target", "fr"}, {"beam_size", 3}}.dump());
  ASSERT_EQ(beam.status, 200) << beam.body;
  EXPECT_EQ(beam.j()["translatedText"].size(), src.size());

  // Attention for the page: every layer and head; each attention row is a softmax over the source tokens.
  Reply att = http("POST", s.url("/attention"), json{{"q", src[0]}}.dump());
  ASSERT_EQ(att.status, 200) << att.body;
  json a = att.j();
  EXPECT_EQ(a["translatedText"], expect[0]);
  EXPECT_EQ(a["num_layers"], 2);
  ASSERT_EQ(a["cross"].size(), 2u);
  ASSERT_EQ(a["cross"][1].size(), 4u);
  const size_t Ls = a["source_tokens"].size();
  EXPECT_EQ(a["source_tokens"].back(), "<eos>");
  EXPECT_EQ(a["cross"][1][0].size(), a["target_tokens"].size());
  for (const auto& layer : a["cross"])
    for (const auto& head : layer)
      for (const auto& row : head) {
        ASSERT_EQ(row.size(), Ls);
        double sum = 0;
        for (double w : row) sum += w;
        EXPECT_NEAR(sum, 1.0, 1e-4);
      }
  ASSERT_EQ(a["encoder_self"].size(), 2u);
  EXPECT_EQ(a["encoder_self"][0][0].size(), Ls);

  expect_error(http("POST", s.url("/translate"), R"({"q": "go .", "target": "de"})"), 400, "validation", "en -> fr");
  expect_error(http("POST", s.url("/translate"), R"({"q": "go .", "source": "de", "target": "fr"})"), 400,
               "validation", "source");
  expect_error(http("POST", s.url("/translate"), R"({"q": "go ."})"), 400, "validation", "target");
  expect_error(http("POST", s.url("/translate"), R"({"q": "go .", "target": "fr", "beam_size": 0})"), 400,
               "validation", "beam_size");
  expect_error(http("POST", s.url("/translate"), R"({"q": "go .", "target": "fr", "beam_size": 99})"), 400,
               "validation", "1 to 8");
  const json too_long = {{"q", "go go go go go go go go go go go ."}, {"target", "fr"}};
  expect_error(http("POST", s.url("/translate"), too_long.dump()), 400, "validation", "limit of 10");
  json cut = too_long;
  cut["truncate"] = true;
  EXPECT_EQ(http("POST", s.url("/translate"), cut.dump()).status, 200);
  expect_error(http("POST", s.url("/embed"), R"({"inputs": "x"})"), 404, "not_found", "encoder");

  // The page is one file with no outside scripts.
  Reply page = http("GET", s.url("/"));
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("createElement(\"canvas\")"), std::string::npos);
  EXPECT_NE(page.body.find("/attention"), std::string::npos);
  EXPECT_EQ(page.body.find("<script src"), std::string::npos);
  EXPECT_EQ(page.body.find("https://"), std::string::npos);
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(Serve, LimitsAuthAndShutdown) {
  TempDir tmp;
  const std::string m = make_bert_dir(tmp.path);
  // Each batch and the model load take 2.5 s: /health is 503 at first, a second request finds the only slot
  // taken, and SIGTERM arrives while a request is in flight.
  ServeProcess s({"--model", m, "--max-concurrent-requests", "1", "--payload-limit", "4096", "--api-key", "sekret"},
                 {"TFM_SERVE_DEBUG_DELAY_MS=2500"});
  ASSERT_GT(s.port(), 0) << s.log();
  expect_error(http("GET", s.url("/health")), 503, "unhealthy");
  EXPECT_EQ(s.log().find("listening on"), std::string::npos) << s.log();  // the load has not even begun
  ASSERT_TRUE(s.wait_ready()) << s.log();
  // Printed before /health turns 200; the thread reading the server's stderr may be a moment behind.
  const std::string listening = "listening on http://127.0.0.1:" + std::to_string(s.port());
  for (int i = 0; i < 500 && s.log().find(listening) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_NE(s.log().find(listening), std::string::npos) << s.log();
  const std::vector<std::string> auth = {"Content-Type: application/json", "Authorization: Bearer sekret"};
  expect_error(http("POST", s.url("/embed"), R"({"inputs": "one"})"), 401, "unauthorized");
  expect_error(http("POST", s.url("/embed"), R"({"inputs": "one"})", {"Authorization: Bearer wrong"}), 401,
               "unauthorized");
  expect_error(http("GET", s.url("/info")), 401, "unauthorized");
  EXPECT_EQ(http("GET", s.url("/health")).status, 200);  // probes need no key
  EXPECT_EQ(http("GET", s.url("/")).status, 200);        // nor the page (its scripts send the key)
  expect_error(http("POST", s.url("/embed"), "{\"inputs\": \"" + std::string(5000, 'a') + "\"}", auth), 413,
               "payload_too_large", "4096");

  Reply slow;
  std::thread first([&] { slow = http("POST", s.url("/embed"), R"({"inputs": "one two"})", auth); });
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // the first is in the model by now
  expect_error(http("POST", s.url("/embed"), R"({"inputs": "one"})", auth), 429, "overloaded", "1");
  // SIGTERM while the first request is still in the model: it is answered, then the server exits 0.
  const int code = s.terminate();
  first.join();
  EXPECT_EQ(slow.status, 200) << slow.body;
  EXPECT_EQ(slow.j().size(), 1u);
  EXPECT_EQ(code, 0) << s.log();
  EXPECT_NE(s.log().find("SIGTERM"), std::string::npos) << s.log();
  EXPECT_EQ(http("GET", s.url("/health")).status, 0);  // nobody listens any more
}

TEST(Serve, ClientBatchLargerThanMaxBatchTokensIsSplit) {
  TempDir tmp;
  const std::string m = make_bert_dir(tmp.path);
  // 5 inputs of 8 tokens, at most 20 padded tokens a batch: 2 + 2 + 1 inputs (3 x 8 = 24 > 20).
  ServeProcess s({"--model", m, "--max-batch-tokens", "20"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const json body = {{"inputs", std::vector<std::string>(5, "the cat sat on the mat")}};
  Reply r = http("POST", s.url("/embed"), body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json out = r.j();
  ASSERT_EQ(out.size(), 5u);
  for (size_t i = 1; i < 5; ++i) EXPECT_TRUE(test::all_close(out[i].get<std::vector<float>>(),
                                                             out[0].get<std::vector<float>>(), 1e-6f));
  const std::string met = http("GET", s.url("/metrics")).body;
  EXPECT_NE(met.find("tfm_batch_size_count 3\n"), std::string::npos) << met;
  EXPECT_NE(met.find("tfm_batch_size_sum 5\n"), std::string::npos) << met;
  EXPECT_NE(met.find("tfm_batch_tokens_sum 40\n"), std::string::npos) << met;  // 16 + 16 + 8
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(Serve, MaxBatchTokensBelowTheInputLimitIsRefused) {
  TempDir tmp;
  const std::string m = make_bert_dir(tmp.path);
  ServeProcess s({"--model", m, "--max-batch-tokens", "10"});
  EXPECT_EQ(s.terminate_or_wait(), 1) << s.log();
  EXPECT_NE(s.log().find("--max-batch-tokens 10 is smaller than the model's max input length 20"), std::string::npos)
      << s.log();
  EXPECT_EQ(s.log().find("listening on"), std::string::npos) << s.log();  // it never served
}

// A weights file cut short is refused at start (exit 1, the file named), and the server never says it listens.
TEST(Serve, TruncatedWeightsAreRefusedBeforeListening) {
  TempDir tmp;
  const std::string m = make_bert_dir(tmp.path);
  fs::resize_file(m + "/model.safetensors", fs::file_size(m + "/model.safetensors") / 2);
  ServeProcess s({"--model", m});
  EXPECT_EQ(s.terminate_or_wait(), 1) << s.log();
  EXPECT_NE(s.log().find("model.safetensors"), std::string::npos) << s.log();
  EXPECT_EQ(s.log().find("listening on"), std::string::npos) << s.log();
}

TEST(Serve, PortInUseIsRefused) {
  ServeProcess first({"--model", test::fixture("d2l_trained"), "--quiet"});
  ASSERT_GT(first.port(), 0) << first.log();
  TempDir tmp;
  std::string cmd = std::string(TFM_BINARY) + " serve --model " + test::fixture("d2l_trained") + " --port " +
                    std::to_string(first.port()) + " 2>" + tmp.path + "/err";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  std::stringstream ss;
  ss << std::ifstream(tmp.path + "/err").rdbuf();
  EXPECT_NE(ss.str().find("cannot listen on 127.0.0.1:" + std::to_string(first.port())), std::string::npos)
      << ss.str();
  EXPECT_EQ(first.terminate(), 0);
}

// The listening socket's backlog (ss: Send-Q of a LISTEN socket) is raised above the 5 that Debian's cpp-httplib
// listens with: 64 clients connecting at once overflowed it, and the dropped ones retried seconds later.
TEST(Serve, ListenBacklogHoldsManyConnectingClients) {
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  TempDir tmp;
  const std::string cmd = "ss -Hltn 'sport = :" + std::to_string(s.port()) + "' > " + tmp.path + "/ss 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "ss (iproute2, scripts/install-deps.sh) failed";
  std::ifstream in(tmp.path + "/ss");
  std::string state, recv_q, send_q;
  in >> state >> recv_q >> send_q;  // "LISTEN 0 4096 127.0.0.1:PORT 0.0.0.0:*"
  ASSERT_EQ(state, "LISTEN") << state << " " << recv_q << " " << send_q;
  EXPECT_GE(std::stoi(send_q), 64) << "listen backlog " << send_q;
  EXPECT_EQ(s.terminate(), 0);
}

TEST(Serve, BadStart) {
  // Not a model folder: one clear line, non-zero exit, no hang.
  TempDir tmp;
  std::string cmd = std::string(TFM_BINARY) + " serve --port 0 --model " + tmp.path + " 2>" + tmp.path + "/err";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  std::stringstream ss;
  ss << std::ifstream(tmp.path + "/err").rdbuf();
  EXPECT_NE(ss.str().find("config.json"), std::string::npos) << ss.str();
}

// Issue 26 item 10: serve --pooling takes embed's modes (one check, tfm::Encoder::check_pooling), not only mean /
// cls. max and cls+max over tfm encode's last hidden state (tested against PyTorch elsewhere); an unknown mode is
// refused at start with the list of modes.
TEST(Serve, PoolingTakesEmbedsModes) {
  TempDir tmp;
  const std::string m = make_bert_dir(tmp.path);
  Tensor h = encode_cli(m, "the cat sat on the mat", tmp.path);
  ASSERT_EQ(h.size(1), 8);
  std::vector<float> mx(32, -INFINITY), cls(h.f32(), h.f32() + 32);
  for (int64_t l = 0; l < 8; ++l)
    for (int j = 0; j < 32; ++j) mx[j] = std::max(mx[j], h.f32()[l * 32 + j]);
  {
    ServeProcess s({"--model", m, "--quiet", "--pooling", "max"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    EXPECT_EQ(http("GET", s.url("/info")).j()["pooling"], "max");
    Reply r = http("POST", s.url("/embed"), R"({"inputs": ["the cat sat on the mat", "red car"], "normalize": false})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(test::all_close(r.j()[0].get<std::vector<float>>(), mx, 1e-5f)) << r.body;
  }
  {
    ServeProcess s({"--model", m, "--quiet", "--pooling", "cls+max"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    EXPECT_EQ(http("GET", s.url("/info")).j()["hidden_size"], 64);
    Reply r = http("POST", s.url("/embed"), R"({"inputs": "the cat sat on the mat", "normalize": false})");
    ASSERT_EQ(r.status, 200) << r.body;
    std::vector<float> want = cls;
    want.insert(want.end(), mx.begin(), mx.end());  // sentence-transformers' order: cls, max
    EXPECT_TRUE(test::all_close(r.j()[0].get<std::vector<float>>(), want, 1e-5f)) << r.body;
  }
  std::string cmd = std::string(TFM_BINARY) + " serve --port 0 --pooling median --model " + m + " 2>" + tmp.path +
                    "/err";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string err = test::slurp(tmp.path + "/err");
  EXPECT_NE(err.find("unknown pooling mode 'median'"), std::string::npos) << err;
  EXPECT_NE(err.find("weightedmean"), std::string::npos) << err;
}

// The page in headless Chromium: ?q= fills the box and runs; the DOM after the scripts shows the translation and
// one canvas per head (translation) or the similarity matrix (encoder).
std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(p)) return p;
  return "";
}

std::string dump_dom(const std::string& url, const std::string& dir) {
  const std::string out = dir + "/dom.html";
  const std::string cmd = "timeout 60 " + chromium() +
                          " --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" + dir +
                          "/chrome --virtual-time-budget=10000 --dump-dom '" + url + "' > " + out + " 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  return ss.str();
}

// ------------------------------------------------------------------ sentence-transformers folders and task heads
// Expected values are PyTorch's (tests/fixtures/*/expected.safetensors, expected.json from the fixture scripts).

std::vector<std::string> st_sentences() {
  std::stringstream ss(test::slurp(test::fixture("st_mean/sentences.txt")));
  std::vector<std::string> v;
  for (std::string line; std::getline(ss, line);) v.push_back(line);
  return v;
}

// Largest |got[b][j] - want[b, j]| over a [B, D] reply; +inf when the shapes differ.
double max_diff_rows(const json& got, const Tensor& want) {
  const int64_t B = want.size(0), D = want.size(1);
  if (!got.is_array() || (int64_t)got.size() != B) return INFINITY;
  double d = 0;
  for (int64_t b = 0; b < B; ++b) {
    if (!got[b].is_array() || (int64_t)got[b].size() != D) return INFINITY;
    for (int64_t j = 0; j < D; ++j) d = std::max(d, std::fabs(got[b][j].get<double>() - want.f32()[b * D + j]));
  }
  return d;
}

// /embed and /v1/embeddings give SentenceTransformer.encode's vectors: Pooling(mean) -> Normalize.
TEST(ServeSentenceTransformer, MeanNormalizeFolderMatchesPyTorch) {
  auto e = SafeTensors::open(test::fixture("st_mean/expected.safetensors"));
  const Tensor want = e.get("embeddings");
  ServeProcess s({"--model", test::fixture("st_mean"), "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json info = http("GET", s.url("/info")).j();
  EXPECT_EQ(info["hidden_size"], 32);
  EXPECT_EQ(info["max_input_length"], 64);  // sentence_bert_config.json max_seq_length
  EXPECT_NE(info["pooling"].get<std::string>().find("Normalize"), std::string::npos) << info;

  const json body = {{"inputs", st_sentences()}};
  Reply r = http("POST", s.url("/embed"), body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), want), 1e-5);
  // normalize false (TEI): the folder's Normalize module is left out, as text-embeddings-inference does.
  json raw = body;
  raw["normalize"] = false;
  r = http("POST", s.url("/embed"), raw.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), e.get("pooled")), 1e-5);
  // One sentence alone equals its row of the padded PyTorch batch.
  r = http("POST", s.url("/embed"), json({{"inputs", st_sentences()[3]}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), Tensor::from_f32({1, 32}, std::vector<float>(want.f32() + 3 * 32,
                                                                                   want.f32() + 4 * 32))), 1e-5);
  r = http("POST", s.url("/v1/embeddings"), json({{"input", st_sentences()}, {"model", "st"}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json rows = json::array(), reply = r.j();
  for (const auto& d : reply["data"]) rows.push_back(d["embedding"]);
  EXPECT_LE(max_diff_rows(rows, want), 1e-5);
  // /embed_all: the Transformer module's token embeddings (PyTorch's last_hidden_state), each text's own tokens.
  r = http("POST", s.url("/embed_all"), json({{"inputs", st_sentences()}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  {
    const Tensor hidden = e.get("last_hidden_state"), mask = e.get("attention_mask");
    const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2);
    json got = r.j();
    ASSERT_EQ((int64_t)got.size(), B);
    double d = 0;
    for (int64_t b = 0; b < B; ++b) {
      int64_t n = 0;
      for (int64_t l = 0; l < L; ++l) n += mask.i64()[b * L + l];
      ASSERT_EQ((int64_t)got[b].size(), n) << "sentence " << b;
      for (int64_t l = 0; l < n; ++l) {
        ASSERT_EQ((int64_t)got[b][l].size(), H);
        for (int64_t j = 0; j < H; ++j)
          d = std::max(d, std::fabs(got[b][l][j].get<double>() - hidden.f32()[(b * L + l) * H + j]));
      }
    }
    EXPECT_LE(d, 1e-4);
  }
  // No head: /predict and /rerank say so.
  expect_error(http("POST", s.url("/predict"), R"({"inputs": "x"})"), 501, "not_implemented", "head");
  expect_error(http("POST", s.url("/rerank"), R"({"query": "x", "texts": ["y"]})"), 501, "not_implemented",
               "cross-encoder");
  EXPECT_EQ(s.terminate(), 0) << s.log();

  // --prompt-name query: the "query: " prompt of config_sentence_transformers.json.
  ServeProcess q({"--model", test::fixture("st_mean"), "--quiet", "--prompt-name", "query"});
  ASSERT_TRUE(q.wait_ready()) << q.log();
  r = http("POST", q.url("/embed"), body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), e.get("embeddings_query")), 1e-5);
  EXPECT_EQ(q.terminate(), 0) << q.log();
}

// Every pooling mode concatenated -> Dense(tanh) -> Normalize, do_lower_case, max_seq_length 16, the default
// prompt "query". Three sentences are longer than 16 tokens: 422 unless truncate (as sentence-transformers cuts).
TEST(ServeSentenceTransformer, MultiPoolingDenseFolderMatchesPyTorch) {
  auto e = SafeTensors::open(test::fixture("st_multi/expected.safetensors"));
  ServeProcess s({"--model", test::fixture("st_multi"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  EXPECT_EQ(http("GET", s.url("/info")).j()["hidden_size"], 16);
  json body = {{"inputs", st_sentences()}};
  expect_error(http("POST", s.url("/embed"), body.dump()), 422, "validation", "limit of 16");
  body["truncate"] = true;
  Reply r = http("POST", s.url("/embed"), body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), e.get("embeddings_query")), 1e-5);
  EXPECT_EQ(s.terminate(), 0) << s.log();

  ServeProcess np({"--model", test::fixture("st_multi"), "--quiet", "--no-prompt", "--auto-truncate"});
  ASSERT_TRUE(np.wait_ready()) << np.log();
  r = http("POST", np.url("/v1/embeddings"), json({{"input", st_sentences()}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json rows = json::array(), reply = r.j();
  for (const auto& d : reply["data"]) rows.push_back(d["embedding"]);
  EXPECT_LE(max_diff_rows(rows, e.get("embeddings")), 1e-5);
  EXPECT_EQ(np.terminate(), 0) << np.log();
}

// /predict with BertForSequenceClassification (3 labels, softmax), TEI's shape: [{score, label}] best first.
TEST(ServeHeads, PredictMatchesPyTorch) {
  auto e = SafeTensors::open(test::fixture("heads_seqcls/expected.safetensors"));
  const Tensor logits = e.get("logits");
  ASSERT_EQ(logits.size(1), 3);
  const std::vector<std::string> labels = {"negative", "neutral", "positive"};
  const std::vector<std::string> s8 = st_sentences();
  ServeProcess s({"--model", test::fixture("heads_seqcls"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json batch = json::array();
  for (const auto& t : s8) batch.push_back(json::array({t}));
  for (bool raw : {false, true}) {
    Reply r = http("POST", s.url("/predict"), json({{"inputs", batch}, {"raw_scores", raw}}).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    json j = r.j();
    ASSERT_EQ(j.size(), s8.size()) << r.body;
    for (size_t b = 0; b < s8.size(); ++b) {
      const float* l = logits.f32() + b * 3;
      const double mx = std::max({l[0], l[1], l[2]});
      const double z = std::exp(l[0] - mx) + std::exp(l[1] - mx) + std::exp(l[2] - mx);
      ASSERT_EQ(j[b].size(), 3u) << r.body;
      for (size_t k = 0; k < 3; ++k) {
        const std::string label = j[b][k]["label"];
        const size_t c = std::find(labels.begin(), labels.end(), label) - labels.begin();
        ASSERT_LT(c, 3u) << label;
        const double want = raw ? l[c] : std::exp(l[c] - mx) / z;
        EXPECT_NEAR(j[b][k]["score"].get<double>(), want, 1e-5) << b << " " << label;
        if (k) {
          EXPECT_GE(j[b][k - 1]["score"].get<double>(), j[b][k]["score"].get<double>());
        }
      }
    }
  }
  // One string: one list; the row equals that sentence's in the padded batch.
  Reply one = http("POST", s.url("/predict"), json({{"inputs", s8[4]}, {"raw_scores", true}}).dump());
  ASSERT_EQ(one.status, 200) << one.body;
  ASSERT_TRUE(one.j()[0].is_object()) << one.body;
  EXPECT_NEAR(one.j()[0]["score"].get<double>(), std::max({logits.f32()[12], logits.f32()[13], logits.f32()[14]}),
              1e-5);
  // A list of two strings is one (text, text_pair) pair, as TEI reads it.
  Reply pair = http("POST", s.url("/predict"), R"({"inputs": ["the cat sat.", "the dog ran."]})");
  ASSERT_EQ(pair.status, 200) << pair.body;
  EXPECT_EQ(pair.j().size(), 3u) << pair.body;
  expect_error(http("POST", s.url("/predict"), R"({"inputs": [["a", "b", "c"]]})"), 422, "validation", "inputs[0]");
  expect_error(http("POST", s.url("/predict"), R"({"inputs": 3})"), 422, "validation", "inputs");
  expect_error(http("POST", s.url("/rerank"), R"({"query": "x", "texts": ["y"]})"), 400, "not_a_reranker",
               "3 labels");
  EXPECT_EQ(http("GET", s.url("/info")).j()["labels"], json(labels));
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// /rerank with a cross-encoder (one label, Sigmoid): tests/fixtures/heads_cross/expected.json's ranking.
// A client that disconnects before its request's batch runs costs no inference: the request ends with 499
// "client_closed_request" and the model never runs for it; a client that stays gets its answer. The request is
// sent corked (TCP_CORK), so its last bytes and the FIN arrive in one segment: the server sees the client gone
// by the time it has read the request.
TEST(Serve, DisconnectedClientCostsNoInference) {
  ServeProcess s({"--model", test::fixture("st_mean"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  auto metric = [&](const std::string& line_start) -> double {
    const std::string body = http("GET", s.url("/metrics")).body;
    std::istringstream in(body);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(line_start + " ", 0) == 0) return std::stod(line.substr(line_start.size() + 1));
    return 0;
  };
  const std::string inference = "tfm_inference_duration_seconds_count";
  ASSERT_EQ(metric(inference), 0);
  const std::string body = R"({"inputs": ["the cat sat on the mat", "a dog ran in the park"]})";
  const std::string request = "POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)s.port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const int on = 1;
  ASSERT_EQ(::setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on), 0);
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), (ssize_t)request.size());
  ::close(fd);
  // Wait for the server to have answered (logged) the request, then count the batches it ran.
  for (int i = 0; i < 2000 && metric("tfm_request_count{route=\"/embed\"}") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(metric("tfm_request_count{route=\"/embed\"}"), 1) << s.log();
  EXPECT_EQ(metric("tfm_request_failure{route=\"/embed\",status=\"499\"}"), 1) << http("GET", s.url("/metrics")).body;
  EXPECT_EQ(metric(inference), 0) << "the model ran for a client that had gone";
  Reply r = http("POST", s.url("/embed"), body);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(metric(inference), 1);
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// The fixture's passages reversed and one repeated: /rerank's order follows PyTorch's score of each passage
// (best first) and its indices are positions in this request's texts, with and without raw scores.
TEST(ServeHeads, RerankOrderFollowsPyTorchScoresWhateverTheInputOrder) {
  json j = json::parse(test::slurp(test::fixture("heads_cross/expected.json")));
  auto e = SafeTensors::open(test::fixture("heads_cross/expected.safetensors"));
  std::vector<std::string> passages;
  std::vector<double> sigmoid, logit;  // PyTorch's, per passage of this request
  for (int64_t i : {3, 2, 1, 0, 2}) {
    passages.push_back(j["passages"][i]);
    for (const auto& r : j["ranking"])
      if (r["index"] == i) sigmoid.push_back(r["score"].get<double>());
    logit.push_back(e.get("logits").f32()[i]);
  }
  ServeProcess s({"--model", test::fixture("heads_cross"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  for (bool raw : {false, true}) {
    SCOPED_TRACE(raw ? "raw scores" : "sigmoid");
    const std::vector<double>& want = raw ? logit : sigmoid;
    Reply r = http("POST", s.url("/rerank"), json({{"query", j["query"]}, {"texts", passages}, {"raw_scores", raw}}).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    json got = r.j();
    ASSERT_EQ(got.size(), passages.size()) << r.body;
    std::vector<size_t> order(passages.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return want[a] > want[b]; });
    for (size_t k = 0; k < got.size(); ++k) {
      const size_t i = got[k]["index"];
      ASSERT_LT(i, passages.size());
      EXPECT_NEAR(got[k]["score"].get<double>(), want[i], 1e-5) << "rank " << k;
      EXPECT_NEAR(want[i], want[order[k]], 1e-6) << "rank " << k << " holds index " << i << ", expected " << order[k];
    }
  }
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(ServeHeads, RerankMatchesPyTorch) {
  json j = json::parse(test::slurp(test::fixture("heads_cross/expected.json")));
  auto e = SafeTensors::open(test::fixture("heads_cross/expected.safetensors"));
  ServeProcess s({"--model", test::fixture("heads_cross"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json body = {{"query", j["query"]}, {"texts", j["passages"]}};
  Reply r = http("POST", s.url("/rerank"), body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json got = r.j();
  ASSERT_EQ(got.size(), j["ranking"].size()) << r.body;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k]["index"], j["ranking"][k]["index"]) << r.body;
    EXPECT_NEAR(got[k]["score"].get<double>(), j["ranking"][k]["score"].get<double>(), 1e-5) << k;
    EXPECT_FALSE(got[k].contains("text"));
  }
  body["raw_scores"] = true;
  body["return_text"] = true;
  r = http("POST", s.url("/rerank"), body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  for (const auto& x : r.j()) {
    const int64_t i = x["index"];
    EXPECT_NEAR(x["score"].get<double>(), e.get("logits").f32()[i], 1e-5) << i;
    EXPECT_EQ(x["text"], j["passages"][i]);
  }
  expect_error(http("POST", s.url("/rerank"), R"({"query": "x", "texts": "y"})"), 422, "validation", "texts");
  expect_error(http("POST", s.url("/rerank"), R"({"texts": ["y"]})"), 422, "validation", "query");
  std::string long_text;
  for (int i = 0; i < 80; ++i) long_text += "cat ";
  expect_error(http("POST", s.url("/rerank"), json({{"query", "x"}, {"texts", json::array({long_text})}}).dump()), 422,
               "validation", "limit of 64");
  // /predict on the cross-encoder: sigmoid of the one logit for a (query, passage) pair.
  Reply p = http("POST", s.url("/predict"),
                 json({{"inputs", json::array({json::array({j["query"], j["passages"][1]})})}}).dump());
  ASSERT_EQ(p.status, 200) << p.body;
  EXPECT_NEAR(p.j()[0][0]["score"].get<double>(), 1.0 / (1.0 + std::exp(-e.get("logits").f32()[1])), 1e-5);
  Reply met = http("GET", s.url("/metrics"));
  EXPECT_NE(met.body.find("tfm_request_count{route=\"/rerank\"} 5"), std::string::npos) << met.body;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(ServeBrowser, PageDrawsAttentionAndSimilarity) {
  if (chromium().empty()) GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  TempDir tmp;
  {
    ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    std::string dom = dump_dom(s.url("/?q=go%20."), tmp.path);
    EXPECT_NE(dom.find("data-done=\"1\""), std::string::npos) << dom;
    EXPECT_NE(dom.find(">va !<"), std::string::npos) << dom;  // predictions.json: "go ." -> "va !"
    EXPECT_NE(dom.find("data-panels=\"4\""), std::string::npos) << dom;
    EXPECT_NE(dom.find("data-kind=\"cross\""), std::string::npos) << dom;
    size_t canvases = 0;
    for (size_t p = 0; (p = dom.find("<canvas", p)) != std::string::npos; ++p) ++canvases;
    EXPECT_EQ(canvases, 4u);
    EXPECT_NE(dom.find("data-title=\"Head 4\""), std::string::npos) << dom;
    EXPECT_NE(dom.find("<option value=\"1\">2</option>"), std::string::npos) << dom;  // layer selector: 2 layers
    EXPECT_EQ(s.terminate(), 0);
  }
  {
    const std::string m = make_bert_dir(tmp.path);
    ServeProcess s({"--model", m, "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    std::string dom = dump_dom(s.url("/?q=the%20cat%20sat|a%20dog%20sat|the%20sun"), tmp.path);
    EXPECT_NE(dom.find("3 sentences, cosine similarity"), std::string::npos) << dom;
    EXPECT_NE(dom.find("data-size=\"3\""), std::string::npos) << dom;
    EXPECT_NE(dom.find("data-rows=\"3\""), std::string::npos) << dom;
    EXPECT_EQ(s.terminate(), 0);
  }
}

// A RoBERTa folder (tokenizer.json byte-level BPE) serves /embed_all: PyTorch's last_hidden_state for each text.
TEST(ServeRoberta, EmbedAllMatchesPyTorch) {
  auto e = SafeTensors::open(test::fixture("roberta/expected.safetensors"));
  ServeProcess s({"--model", test::fixture("roberta"), "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const json texts = {"A man in a blue shirt is standing on a ladder.",
                      "Two young, White males are outside near many bushes."};
  Reply r = http("POST", s.url("/embed_all"), json({{"inputs", texts}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Tensor hidden = e.get("last_hidden_state"), mask = e.get("attention_mask");
  const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2);
  json got = r.j();
  ASSERT_EQ((int64_t)got.size(), B);
  double d = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    for (int64_t l = 0; l < L; ++l) n += mask.i64()[b * L + l];
    ASSERT_EQ((int64_t)got[b].size(), n) << "sentence " << b;
    for (int64_t l = 0; l < n; ++l)
      for (int64_t j = 0; j < H; ++j)
        d = std::max(d, std::fabs(got[b][l][j].get<double>() - hidden.f32()[(b * L + l) * H + j]));
  }
  EXPECT_LE(d, 2e-5);
}

// An MPNet sentence-transformers folder (all-mpnet-base-v2's layout) serves /embed: sentence-transformers' mean +
// Normalize embeddings of the PyTorch reference (scripts/make_mpnet_fixtures.py).
TEST(ServeMpnet, EmbedMatchesSentenceTransformers) {
  auto e = SafeTensors::open(test::fixture("mpnet/expected.safetensors"));
  ServeProcess s({"--model", test::fixture("mpnet"), "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json texts = json::array();
  std::stringstream ss(test::slurp(test::fixture("mpnet/sentences.txt")));
  for (std::string line; std::getline(ss, line);) texts.push_back(line);
  Reply r = http("POST", s.url("/embed"), json({{"inputs", texts}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Tensor want = e.get("embeddings");
  json got = r.j();
  ASSERT_EQ((int64_t)got.size(), want.size(0));
  double d = 0;
  for (int64_t b = 0; b < want.size(0); ++b) {
    ASSERT_EQ((int64_t)got[b].size(), want.size(1));
    for (int64_t j = 0; j < want.size(1); ++j)
      d = std::max(d, std::fabs(got[b][j].get<double>() - want.f32()[b * want.size(1) + j]));
  }
  EXPECT_LE(d, 1e-5);
}

// /info says what the model computes in: an encoder folder from `tfm convert --dtype int8` runs in int8 as stored.
TEST(ServeInfo, ReportsTheComputeType) {
  TempDir tmp;
  const std::string q8 = tmp.path + "/st8";
  const std::string cmd = std::string(TFM_BINARY) + " convert --model " + test::fixture("st_mean") +
                          " --dtype int8 --out " + q8 + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const auto& [dir, want] : {std::pair<std::string, std::string>{test::fixture("st_mean"), "fp32"}, {q8, "int8"},
                                  {test::fixture("d2l_trained"), "fp32"}}) {
    ServeProcess s({"--model", dir, "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    json info = http("GET", s.url("/info")).j();
    EXPECT_EQ(info["dtype"], want) << dir << ": " << info;
    EXPECT_EQ(s.terminate(), 0);
  }
}

// The translation page has a beam-size control (?beam= sets it): "help !" is "aide-moi !" with beam 2 and
// "à <unk> !" greedily (tests/fixtures/d2l_trained/beam_predictions.json). The similarity page shows a
// sentence-transformers folder's pipeline as it is ("... -> Pooling(mean) -> Normalize", not "... -> Normalize
// pooling") and a plain folder's pooling mode ("mean pooling").
TEST(ServeBrowser, PageTranslatesWithTheChosenBeamSizeAndNamesThePooling) {
  if (chromium().empty()) GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  TempDir tmp;
  {
    ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    std::string dom = dump_dom(s.url("/?q=help%20!&beam=2"), tmp.path);
    EXPECT_NE(dom.find("id=\"beam\""), std::string::npos) << dom;
    EXPECT_NE(dom.find("data-beam=\"2\""), std::string::npos) << dom;
    EXPECT_NE(dom.find(">aide-moi !<"), std::string::npos) << dom;
    // The attention drawn is the beam's best hypothesis, and the page says so.
    EXPECT_NE(dom.find("best hypothesis (beam size 2)"), std::string::npos) << dom;
    EXPECT_NE(dom.find("data-panels=\""), std::string::npos) << dom;
    dom = dump_dom(s.url("/?q=help%20!"), tmp.path);
    EXPECT_NE(dom.find("&lt;unk&gt; !<"), std::string::npos) << dom;
    EXPECT_EQ(s.terminate(), 0);
  }
  {
    ServeProcess s({"--model", test::fixture("st_mean"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    std::string dom = dump_dom(s.url("/?q=the%20cat|a%20dog"), tmp.path);
    EXPECT_NE(dom.find("-&gt; Pooling(mean) -&gt; Normalize;"), std::string::npos) << dom;
    EXPECT_EQ(dom.find("Normalize pooling"), std::string::npos) << dom;
    EXPECT_EQ(s.terminate(), 0);
  }
  {
    const std::string m = make_bert_dir(tmp.path);
    ServeProcess s({"--model", m, "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    std::string dom = dump_dom(s.url("/?q=the%20cat|a%20dog"), tmp.path);
    EXPECT_NE(dom.find(", mean pooling;"), std::string::npos) << dom;
    EXPECT_EQ(s.terminate(), 0);
  }
}

// The server takes any family the library loads (no allowlist of its own): an XLM-RoBERTa cross-encoder answers
// /rerank and a DistilBERT classifier /predict as the PyTorch references of tests/fixtures/family_heads.
TEST(ServeFamilyHeads, XlmRobertaRerankAndDistilBertPredictMatchPyTorch) {
  {
    json j = json::parse(test::slurp(test::fixture("family_heads/xlmr_cross/expected.json")));
    ServeProcess s({"--model", test::fixture("family_heads/xlmr_cross"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    Reply r = http("POST", s.url("/rerank"), json({{"query", j["query"]}, {"texts", j["passages"]}}).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_EQ(r.j().size(), j["ranking"].size()) << r.body;
    for (size_t k = 0; k < j["ranking"].size(); ++k) {
      EXPECT_EQ(r.j()[k]["index"], j["ranking"][k]["index"]) << r.body;
      EXPECT_NEAR(r.j()[k]["score"].get<double>(), j["ranking"][k]["score"].get<double>(), 1e-4) << k;
    }
    EXPECT_EQ(s.terminate(), 0) << s.log();
  }
  json j = json::parse(test::slurp(test::fixture("family_heads/distilbert_seqcls/expected.json")));
  ServeProcess s({"--model", test::fixture("family_heads/distilbert_seqcls"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json batch = json::array();
  for (const auto& t : j["texts"]) batch.push_back(json::array({t}));
  Reply r = http("POST", s.url("/predict"), json({{"inputs", batch}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.j().size(), j["results"].size()) << r.body;
  for (size_t b = 0; b < j["results"].size(); ++b) {
    EXPECT_EQ(r.j()[b][0]["label"], j["results"][b]["label"]) << r.body;
    EXPECT_NEAR(r.j()[b][0]["score"].get<double>(), j["results"][b]["score"].get<double>(), 1e-4) << b;
  }
  EXPECT_EQ(http("GET", s.url("/info")).j()["model_type"], "distilbert");
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// Several --model folders: /translate routes by source and target (LibreTranslate), /languages lists the pairs.
// The second folder is d2l_trained with every ordinary target token upper-cased ("en-de" by its name), so its
// translations are the reference predictions upper-cased: a request routed to the wrong model shows.
TEST(Serve, SeveralLanguagePairsAreRouted) {
  TempDir dir;
  const std::string de = dir.path + "/en-de";
  fs::create_directories(de);
  for (const char* f : {"config.json", "model.safetensors", "src_vocab.txt"})
    fs::copy_file(test::fixture(std::string("d2l_trained/") + f), de + "/" + f);
  auto upper = [](std::string t) {
    if (t.empty() || t[0] == '<') return t;
    for (char& c : t) c = (char)std::toupper((unsigned char)c);
    return t;
  };
  {
    std::ifstream in(test::fixture("d2l_trained/tgt_vocab.txt"));
    std::ofstream out(de + "/tgt_vocab.txt");
    for (std::string line; std::getline(in, line);) out << upper(line) << "\n";
  }
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--model", de});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const json langs = http("GET", s.url("/languages")).j();
  ASSERT_EQ(langs.size(), 3u) << langs.dump();  // en with its two targets, then fr and de (targets only)
  EXPECT_EQ(langs[0]["code"], "en");
  EXPECT_EQ(langs[0]["targets"], json::array({"fr", "de"}));
  EXPECT_EQ(langs[1]["code"], "fr");
  EXPECT_EQ(langs[2]["code"], "de");
  EXPECT_EQ(langs[2]["targets"], json::array());
  EXPECT_EQ(http("GET", s.url("/info")).j()["pairs"].size(), 2u);

  json pred = json::parse(std::ifstream(test::fixture("d2l_trained/predictions.json")));
  std::vector<std::string> src, fr, de_want;
  for (const auto& p : pred["predictions"]) {
    src.push_back(p["src"]);
    fr.push_back(p["pred"]);
    std::string u;
    std::stringstream ss(p["pred"].get<std::string>());
    for (std::string w; ss >> w;) u += (u.empty() ? "" : " ") + upper(w);
    de_want.push_back(u);
  }
  Reply a = http("POST", s.url("/translate"), json{{"q", src}, {"source", "en"}, {"target", "de"}}.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j()["translatedText"].get<std::vector<std::string>>(), de_want);
  Reply b = http("POST", s.url("/translate"), json{{"q", src}, {"source", "auto"}, {"target", "fr"}}.dump());
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.j()["translatedText"].get<std::vector<std::string>>(), fr);
  expect_error(http("POST", s.url("/translate"), R"({"q": "go .", "target": "es"})"), 400, "validation",
               "this server translates en -> fr, en -> de");
  expect_error(http("POST", s.url("/translate"), R"({"q": "go .", "source": "fr", "target": "de"})"), 400,
               "validation", "`source` 'fr' is not supported");

  // Per-request generation fields: the reference's greedy output with processors, a target prefix.
  const json gen = json::parse(std::ifstream(test::fixture("generation/decoding.json")));
  for (const auto& c : gen["greedy"]) {
    if (c["options"].contains("bad_words_ids")) continue;
    json req = {{"source", "en"}, {"target", "fr"}, {"q", json::array()}};
    for (auto& [k, v] : c["options"].items()) req[k] = v;
    std::vector<std::string> want;
    for (const auto& x : c["sentences"]) req["q"].push_back(x["src"]), want.push_back(x["pred"]);
    Reply r = http("POST", s.url("/translate"), req.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j()["translatedText"].get<std::vector<std::string>>(), want) << c["options"].dump();
  }
  const auto& pc = gen["prefix"][0];
  std::string prefix;
  for (const auto& w : pc["prefix"]) prefix += (prefix.empty() ? "" : " ") + w.get<std::string>();
  Reply r = http("POST", s.url("/translate"),
                 json{{"q", pc["src"]}, {"target", "fr"}, {"target_prefix", prefix}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["translatedText"].get<std::string>().rfind(prefix, 0), 0u) << r.body;
  expect_error(http("POST", s.url("/translate"), R"({"q": "go .", "target": "fr", "sampling_topk": 3, "beam_size": 2})"),
               400, "validation", "needs `beam_size` 1");
  expect_error(http("POST", s.url("/translate"), R"({"q": "go .", "target": "fr", "repetition_penalty": 0})"), 400,
               "validation", "`repetition_penalty` must be a number in (0, 100]");
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// ------------------------------------------------------------------ text-embeddings-inference / OpenAI request fields
// Expected values: tests/fixtures/serve/expected.safetensors (scripts/make_serve_fixtures.py, PyTorch).

namespace fields {

std::vector<float> row(const Tensor& t, int64_t b) {
  const int64_t D = t.size(1);
  return std::vector<float>(t.f32() + b * D, t.f32() + (b + 1) * D);
}

// OpenAI's base64 embedding: little-endian float32.
std::vector<float> unbase64_f32(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string bytes;
  for (size_t i = 0; i + 3 < s.size(); i += 4) {
    const int a = val(s[i]), b = val(s[i + 1]), c = val(s[i + 2]), d = val(s[i + 3]);
    bytes += (char)((a << 2) | (b >> 4));
    if (s[i + 2] != '=') bytes += (char)(((b & 15) << 4) | (c >> 2));
    if (s[i + 3] != '=') bytes += (char)(((c & 3) << 6) | d);
  }
  std::vector<float> v(bytes.size() / 4);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= (uint32_t)(unsigned char)bytes[i * 4 + k] << (8 * k);
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

json openai_rows(const Reply& r) {
  json rows = json::array(), reply = r.j();
  for (const auto& d : reply["data"]) rows.push_back(d["embedding"]);
  return rows;
}

}  // namespace fields
using namespace fields;


TEST(ServeFields, EmbedFieldsMatchPyTorch) {
  auto e = SafeTensors::open(test::fixture("st_mean/expected.safetensors"));
  auto f = SafeTensors::open(test::fixture("serve/expected.safetensors"));
  ServeProcess s({"--model", test::fixture("st_mean"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const json texts = st_sentences();
  auto embed = [&](json body) { return http("POST", s.url("/embed"), body.dump()); };

  // normalize false: SentenceTransformer.encode without its Normalize module.
  Reply r = embed({{"inputs", texts}, {"normalize", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), f.get("st_mean_unnormalized")), 1e-5);
  // dimensions: cut to 8, then normalise (or not).
  r = embed({{"inputs", texts}, {"dimensions", 8}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), f.get("st_mean_dim8")), 1e-5);
  r = embed({{"inputs", texts}, {"dimensions", 8}, {"normalize", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), f.get("st_mean_dim8_raw")), 1e-5);
  expect_error(embed({{"inputs", texts}, {"dimensions", 33}}), 422, "validation", "embedding size 32");
  expect_error(embed({{"inputs", texts}, {"dimensions", 0}}), 422, "validation", "dimensions");
  // prompt_name: the folder's "passage: " prompt; an unknown name names the folder's prompts.
  r = embed({{"inputs", texts}, {"prompt_name", "passage"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), f.get("st_mean_passage")), 1e-5);
  r = embed({{"inputs", texts}, {"prompt_name", "query"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), e.get("embeddings_query")), 1e-5);
  expect_error(embed({{"inputs", texts}, {"prompt_name", "nope"}}), 422, "validation", "prompts: passage, query");
  // /tokenize with a prompt: its tokens come first, with no place in the text.
  Reply tk = http("POST", s.url("/tokenize"), json({{"inputs", "hello"}, {"prompt_name", "query"}}).dump());
  ASSERT_EQ(tk.status, 200) << tk.body;
  EXPECT_EQ(tk.j()[0][1]["text"], "query") << tk.body;
  EXPECT_TRUE(tk.j()[0][1]["start"].is_null()) << tk.body;
  // Token ids as given (PyTorch's input_ids, special tokens included) give the texts' embeddings.
  {
    const Tensor ids = e.get("input_ids"), mask = e.get("attention_mask");
    const int64_t B = ids.size(0), L = ids.size(1);
    json lists = json::array();
    for (int64_t b = 0; b < B; ++b) {
      json one = json::array();
      for (int64_t l = 0; l < L; ++l)
        if (mask.i64()[b * L + l]) one.push_back(ids.i64()[b * L + l]);
      lists.push_back(one);
    }
    r = embed({{"inputs", lists}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_LE(max_diff_rows(r.j(), e.get("embeddings")), 1e-5);
    r = embed({{"inputs", lists[2]}});  // one list of ids is one input
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_LE(max_diff_rows(r.j(), Tensor::from_f32({1, 32}, fields::row(e.get("embeddings"), 2))), 1e-5);
    json mixed = {texts[0], lists[1]};
    r = embed({{"inputs", mixed}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_LE(max_diff_rows(json::array({r.j()[1]}), Tensor::from_f32({1, 32}, fields::row(e.get("embeddings"), 1))),
              1e-5);
    expect_error(embed({{"inputs", json::array({2, 100000})}}), 422, "validation", "vocabulary size");
    expect_error(embed({{"inputs", json::array({json::array()})}}), 422, "validation", "empty");
    expect_error(embed({{"inputs", lists[0]}, {"prompt_name", "query"}}), 422, "validation", "token-id");
    // OpenAI takes them too.
    r = http("POST", s.url("/v1/embeddings"), json({{"input", lists}}).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_LE(max_diff_rows(fields::openai_rows(r), e.get("embeddings")), 1e-5);
  }
  // Fields a route does not take are ignored, as text-embeddings-inference ignores them, and named in a Warning.
  r = embed({{"inputs", "x"}, {"normalise", false}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("Warning"), "299 tfm \"unknown fields ignored: normalise\"") << r.headers;
  r = http("POST", s.url("/embed_all"), json({{"inputs", "x"}, {"normalize", false}}).dump());
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("Warning"), "299 tfm \"unknown fields ignored: normalize\"") << r.headers;
  EXPECT_EQ(embed({{"inputs", "x"}}).header("Warning"), "");
  expect_error(embed({{"inputs", "x"}, {"truncation_direction", "Up"}}), 422, "validation", "truncation_direction");

  // OpenAI: dimensions (cut, then normalised), encoding_format base64 (little-endian float32).
  r = http("POST", s.url("/v1/embeddings"), json({{"input", texts}, {"dimensions", 8}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(fields::openai_rows(r), f.get("st_mean_dim8")), 1e-5);
  r = http("POST", s.url("/v1/embeddings"), json({{"input", texts}, {"encoding_format", "base64"}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  {
    json rows = json::array(), reply = r.j();
    for (const auto& d : reply["data"]) {
      ASSERT_TRUE(d["embedding"].is_string()) << r.body;
      rows.push_back(fields::unbase64_f32(d["embedding"]));
    }
    EXPECT_LE(max_diff_rows(rows, e.get("embeddings")), 1e-5);
  }
  Reply bad = http("POST", s.url("/v1/embeddings"), json({{"input", "x"}, {"dimensions", 99}}).dump());
  EXPECT_EQ(bad.status, 400) << bad.body;  // OpenAI's status for a bad request
  ASSERT_TRUE(bad.j()["error"].is_object()) << bad.body;
  EXPECT_EQ(bad.j()["error"]["type"], "invalid_request_error");
  EXPECT_NE(bad.j()["error"]["message"].get<std::string>().find("dimensions"), std::string::npos) << bad.body;

  // /similarity: cosine of sentence 0's embedding with the others'.
  r = http("POST", s.url("/similarity"),
           json({{"inputs", {{"source_sentence", texts[0]},
                             {"sentences", std::vector<std::string>(texts.begin() + 1, texts.end())}}}})
               .dump());
  ASSERT_EQ(r.status, 200) << r.body;
  {
    const Tensor sim = f.get("st_mean_similarity");
    EXPECT_TRUE(test::all_close(r.j().get<std::vector<float>>(), std::vector<float>(sim.f32(), sim.f32() + 7), 1e-5f))
        << r.body;
  }
  expect_error(http("POST", s.url("/similarity"), R"({"inputs": {"source_sentence": "x"}})"), 422, "validation",
               "sentences");
  expect_error(http("POST", s.url("/embed_sparse"), R"({"inputs": "x"})"), 501, "not_implemented", "masked-LM");
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// truncation_direction Left keeps [CLS], the text's last tokens and [SEP] (tokenizers' TruncationDirection::Left).
TEST(ServeFields, TruncationDirectionLeftMatchesPyTorch) {
  auto f = SafeTensors::open(test::fixture("serve/expected.safetensors"));
  ServeProcess s({"--model", test::fixture("st_multi"), "--quiet", "--no-prompt"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json body = {{"inputs", st_sentences()}, {"truncate", true}, {"truncation_direction", "Left"}};
  Reply r = http("POST", s.url("/embed"), body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LE(max_diff_rows(r.j(), f.get("st_multi_left")), 1e-5);
  body.erase("truncate");  // without truncate, over-long inputs are still refused
  expect_error(http("POST", s.url("/embed"), body.dump()), 422, "validation", "limit of 16");
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// /embed_sparse on a BertForMaskedLM folder: SPLADE of PyTorch's logits as TEI's [{index, value}] (non-zero only).
TEST(ServeFields, EmbedSparseMatchesPyTorchSplade) {
  auto f = SafeTensors::open(test::fixture("serve/expected.safetensors"));
  const Tensor want = f.get("mlm_splade");
  std::stringstream ss(test::slurp(test::fixture("serve/mlm_texts.txt")));
  std::vector<std::string> texts;
  for (std::string line; std::getline(ss, line);) texts.push_back(line);
  ASSERT_EQ((int64_t)texts.size(), want.size(0));
  ServeProcess s({"--model", test::fixture("heads_mlm"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  Reply r = http("POST", s.url("/embed_sparse"), json({{"inputs", texts}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json got = r.j();
  ASSERT_EQ(got.size(), texts.size());
  const int64_t V = want.size(1);
  for (int64_t b = 0; b < want.size(0); ++b) {
    std::vector<float> dense(V, 0.0f);
    for (const auto& p : got[b]) {
      ASSERT_LT(p["index"].get<int64_t>(), V);
      EXPECT_GT(p["value"].get<float>(), 0.0f);
      dense[p["index"].get<int64_t>()] = p["value"].get<float>();
    }
    EXPECT_TRUE(test::all_close(dense, fields::row(want, b), 1e-4f)) << "text " << b;
  }
  // Token ids as given: PyTorch's input_ids of the first text.
  const Tensor ids = f.get("mlm_input_ids");
  json one = json::array();
  for (int64_t l = 0; l < ids.size(1); ++l)
    if (l == 0 || ids.i64()[l] != 0) one.push_back(ids.i64()[l]);
  r = http("POST", s.url("/embed_sparse"), json({{"inputs", one}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()[0].size(), got[0].size()) << r.body;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// 405 with Allow, a message for an empty body, CORS behind --cors-allow-origin, /openapi.json = the routes.
TEST(ServeFields, HttpHygieneAndOpenApi) {
  TempDir tmp;
  const std::string m = make_bert_dir(tmp.path);
  ServeProcess s({"--model", m, "--quiet", "--cors-allow-origin", "https://example.com"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  Reply r = http("GET", s.url("/embed"));
  EXPECT_EQ(r.status, 405) << r.body;
  EXPECT_EQ(r.header("Allow"), "POST, OPTIONS") << r.headers;
  EXPECT_EQ(r.j().value("error_type", ""), "method_not_allowed") << r.body;
  r = http("POST", s.url("/health"));
  EXPECT_EQ(r.status, 405) << r.body;
  EXPECT_EQ(r.header("Allow"), "GET, HEAD, OPTIONS") << r.headers;
  expect_error(http("POST", s.url("/embed"), ""), 422, "validation", "body is empty");
  expect_error(http("POST", s.url("/embed"), "inputs=x", {"Content-Type: text/plain"}), 422, "validation", "JSON");
  // curl -d '{...}' labels JSON application/x-www-form-urlencoded: every route reads it as JSON.
  for (const char* route : {"/embed", "/embed_all", "/tokenize"}) {
    r = http("POST", s.url(route), R"({"inputs": "one"})", {"Content-Type: application/x-www-form-urlencoded"});
    EXPECT_EQ(r.status, 200) << route << " " << r.body;
  }
  r = http("POST", s.url("/v1/embeddings"), R"({"input": "one"})", {"Content-Type: application/x-www-form-urlencoded"});
  EXPECT_EQ(r.status, 200) << r.body;
  // cpp-httplib refuses form bodies over 8192 bytes before any route: the answer says so (not --payload-limit).
  r = http("POST", s.url("/embed"), json({{"inputs", std::string(9000, 'a')}}).dump(),
           {"Content-Type: application/x-www-form-urlencoded"});
  expect_error(r, 413, "payload_too_large", "limited to 8192 bytes; send JSON with Content-Type: application/json");
  // Error messages quote a shortened excerpt of a long request value: first 80 bytes, then how many were left out.
  const std::string deep = "{\"inputs\":" + std::string(60, '[') + std::string(60, ']') + "}";
  r = http("POST", s.url("/embed"), deep);
  expect_error(r, 422, "validation", "... (36 more bytes)");
  EXPECT_LT(r.body.size(), 400u) << r.body.substr(0, 400);
  // JSON nested 200,000 deep overflowed a server thread's stack (the process died): refused before parsing.
  for (const char* route : {"/embed", "/v1/embeddings", "/tokenize", "/similarity"}) {
    const std::string deeper = "{\"inputs\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
    r = http("POST", s.url(route), deeper);
    EXPECT_EQ(r.status, std::string(route) == "/v1/embeddings" ? 400 : 422) << route << " " << r.body.substr(0, 400);
    EXPECT_NE(r.body.find("request body nests JSON deeper than 64 levels"), std::string::npos) << route << " " << r.body;
  }
  EXPECT_EQ(http("GET", s.url("/health")).status, 200);
  const std::string long_key = std::string(1000, 'k');
  r = http("POST", s.url("/embed"), json({{"inputs", "one"}, {long_key, 1}}).dump());
  EXPECT_EQ(r.status, 200) << r.body.substr(0, 400);
  EXPECT_EQ(r.header("Warning"), "299 tfm \"unknown fields ignored: " + long_key.substr(0, 80) + "... (920 more bytes)\"")
      << r.headers;
  r = http("POST", s.url("/embed"), json({{"inputs", "one"}, {"truncation_direction", std::string(5000, 'L')}}).dump());
  expect_error(r, 422, "validation", "... (4920 more bytes)");
  EXPECT_LT(r.body.size(), 400u) << r.body.substr(0, 400);
  // CORS: every answer names the origin; a preflight is answered without a key.
  r = http("POST", s.url("/embed"), R"({"inputs": "one"})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "https://example.com") << r.headers;
  r = http("OPTIONS", s.url("/embed"), "",
           {"Origin: https://example.com", "Access-Control-Request-Method: POST"});
  EXPECT_EQ(r.status, 204) << r.body;
  EXPECT_NE(r.header("Access-Control-Allow-Methods").find("POST"), std::string::npos) << r.headers;
  EXPECT_NE(r.header("Access-Control-Allow-Headers").find("Authorization"), std::string::npos) << r.headers;
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "https://example.com") << r.headers;

  // /openapi.json lists exactly the routes the server answers, each with its method.
  const std::map<std::string, std::set<std::string>> served = {
      {"/", {"get", "post"}},    {"/invocations", {"post"}}, {"/health", {"get"}},       {"/metrics", {"get"}},
      {"/info", {"get"}},        {"/openapi.json", {"get"}}, {"/embed", {"post"}},       {"/embed_all", {"post"}},
      {"/v1/embeddings", {"post"}}, {"/v1/models", {"get"}}, {"/v1/models/{model}", {"get"}},
      {"/similarity", {"post"}}, {"/embed_sparse", {"post"}}, {"/tokenize", {"post"}},   {"/decode", {"post"}},
      {"/predict", {"post"}},    {"/rerank", {"post"}},     {"/zero-shot-classification", {"post"}},
      {"/question-answering", {"post"}}};
  r = http("GET", s.url("/openapi.json"));
  ASSERT_EQ(r.status, 200) << r.body;
  const json doc = r.j();
  EXPECT_EQ(doc["openapi"].get<std::string>().substr(0, 2), "3.");
  std::map<std::string, std::set<std::string>> listed;
  for (auto it = doc["paths"].begin(); it != doc["paths"].end(); ++it)
    for (auto m = it.value().begin(); m != it.value().end(); ++m) listed[it.key()].insert(m.key());
  EXPECT_EQ(listed, served);
  for (const auto& [route, methods] : listed) {
    // Each listed route is routed (its own errors, never 404 / 405); a method it does not take is 405.
    const std::string path = route == "/v1/models/{model}" ? "/v1/models/" + fs::path(m).filename().string() : route;
    for (const std::string method : {"get", "post"}) {
      Reply got = http(method == "get" ? "GET" : "POST", s.url(path), method == "get" ? "" : "{}");
      if (!methods.count(method)) {
        EXPECT_EQ(got.status, 405) << method << " " << path;
        continue;
      }
      EXPECT_NE(got.status, 404) << path << " " << got.body;
      EXPECT_NE(got.status, 405) << path << " " << got.body;
    }
  }
  EXPECT_EQ(http("GET", s.url("/nope")).status, 404);
  EXPECT_EQ(s.terminate(), 0) << s.log();

  // Without --cors-allow-origin no CORS header is sent.
  ServeProcess plain({"--model", m, "--quiet"});
  ASSERT_TRUE(plain.wait_ready()) << plain.log();
  r = http("POST", plain.url("/embed"), R"({"inputs": "one"})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "") << r.headers;
  EXPECT_EQ(plain.terminate(), 0) << plain.log();
}

// LibreTranslate clients post forms too; alternatives are the beam's n-best list.
TEST(ServeFields, TranslateTakesFormBodies) {
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet", "--api-key", "k"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json pred = json::parse(std::ifstream(test::fixture("d2l_trained/predictions.json")));
  const std::string src = pred["predictions"][0]["src"], want = pred["predictions"][0]["pred"];
  auto urlenc = [](const std::string& v) {
    char* e = curl_easy_escape(nullptr, v.c_str(), (int)v.size());
    std::string out = e;
    curl_free(e);
    return out;
  };
  // urlencoded, with LibreTranslate's api_key field instead of the header
  Reply r = http("POST", s.url("/translate"), "q=" + urlenc(src) + "&source=en&target=fr&api_key=k",
                 {"Content-Type: application/x-www-form-urlencoded"});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["translatedText"], want);
  r = http("POST", s.url("/translate"), "q=" + urlenc(src) + "&source=en&target=fr&api_key=wrong",
           {"Content-Type: application/x-www-form-urlencoded"});
  EXPECT_EQ(r.status, 401) << r.body;
  // A JSON body under curl -d's default Content-Type (or none) is JSON, as LibreTranslate reads it; the api_key
  // field in it authorises the request.
  const std::string as_json = "\n " + json({{"q", src}, {"target", "fr"}, {"api_key", "k"}}).dump();
  for (const std::vector<std::string>& h : {std::vector<std::string>{"Content-Type: application/x-www-form-urlencoded"},
                                            std::vector<std::string>{"Content-Type:"}}) {
    r = http("POST", s.url("/translate"), as_json, h);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j()["translatedText"], want);
  }
  r = http("POST", s.url("/attention"), json({{"q", src}}).dump(),
           {"Content-Type: application/x-www-form-urlencoded", "Authorization: Bearer k"});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["translatedText"], want);
  // multipart/form-data
  {
    Reply mr;
    CURL* c = curl_easy_init();
    curl_mime* mime = curl_mime_init(c);
    for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"q", src}, {"source", "en"}, {"target", "fr"}, {"beam_size", "2"}}) {
      curl_mimepart* part = curl_mime_addpart(mime);
      curl_mime_name(part, k.c_str());
      curl_mime_data(part, v.c_str(), CURL_ZERO_TERMINATED);
    }
    curl_slist* h = curl_slist_append(nullptr, "Authorization: Bearer k");
    const std::string url = s.url("/translate");
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &mr.body);
    ASSERT_EQ(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &mr.status);
    curl_slist_free_all(h);
    curl_mime_free(mime);
    curl_easy_cleanup(c);
    EXPECT_EQ(mr.status, 200) << mr.body;
    EXPECT_TRUE(mr.j()["translatedText"].is_string()) << mr.body;
  }
  const std::vector<std::string> auth = {"Content-Type: application/json", "Authorization: Bearer k"};
  r = http("POST", s.url("/translate"), json({{"q", src}, {"target", "fr"}, {"alternatives", 0}}).dump(), auth);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["translatedText"], want);
  EXPECT_EQ(r.j()["alternatives"], json::array());
  // alternatives N: the beam's next N hypotheses (num_return_sequences N + 1, beam N + 1), as the CLI's n-best list.
  test::TempFolder t;
  const test::TfmRun nbest = test::run_tfm_in(
      t.path, {"translate", "--model", test::fixture("d2l_trained"), "--beam", "3", "--num-hypotheses", "3"}, src + "\n");
  ASSERT_EQ(nbest.exit_code, 0) << nbest.describe();
  std::vector<std::string> lines;
  std::istringstream nb(nbest.out);
  for (std::string line; std::getline(nb, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << nbest.out;
  r = http("POST", s.url("/translate"), json({{"q", src}, {"target", "fr"}, {"alternatives", 2}}).dump(), auth);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["translatedText"], lines[0]);
  EXPECT_EQ(r.j()["alternatives"], json::array({lines[1], lines[2]}));
  r = http("POST", s.url("/translate"), json({{"q", {src, src}}, {"target", "fr"}, {"alternatives", 2}}).dump(), auth);
  ASSERT_EQ(r.status, 200) << r.body;
  const json two = json::array({lines[1], lines[2]});
  EXPECT_EQ(r.j()["alternatives"], json::array({two, two}));
  expect_error(http("POST", s.url("/translate"), json({{"q", src}, {"target", "fr"}, {"alternatives", 64}}).dump(),
                    auth),
               400, "validation", "alternatives");
  r = http("POST", s.url("/translate"), json({{"q", src}, {"target", "fr"}, {"colour", 1}}).dump(), auth);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("Warning"), "299 tfm \"unknown fields ignored: colour\"") << r.headers;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace tfm

namespace tfm {
namespace {
using nlohmann::json;

// Hugging Face translation folders through /translate: the trained Marian (tests/fixtures/marian_trained) gives the
// reference generate's translations, greedy and with the folder's beam; every generation field is taken per
// request (sampling reproducible for a seed). An M2M100 folder serves every pair of its languages: `target` is its
// forced first token (forced_bos_token_id), /languages lists them.
TEST(ServeHf, TranslateMarianAndM2M100) {
  {
    const json ex = json::parse(std::ifstream(test::fixture("marian_trained/expected.json")));
    std::vector<std::string> src, greedy, beam;
    for (const auto& c : ex["cases"]) {
      src.push_back(c["source"]);
      greedy.push_back(c["runs"][0]["text"]);
      beam.push_back(c["runs"][1]["text"]);
    }
    ServeProcess s({"--model", test::fixture("marian_trained")});
    ASSERT_GT(s.port(), 0) << s.log();
    ASSERT_TRUE(s.wait_ready()) << s.log();
    Reply a = http("POST", s.url("/translate"), json{{"q", src}, {"source", "en"}, {"target", "fr"}}.dump());
    ASSERT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.j()["translatedText"].get<std::vector<std::string>>(), beam);
    Reply b = http("POST", s.url("/translate"),
                   json{{"q", src}, {"source", "en"}, {"target", "fr"}, {"beam_size", 1}}.dump());
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(b.j()["translatedText"].get<std::vector<std::string>>(), greedy);
    const json sample = {
        {"q", src}, {"target", "fr"}, {"sampling_topk", 0}, {"sampling_temperature", 1.5}, {"seed", 5}};
    Reply c1 = http("POST", s.url("/translate"), sample.dump()), c2 = http("POST", s.url("/translate"), sample.dump());
    ASSERT_EQ(c1.status, 200) << c1.body;
    EXPECT_EQ(c1.j()["translatedText"], c2.j()["translatedText"]);
    // alternatives with sampling: more samples (not a beam, which sampling refuses); a repeated q draws
    // independently unless seed_per_sentence.
    json alt = sample;
    alt["q"] = src[0];
    alt["alternatives"] = 3;
    Reply e = http("POST", s.url("/translate"), alt.dump());
    ASSERT_EQ(e.status, 200) << e.body;
    EXPECT_EQ(e.j()["alternatives"].size(), 3u) << e.body;
    json rep = sample;
    rep["q"] = json::array({src[0], src[0], src[0], src[0]});
    rep["sampling_temperature"] = 3.0;
    const auto independent = http("POST", s.url("/translate"), rep.dump()).j()["translatedText"];
    EXPECT_GT(std::set<std::string>(independent.begin(), independent.end()).size(), 1u) << independent.dump();
    rep["seed_per_sentence"] = true;
    const auto same = http("POST", s.url("/translate"), rep.dump()).j()["translatedText"];
    EXPECT_EQ(std::set<std::string>(same.begin(), same.end()).size(), 1u) << same.dump();
    Reply d = http("POST", s.url("/translate"),
                   json{{"q", src}, {"target", "fr"}, {"beam_size", 3}, {"length_penalty", 0.6},
                        {"early_stopping", false}, {"forced_eos", false}, {"no_repeat_ngram_size", 3},
                        {"repetition_penalty", 1.1}, {"min_length", 2},
                        {"max_new_tokens", 20}, {"bad_words", json::array({"chat"})},
                        {"bad_words_ids", json::array({json::array({5})})}}
                       .dump());
    ASSERT_EQ(d.status, 200) << d.body;
    EXPECT_EQ(d.j()["translatedText"].size(), src.size());
    expect_error(http("POST", s.url("/translate"), R"({"q": "Hi.", "target": "fr", "early_stopping": "soon"})"), 400,
                 "validation", "`early_stopping` must be true, false or \"never\"");
  }
  const json ex = json::parse(std::ifstream(test::fixture("m2m100/expected.json")));
  ServeProcess s({"--model", test::fixture("m2m100")});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const json langs = http("GET", s.url("/languages")).j();
  auto fr = std::find_if(langs.begin(), langs.end(), [](const json& e) { return e["code"] == "fr"; });
  ASSERT_NE(fr, langs.end()) << langs.dump();
  const auto targets = (*fr)["targets"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(targets.begin(), targets.end(), "de"), targets.end());
  EXPECT_NE(std::find(targets.begin(), targets.end(), "en"), targets.end());
  EXPECT_EQ(std::find(targets.begin(), targets.end(), "fr"), targets.end());
  EXPECT_GE(langs.size(), 100u);
  std::vector<std::string> src, want;
  for (const auto& c : ex["cases"]) src.push_back(c["source"]), want.push_back(c["runs"][1]["text"]);
  // The fixture's reference forced __fr__ (forced_bos_token_id); a LibreTranslate request says target "fr".
  Reply a = http("POST", s.url("/translate"), json{{"q", src}, {"source", "en"}, {"target", "fr"}}.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.j()["translatedText"].get<std::vector<std::string>>(), want);
  Reply de = http("POST", s.url("/translate"), json{{"q", src}, {"source", "en"}, {"target", "de"}}.dump());
  ASSERT_EQ(de.status, 200) << de.body;
  EXPECT_EQ(de.j()["translatedText"].size(), src.size());
  expect_error(http("POST", s.url("/translate"), R"({"q": "Run!", "source": "en", "target": "xx"})"), 400,
               "validation", "`target` 'xx' is not supported");
}

// /attention translates as /translate does: the beam_size asked (1: greedy, not the folder's default beam of 4;
// more: the beam's best hypothesis), the folder's default without one. Marian's references: "Thank you." is
// "Merci !" greedy and "Merci bien." with the default beam (tests/fixtures/marian_trained/expected.json).
TEST(ServeHf, AttentionHonoursBeamSize) {
  ServeProcess s({"--model", test::fixture("marian_trained"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  auto attention = [&](const json& body) { return http("POST", s.url("/attention"), body.dump()); };
  Reply greedy = attention({{"q", "Thank you."}, {"beam_size", 1}});
  ASSERT_EQ(greedy.status, 200) << greedy.body;
  EXPECT_EQ(greedy.j()["translatedText"], "Merci !");
  Reply dflt = attention({{"q", "Thank you."}});
  ASSERT_EQ(dflt.status, 200) << dflt.body;
  EXPECT_EQ(dflt.j()["translatedText"], "Merci bien.");
  Reply beam = attention({{"q", "Thank you."}, {"beam_size", 4}});
  ASSERT_EQ(beam.status, 200) << beam.body;
  const json b = beam.j();
  EXPECT_EQ(b["translatedText"], "Merci bien.");
  ASSERT_FALSE(b["cross"].empty());
  EXPECT_EQ(b["cross"][0][0].size(), b["target_tokens"].size()) << "one attention row per target step";
  expect_error(attention({{"q", "Thank you."}, {"beam_size", 99}}), 422, "validation", "beam_size");
  Reply extra = attention({{"q", "Thank you."}, {"beam_size", 1}, {"colour", 1}});
  EXPECT_EQ(extra.status, 200) << extra.body;
  EXPECT_EQ(extra.header("Warning"), "299 tfm \"unknown fields ignored: colour\"") << extra.headers;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// A classifier folder is served and reported as a classifier (a one-label cross-encoder as a reranker), not as
// an embedding model; --pooling on a translation folder is refused, not ignored.
TEST(ServeInfo, ReportsWhatTheFolderIs) {
  {
    ServeProcess s({"--model", test::fixture("heads_seqcls")});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    EXPECT_EQ(http("GET", s.url("/info")).j()["model_kind"], "classifier");
    EXPECT_NE(s.log().find("loading the classifier model"), std::string::npos) << s.log();
    EXPECT_EQ(s.terminate(), 0) << s.log();
  }
  {
    ServeProcess s({"--model", test::fixture("heads_cross"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    EXPECT_EQ(http("GET", s.url("/info")).j()["model_kind"], "reranker");
    EXPECT_EQ(s.terminate(), 0) << s.log();
  }
  // The other heads by their pipeline task (POST / goes to the route that answers them).
  for (auto [folder, kind] : {std::pair{"heads_tokcls", "token-classification"}, {"heads_mlm", "fill-mask"}}) {
    ServeProcess s({"--model", test::fixture(folder), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    EXPECT_EQ(http("GET", s.url("/info")).j()["model_kind"], kind) << folder;
    EXPECT_EQ(s.terminate(), 0) << s.log();
  }
  TempDir tmp;
  const std::string cmd = std::string(TFM_BINARY) + " serve --port 0 --model " + test::fixture("d2l_trained") +
                          " --pooling cls 2>" + tmp.path + "/err";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string err = test::slurp(tmp.path + "/err");
  EXPECT_NE(err.find("--pooling"), std::string::npos) << err;
  EXPECT_NE(err.find("translation"), std::string::npos) << err;
}

}  // namespace
}  // namespace tfm
