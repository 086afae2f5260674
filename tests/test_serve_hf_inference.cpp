// `tfm serve` as the Hugging Face Inference API: {"inputs", "parameters": {...}} on the routes it applies to,
// POST / (and /invocations) answering the model's task, unknown fields ignored and named in a Warning header.
// Driven by the @huggingface/inference npm client itself (installed by the test, tests/npm_clients.h) and by curl
// requests of the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "npm_clients.h"
#include "serve_client.h"
#include "test_util.h"

namespace tfm {
namespace {

using nlohmann::json;
using test::http;
using test::Reply;
using test::ServeProcess;

TEST(ServeHfInference, EmbedTakesParameters) {
  test::ScratchDir tmp;
  const std::string m = test::bert_serve_dir(tmp.path);
  ServeProcess s({"--model", m});  // with its access log
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const std::string long_text = "one two three four five one two three four five one two three four five one two";
  Reply plain = http("POST", s.url("/embed"), json({{"inputs", long_text}, {"normalize", false}, {"truncate", true}}).dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  Reply hf = http("POST", s.url("/embed"),
                  json({{"inputs", long_text}, {"parameters", {{"normalize", false}, {"truncate", true}}}}).dump());
  ASSERT_EQ(hf.status, 200) << hf.body;
  EXPECT_EQ(hf.j(), plain.j());
  EXPECT_EQ(hf.header("Warning"), "") << hf.headers;
  // dimensions in parameters too; a parameter no route takes is ignored and named.
  hf = http("POST", s.url("/embed"), json({{"inputs", "red car"}, {"parameters", {{"dimensions", 8}, {"wait_for_model", true}}},
                                           {"options", {{"use_cache", false}}}}).dump());
  ASSERT_EQ(hf.status, 200) << hf.body;
  EXPECT_EQ(hf.j()[0].size(), 8u) << hf.body;
  EXPECT_EQ(hf.header("Warning"), "299 tfm \"unknown fields ignored: parameters.wait_for_model, options\"")
      << hf.headers;
  // A field given both ways with different values is refused; parameters that are not an object too.
  Reply both = http("POST", s.url("/embed"),
                    json({{"inputs", "red car"}, {"normalize", true}, {"parameters", {{"normalize", false}}}}).dump());
  EXPECT_EQ(both.status, 422) << both.body;
  EXPECT_NE(both.body.find("normalize"), std::string::npos) << both.body;
  EXPECT_EQ(http("POST", s.url("/embed"), R"({"inputs": "red car", "parameters": 3})").status, 422);
  // POST / and /invocations answer as /embed.
  const std::string body = R"({"inputs": ["red car", "the cat sat on the mat"]})";
  Reply embed = http("POST", s.url("/embed"), body);
  ASSERT_EQ(embed.status, 200) << embed.body;
  for (const char* path : {"/", "/invocations"}) {
    Reply r = http("POST", s.url(path), body);
    ASSERT_EQ(r.status, 200) << path << " " << r.body;
    EXPECT_EQ(r.j(), embed.j()) << path;
  }
  EXPECT_EQ(s.terminate(), 0) << s.log();
  EXPECT_NE(s.log().find("warning: unknown fields ignored: parameters.wait_for_model, options"), std::string::npos)
      << s.log();
}

// text-classification: top_k and function_to_apply; with `parameters` (and at /) the Inference API's shape, a
// list of labels per input. Scores against the fixture's PyTorch logits.
TEST(ServeHfInference, PredictTakesParametersAndAnswersInItsShape) {
  ServeProcess s({"--model", test::fixture("heads_seqcls"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  Reply all = http("POST", s.url("/predict"), R"({"inputs": "the cat sat on the mat", "raw_scores": true})");
  ASSERT_EQ(all.status, 200) << all.body;
  ASSERT_EQ(all.j().size(), 3u) << all.body;  // TEI's shape for one input: its labels
  Reply hf = http("POST", s.url("/predict"),
                  R"({"inputs": "the cat sat on the mat", "parameters": {"top_k": 2, "function_to_apply": "none"}})");
  ASSERT_EQ(hf.status, 200) << hf.body;
  const json j = hf.j();
  ASSERT_EQ(j.size(), 1u) << hf.body;
  ASSERT_EQ(j[0].size(), 2u) << hf.body;
  EXPECT_EQ(j[0][0], all.j()[0]);
  EXPECT_EQ(j[0][1], all.j()[1]);
  Reply sig = http("POST", s.url("/predict"),
                   R"({"inputs": "the cat sat on the mat", "parameters": {"function_to_apply": "sigmoid"}})");
  ASSERT_EQ(sig.status, 200) << sig.body;
  const json raw_all = all.j();
  const json sig_all = sig.j();
  for (const json& e : sig_all[0]) {
    const json raw =
        *std::find_if(raw_all.begin(), raw_all.end(), [&](const json& a) { return a["label"] == e["label"]; });
    EXPECT_NEAR(e["score"].get<double>(), 1.0 / (1.0 + std::exp(-raw["score"].get<double>())), 1e-6) << sig.body;
  }
  EXPECT_EQ(http("POST", s.url("/predict"), R"({"inputs": "x", "parameters": {"function_to_apply": "relu"}})").status,
            422);
  EXPECT_EQ(http("POST", s.url("/predict"), R"({"inputs": "x", "parameters": {"top_k": 0}})").status, 422);
  // POST / is /predict in the Inference API's shape.
  Reply root = http("POST", s.url("/"), R"({"inputs": "the cat sat on the mat"})");
  ASSERT_EQ(root.status, 200) << root.body;
  Reply predict = http("POST", s.url("/predict"), R"({"inputs": "the cat sat on the mat"})");
  EXPECT_EQ(root.j(), json::array({predict.j()}));
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// The @huggingface/inference client (4.x) pointed at the server: featureExtraction at /embed and at the root,
// textClassification with parameters at /predict and without at the root. Each answer is what curl gets.
TEST(ServeHfInference, HuggingFaceInferenceNpmClient) {
  std::string why;
  const std::string modules = test::npm_clients({"@huggingface/inference@4"}, &why);
  if (modules.empty()) GTEST_SKIP() << why;
  test::ScratchDir tmp;
  const std::string m = test::bert_serve_dir(tmp.path);
  ServeProcess enc({"--model", m, "--quiet"});
  ServeProcess cls({"--model", test::fixture("heads_seqcls"), "--quiet"});
  ASSERT_TRUE(enc.wait_ready()) << enc.log();
  ASSERT_TRUE(cls.wait_ready()) << cls.log();
  const std::string script = R"JS(
const { InferenceClient } = require(MODULES + '/@huggingface/inference');
const client = new InferenceClient();
(async () => {
  const out = {};
  out.fe = await client.featureExtraction({ endpointUrl: ENC + '/embed', inputs: 'the cat sat on the mat',
                                            parameters: { normalize: false } });
  out.fe_root = await client.featureExtraction({ endpointUrl: ENC, inputs: ['red car', 'a dog'] });
  out.tc = await client.textClassification({ endpointUrl: CLS + '/predict', inputs: 'the cat sat on the mat',
                                             parameters: { top_k: 2 } });
  out.tc_root = await client.textClassification({ endpointUrl: CLS, inputs: 'the cat sat on the mat' });
  console.log(JSON.stringify(out));
})().catch(e => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
)JS";
  int rc = 0;
  const std::string got = test::run_node(
      modules, "const ENC = '" + enc.url("") + "', CLS = '" + cls.url("") + "';\n" + script, tmp.path, &rc);
  ASSERT_EQ(rc, 0) << got << enc.log() << cls.log();
  const json j = json::parse(got, nullptr, false);
  ASSERT_TRUE(j.is_object()) << got;
  EXPECT_EQ(j["fe"], http("POST", enc.url("/embed"), R"({"inputs": "the cat sat on the mat", "normalize": false})").j());
  EXPECT_EQ(j["fe_root"], http("POST", enc.url("/embed"), R"({"inputs": ["red car", "a dog"]})").j());
  const json labels = http("POST", cls.url("/predict"), R"({"inputs": "the cat sat on the mat"})").j();
  ASSERT_EQ(labels.size(), 3u);
  EXPECT_EQ(j["tc"], json::array({labels[0], labels[1]})) << got;
  EXPECT_EQ(j["tc_root"], labels) << got;
  EXPECT_EQ(enc.terminate(), 0) << enc.log();
  EXPECT_EQ(cls.terminate(), 0) << cls.log();
}

}  // namespace
}  // namespace tfm
