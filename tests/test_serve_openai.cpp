// `tfm serve` as OpenAI's API: /v1/embeddings, /v1/models and /v1/models/{id}, errors in OpenAI's shape (400
// with `param`), and CORS preflights that allow what the openai client sends. Driven by the openai npm client
// itself (installed by the test, tests/npm_clients.h) and by curl requests of the same bytes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "npm_clients.h"
#include "serve_client.h"

namespace tfm {
namespace {

using nlohmann::json;
using test::http;
using test::Reply;
using test::ServeProcess;

TEST(ServeOpenAI, ModelsListAndRetrieve) {
  test::ScratchDir tmp;
  const std::string m = test::bert_serve_dir(tmp.path);
  ServeProcess s({"--model", m, "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  Reply r = http("GET", s.url("/v1/models"));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.j();
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u) << r.body;
  EXPECT_EQ(j["data"][0]["id"], "bert");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_TRUE(j["data"][0]["created"].is_number_integer()) << r.body;
  EXPECT_TRUE(j["data"][0]["owned_by"].is_string()) << r.body;
  r = http("GET", s.url("/v1/models/bert"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j(), j["data"][0]);
  r = http("GET", s.url("/v1/models/gpt-4"));
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(r.j()["error"]["code"], "model_not_found") << r.body;
  EXPECT_EQ(r.j()["error"]["type"], "invalid_request_error") << r.body;
  EXPECT_NE(r.j()["error"]["message"].get<std::string>().find("gpt-4"), std::string::npos) << r.body;
  // A method the route does not take: 405 naming GET.
  r = http("POST", s.url("/v1/models/bert"), "{}");
  EXPECT_EQ(r.status, 405) << r.body;
  EXPECT_NE(r.header("Allow").find("GET"), std::string::npos) << r.headers;
  EXPECT_NE(http("GET", s.url("/metrics")).body.find("tfm_request_count{route=\"/v1/models/{model}\"} 3"),
            std::string::npos);
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// OpenAI answers a bad request 400 with `param` naming the field; 422 (its UnprocessableEntityError) is not what
// its clients expect.
TEST(ServeOpenAI, BadRequestsAre400WithParam) {
  test::ScratchDir tmp;
  const std::string m = test::bert_serve_dir(tmp.path);
  ServeProcess s({"--model", m, "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  struct Case {
    std::string body, param;
  };
  for (const Case& c : std::vector<Case>{{R"({"input": "one", "dimensions": 999})", "dimensions"},
                                         {R"({"input": "one", "encoding_format": "hex"})", "encoding_format"},
                                         {R"({"input": ["one", 7]})", "input"},
                                         {R"({"input": ""})", "input"},
                                         {R"({"model": "x"})", "input"}}) {
    Reply r = http("POST", s.url("/v1/embeddings"), c.body);
    EXPECT_EQ(r.status, 400) << c.body << " -> " << r.body;
    json e = r.j()["error"];
    EXPECT_EQ(e["type"], "invalid_request_error") << r.body;
    EXPECT_EQ(e["param"], c.param) << c.body << " -> " << r.body;
    EXPECT_TRUE(e["message"].is_string()) << r.body;
  }
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// A browser's preflight for the openai client's request lists the client's own headers (x-stainless-*); the
// answer must allow each of them.
TEST(ServeOpenAI, CorsPreflightAllowsTheHeadersAsked) {
  test::ScratchDir tmp;
  const std::string m = test::bert_serve_dir(tmp.path);
  ServeProcess s({"--model", m, "--quiet", "--cors-allow-origin", "https://app.example"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const std::string asked =
      "authorization,content-type,x-stainless-arch,x-stainless-lang,x-stainless-os,x-stainless-package-version,"
      "x-stainless-retry-count,x-stainless-runtime,x-stainless-runtime-version,x-stainless-timeout";
  Reply r = http("OPTIONS", s.url("/v1/embeddings"), "",
                 {"Origin: https://app.example", "Access-Control-Request-Method: POST",
                  "Access-Control-Request-Headers: " + asked});
  EXPECT_EQ(r.status, 204) << r.body;
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "https://app.example") << r.headers;
  std::string allowed = r.header("Access-Control-Allow-Headers");
  for (char& c : allowed) c = (char)std::tolower((unsigned char)c);
  std::stringstream ss(asked);
  for (std::string h; std::getline(ss, h, ',');) EXPECT_NE(allowed.find(h), std::string::npos) << h << ": " << r.headers;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

// The openai npm client: embeddings (its default base64 encoding and plain floats), the model list, and a bad
// request caught as BadRequestError with its param. Its request headers feed a preflight as a browser sends it.
TEST(ServeOpenAI, OpenAiNpmClient) {
  std::string why;
  const std::string modules = test::npm_clients({"openai@6"}, &why);
  if (modules.empty()) GTEST_SKIP() << why;
  test::ScratchDir tmp;
  const std::string m = test::bert_serve_dir(tmp.path);
  ServeProcess s({"--model", m, "--quiet", "--api-key", "sekret", "--cors-allow-origin", "*"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const std::string script = R"JS(
const { OpenAI, BadRequestError } = require(MODULES + '/openai');
const sent = [];
const client = new OpenAI({ baseURL: process.argv[2] || BASE, apiKey: 'sekret', maxRetries: 0,
  fetch: (url, init) => {
    const h = init.headers || {};
    sent.push(h instanceof Headers ? [...h.keys()] : Object.keys(h));
    return fetch(url, init);
  } });
(async () => {
  const out = {};
  const a = await client.embeddings.create({ model: 'bert', input: ['the cat sat on the mat', 'red car'] });
  out.base64 = a.data.map(d => d.embedding);
  const b = await client.embeddings.create({ model: 'bert', input: 'the cat sat on the mat', encoding_format: 'float' });
  out.float = b.data[0].embedding;
  out.models = (await client.models.list()).data.map(m => m.id);
  out.model = (await client.models.retrieve('bert')).id;
  try {
    await client.embeddings.create({ model: 'bert', input: 'one', dimensions: 999 });
    out.bad = 'no error';
  } catch (e) {
    out.bad = { bad_request: e instanceof BadRequestError, status: e.status, param: e.param };
  }
  out.headers = [...new Set(sent.flat().map(h => h.toLowerCase()))].sort();
  console.log(JSON.stringify(out));
})().catch(e => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
)JS";
  int rc = 0;
  const std::string base = s.url("/v1");
  const std::string got =
      test::run_node(modules, "const BASE = '" + base + "';\n" + script, tmp.path, &rc);
  ASSERT_EQ(rc, 0) << got << s.log();
  const json j = json::parse(got, nullptr, false);
  ASSERT_TRUE(j.is_object()) << got;
  // The same vectors as a plain curl request.
  Reply r = http("POST", s.url("/v1/embeddings"), R"({"input": ["the cat sat on the mat", "red car"], "model": "bert"})",
                 {"Content-Type: application/json", "Authorization: Bearer sekret"});
  ASSERT_EQ(r.status, 200) << r.body;
  for (size_t i = 0; i < 2; ++i) {
    const auto want = r.j()["data"][i]["embedding"].get<std::vector<float>>();
    const auto b64 = j["base64"][i].get<std::vector<float>>();
    ASSERT_EQ(b64.size(), want.size()) << got;
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(b64[k], want[k]) << i << " " << k;  // float32 bytes
  }
  const auto f = j["float"].get<std::vector<float>>();
  ASSERT_EQ(f.size(), 32u);
  EXPECT_EQ(j["models"], json::array({"bert"}));
  EXPECT_EQ(j["model"], "bert");
  EXPECT_EQ(j["bad"]["bad_request"], true) << got;
  EXPECT_EQ(j["bad"]["status"], 400) << got;
  EXPECT_EQ(j["bad"]["param"], "dimensions") << got;

  // A browser preflight for the headers this client sent.
  std::string asked;
  for (const auto& h : j["headers"]) asked += (asked.empty() ? "" : ",") + h.get<std::string>();
  ASSERT_NE(asked.find("x-stainless-"), std::string::npos) << asked;
  r = http("OPTIONS", s.url("/v1/embeddings"), "",
           {"Origin: https://app.example", "Access-Control-Request-Method: POST",
            "Access-Control-Request-Headers: " + asked});
  EXPECT_EQ(r.status, 204) << r.body;
  EXPECT_EQ(r.header("Access-Control-Allow-Headers"), asked) << r.headers;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace tfm
