// `tfm serve` as LibreTranslate, driven by the libretranslate npm client itself (installed by the test,
// tests/npm_clients.h) and by curl requests of the same bytes: the client sends its key as `apiKey` (always, ""
// without one) and lists /languages without a key before it translates.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "npm_clients.h"
#include "serve_client.h"
#include "test_util.h"

namespace tfm {
namespace {

using nlohmann::json;
using test::http;
using test::Reply;
using test::ServeProcess;

// The client's request, byte for byte (libretranslate 1.0.1's translate()).
std::string client_body(const std::string& q, const std::string& key) {
  return "{\"q\":" + json(q).dump() + ",\"source\":\"en\",\"target\":\"fr\",\"format\":\"text\",\"apiKey\":" +
         json(key).dump() + "}";
}

TEST(ServeLibreTranslateClient, ApiKeyFieldAndOpenLanguages) {
  const json pred = json::parse(std::ifstream(test::fixture("d2l_trained/predictions.json")));
  const std::string src = pred["predictions"][0]["src"], want = pred["predictions"][0]["pred"];
  {  // no key: the client's empty apiKey is taken
    ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    Reply r = http("POST", s.url("/translate"), client_body(src, ""));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j()["translatedText"], want);
    EXPECT_EQ(r.header("Warning"), "") << r.headers;
    EXPECT_EQ(s.terminate(), 0) << s.log();
  }
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet", "--api-key", "sekret"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  Reply r = http("POST", s.url("/translate"), client_body(src, "sekret"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()["translatedText"], want);
  EXPECT_EQ(http("POST", s.url("/translate"), client_body(src, "wrong")).status, 401);
  EXPECT_EQ(http("POST", s.url("/translate"), client_body(src, "")).status, 401);
  r = http("GET", s.url("/languages"));  // as LibreTranslate: no key needed
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.j()[0]["code"], "en");
  EXPECT_EQ(http("GET", s.url("/info")).status, 401);
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(ServeLibreTranslateClient, LibreTranslateNpmClient) {
  std::string why;
  const std::string modules = test::npm_clients({"libretranslate@1"}, &why);
  if (modules.empty()) GTEST_SKIP() << why;
  const json pred = json::parse(std::ifstream(test::fixture("d2l_trained/predictions.json")));
  std::vector<std::string> src, want;
  for (size_t i = 0; i < 3 && i < pred["predictions"].size(); ++i)
    src.push_back(pred["predictions"][i]["src"]), want.push_back(pred["predictions"][i]["pred"]);
  test::ScratchDir tmp;
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet", "--api-key", "sekret"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const std::string script = R"JS(
const { translate } = require(MODULES + '/libretranslate');
(async () => {
  const out = [];
  for (const q of SOURCES) out.push(await translate({ query: q, source: 'en', target: 'fr', apiurl: URL, apiKey: 'sekret' }));
  console.log(JSON.stringify(out));
})().catch(e => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
)JS";
  int rc = 0;
  const std::string got = test::run_node(
      modules, "const URL = '" + s.url("") + "', SOURCES = " + json(src).dump() + ";\n" + script, tmp.path, &rc);
  ASSERT_EQ(rc, 0) << got << s.log();
  EXPECT_EQ(json::parse(got, nullptr, false), json(want)) << got;
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace tfm
