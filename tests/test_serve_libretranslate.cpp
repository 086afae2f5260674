// tfm serve as LibreTranslate: the served direction of a `tfm train` folder, /detect and source "auto"
// (detectedLanguage), /frontend/settings, format "html", /translate_file with /download_file, errors as 400
// {"error": ...}; with requests byte-identical to curl's and with the npm `libretranslate` client itself.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "io/text_file.h"
#include "run_tfm.h"
#include "serve/html_text.h"
#include "serve_client.h"
#include "test_util.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::http;
using test::Reply;
using test::ServeProcess;

// LibreTranslate's error shape and status: 400 with a message in "error".
void expect_lt_error(const Reply& r, long status, const std::string& needle) {
  EXPECT_EQ(r.status, status) << r.body;
  const json j = r.j();
  ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_string()) << r.body;
  EXPECT_NE(j["error"].get<std::string>().find(needle), std::string::npos) << r.body;
}

// d2l_trained copied into `dir` with its config naming `source` -> `target`; upper_case: every ordinary target
// token upper-cased, so that what this folder translated shows in the output.
std::string d2l_folder(const std::string& dir, const std::string& source, const std::string& target, bool upper_case) {
  fs::create_directories(dir);
  for (const char* f : {"model.safetensors", "src_vocab.txt"})
    fs::copy_file(test::fixture(std::string("d2l_trained/") + f), dir + "/" + f);
  json cfg = json::parse(std::ifstream(test::fixture("d2l_trained/config.json")));
  cfg["source_lang"] = source, cfg["target_lang"] = target;
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  std::ifstream in(test::fixture("d2l_trained/tgt_vocab.txt"));
  std::ofstream out(dir + "/tgt_vocab.txt");
  for (std::string line; std::getline(in, line);) {
    if (upper_case && !line.empty() && line[0] != '<')
      for (char& c : line) c = (char)std::toupper((unsigned char)c);
    out << line << "\n";
  }
  return dir;
}

// A language identifier of en / fr / de trained by `tfm langid train` on Multi30k (empty when the data is missing).
std::string train_langid(const std::string& dir) {
  const std::string m = test::data_dir() + "/multi30k";
  if (!fs::exists(m + "/train.en.gz")) return "";
  const auto r = test::run_tfm_in(dir, {"langid", "train", "--corpus", "en=" + m + "/train.en.gz", "--corpus",
                                        "fr=" + m + "/train.fr.gz", "--corpus", "de=" + m + "/train.de.gz",
                                        "--max-lines", "3000", "--out", dir + "/langid.json"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  return dir + "/langid.json";
}

std::vector<std::string> reference_sources(std::vector<std::string>* preds = nullptr) {
  const json pred = json::parse(std::ifstream(test::fixture("d2l_trained/predictions.json")));
  std::vector<std::string> src;
  for (const auto& p : pred["predictions"]) {
    src.push_back(p["src"]);
    if (preds) preds->push_back(p["pred"]);
  }
  return src;
}

TEST(ServeLibreTranslate, HtmlPiecesKeepTheMarkup) {
  using serve::HtmlPiece;
  const std::string doc =
      "<p class=\"a>b\">Hello &amp; good<br/>day</p>\n<script>if (a < b) x();</script>"
      "<!-- note --> x &lt; 3 <pre>keep me</pre> 2 < 3";
  const std::vector<HtmlPiece> p = serve::split_html(doc);
  std::string raw;
  std::vector<std::string> texts;
  for (const HtmlPiece& x : p) {
    raw += x.raw;
    if (x.translate) texts.push_back(x.text);
  }
  EXPECT_EQ(raw, doc);
  EXPECT_EQ(texts, (std::vector<std::string>{"Hello & good", "day", "x < 3", "2 < 3"}));
  EXPECT_EQ(serve::join_html(p, {"Bonjour & bon", "jour", "x < 3", "2 < 3"}),
            "<p class=\"a>b\">Bonjour &amp; bon<br/>jour</p>\n<script>if (a < b) x();</script>"
            "<!-- note --> x &lt; 3 <pre>keep me</pre> 2 &lt; 3");
  EXPECT_EQ(serve::html_unescape("&#39;&#x41;&nbsp;&unknown;&"), "'A\xC2\xA0&unknown;&");
}

// Item 1: `tfm train` on Tatoeba's fra.txt writes en -> fr into config.json; tfm serve offers that direction
// although the folder is named fra-eng, and the README's request (source en, target fr) is answered.
TEST(ServeLibreTranslate, TrainedDirectionIsServed) {
  const std::string fra = test::data_dir() + "/fra-eng/fra.txt";
  if (!fs::exists(fra)) GTEST_SKIP() << fra << " not found (set TFM_DATA_DIR)";
  test::TempFolder tmp;
  {
    std::ifstream in(fra);
    std::ofstream out(tmp.path + "/fra.txt");
    std::string line;
    for (int i = 0; i < 200 && std::getline(in, line); ++i) out << line << "\n";
  }
  const std::string model = tmp.path + "/fra-eng";
  auto r = test::run_tfm_in(tmp.path, {"train", "--data", tmp.path + "/fra.txt", "--out", model, "--epochs", "2",
                                       "--num-examples", "200", "--threads", "1", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const json cfg = json::parse(std::ifstream(model + "/config.json"));
  EXPECT_EQ(cfg.value("source_lang", ""), "en");
  EXPECT_EQ(cfg.value("target_lang", ""), "fr");

  ServeProcess s({"--model", model, "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const json langs = http("GET", s.url("/languages")).j();
  ASSERT_EQ(langs.size(), 2u) << langs.dump();
  EXPECT_EQ(langs[0], json({{"code", "en"}, {"name", "English"}, {"targets", {"fr"}}}));
  EXPECT_EQ(langs[1]["code"], "fr");
  const json info = http("GET", s.url("/info")).j();  // the web page's title reads these
  EXPECT_EQ(info["source_lang"], "en");
  EXPECT_EQ(info["target_lang"], "fr");
  // The README's request, byte for byte as curl -d sends it.
  const Reply t = http("POST", s.url("/translate"), R"({"q": "i lost .", "source": "en", "target": "fr"})",
                       {"Content-Type: application/x-www-form-urlencoded"});
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_TRUE(t.j()["translatedText"].is_string()) << t.body;
  expect_lt_error(http("POST", s.url("/translate"), R"({"q": "i lost .", "source": "fr", "target": "en"})"), 400,
                  "this model translates en -> fr");
  EXPECT_EQ(s.terminate(), 0) << s.log();

  // --source-lang / --target-lang are written as given; both or neither.
  r = test::run_tfm_in(tmp.path, {"train", "--data", tmp.path + "/fra.txt", "--out", tmp.path + "/x", "--epochs", "1",
                                  "--num-examples", "50", "--threads", "1", "--no-progress", "--source-lang", "de",
                                  "--target-lang", "fr"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(json::parse(std::ifstream(tmp.path + "/x/config.json")).value("source_lang", ""), "de");
  test::expect_one_line_error(
      test::run_tfm_in(tmp.path, {"train", "--data", tmp.path + "/fra.txt", "--out", tmp.path + "/y", "--epochs", "1",
                                  "--threads", "1", "--source-lang", "en"}),
      "give both source_lang and target_lang");
}

// Item 1: a folder-name guess never overrides the direction config.json names (a fra-eng folder that says en -> fr).
TEST(ServeLibreTranslate, ConfigDirectionBeatsTheFolderName) {
  test::TempFolder tmp;
  const std::string model = d2l_folder(tmp.path + "/fra-eng", "en", "fr", false);
  ServeProcess s({"--model", model, "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const json langs = http("GET", s.url("/languages")).j();
  EXPECT_EQ(langs[0]["code"], "en") << langs.dump();
  EXPECT_EQ(langs[0]["targets"], json::array({"fr"})) << langs.dump();
}

// /detect, source "auto" and /frontend/settings on a server of en -> fr and de -> fr (the de folder's output is
// upper-cased), with an identifier trained by tfm langid; and without one.
TEST(ServeLibreTranslate, DetectAndAutoSource) {
  test::TempFolder tmp;
  const std::string langid = train_langid(tmp.path);
  if (langid.empty()) GTEST_SKIP() << "Multi30k not found (set TFM_DATA_DIR)";
  const std::string de = d2l_folder(tmp.path + "/de-fr", "de", "fr", true);
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--model", de, "--langid", langid, "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  const std::string form = "Content-Type: application/x-www-form-urlencoded";

  // curl -d 'q=...' (a form, as LibreTranslate's docs send it) and curl -d '{"q": ...}'.
  Reply d = http("POST", s.url("/detect"), "q=Ein+Mann+mit+einem+orangefarbenen+Hut+starrt+etwas+an.", {form});
  ASSERT_EQ(d.status, 200) << d.body;
  ASSERT_TRUE(d.j().is_array() && d.j().size() == 2) << d.body;  // the served sources only: de, en
  EXPECT_EQ(d.j()[0]["language"], "de") << d.body;
  EXPECT_GT(d.j()[0]["confidence"].get<double>(), 90.0) << d.body;  // percent, as LibreTranslate
  EXPECT_LE(d.j()[0]["confidence"].get<double>(), 100.0) << d.body;
  d = http("POST", s.url("/detect"), R"({"q": "A man in a blue shirt is standing on a ladder."})", {form});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.j()[0]["language"], "en") << d.body;
  // French is not a source here: a French text is one of the served sources, with a low confidence.
  d = http("POST", s.url("/detect"), R"({"q": "Une femme vêtue d'une robe rose fait du vélo dans la rue."})");
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_LT(d.j()[0]["confidence"].get<double>(), 50.0) << d.body;
  expect_lt_error(http("POST", s.url("/detect"), "{}"), 400, "missing q");

  // source auto: each text's detectedLanguage, and the pair it picks (the de folder answers in upper case).
  std::vector<std::string> preds;
  const std::vector<std::string> src = reference_sources(&preds);
  const std::string german = "Zwei junge Männer stehen draußen neben vielen Büschen und reden.";
  const std::string english = "i lost . he is calm . i am home . we are here now . go .";
  auto translated = [&](const std::string& q, const std::string& source) {
    return http("POST", s.url("/translate"),
                json{{"q", q}, {"source", source}, {"target", "fr"}, {"truncate", true}}.dump())
        .j()["translatedText"];
  };
  Reply t = http("POST", s.url("/translate"),
                 json{{"q", {english, german}}, {"source", "auto"}, {"target", "fr"}, {"truncate", true}}.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  json j = t.j();
  ASSERT_EQ(j["detectedLanguage"].size(), 2u) << t.body;
  EXPECT_EQ(j["detectedLanguage"][0]["language"], "en") << t.body;
  EXPECT_EQ(j["detectedLanguage"][1]["language"], "de") << t.body;
  EXPECT_EQ(j["translatedText"][0], translated(english, "en")) << t.body;
  EXPECT_EQ(j["translatedText"][1], translated(german, "de")) << t.body;
  EXPECT_NE(j["translatedText"][0], j["translatedText"][1]) << t.body;
  // A text of 40 characters or fewer takes the language of the whole request, as LibreTranslate's.
  t = http("POST", s.url("/translate"),
           json{{"q", {src[0], german}}, {"source", "auto"}, {"target", "fr"}, {"truncate", true}}.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.j()["detectedLanguage"][0]["language"], "de") << t.body;
  t = http("POST", s.url("/translate"), json{{"q", german}, {"source", "auto"}, {"target", "fr"}, {"truncate", true}}.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_TRUE(t.j()["detectedLanguage"].is_object()) << t.body;
  EXPECT_EQ(t.j()["detectedLanguage"]["language"], "de") << t.body;
  // Not auto: no detectedLanguage.
  EXPECT_FALSE(http("POST", s.url("/translate"), json{{"q", src[0]}, {"source", "en"}, {"target", "fr"}}.dump())
                   .j()
                   .contains("detectedLanguage"));

  const json fs_ = http("GET", s.url("/frontend/settings")).j();
  EXPECT_EQ(fs_["language"]["source"], json({{"code", "auto"}, {"name", "Auto Detect"}})) << fs_.dump();
  EXPECT_EQ(fs_["language"]["target"], json({{"code", "fr"}, {"name", "French"}})) << fs_.dump();
  EXPECT_EQ(fs_["filesTranslation"], true);
  EXPECT_EQ(fs_["supportedFilesFormat"], json::array({".txt", ".html"}));
  EXPECT_EQ(fs_["keyRequired"], false);
  EXPECT_TRUE(fs_["charLimit"].is_number_integer());
  EXPECT_EQ(s.terminate(), 0) << s.log();

  // Without an identifier, auto needs one where two sources translate into the target.
  ServeProcess plain({"--model", test::fixture("d2l_trained"), "--model", de, "--quiet"});
  ASSERT_TRUE(plain.wait_ready()) << plain.log();
  expect_lt_error(http("POST", plain.url("/translate"), R"({"q": "go .", "source": "auto", "target": "fr"})"), 400,
                  "--langid");
  expect_lt_error(http("POST", plain.url("/detect"), R"({"q": "go ."})"), 400, "--langid");
  EXPECT_EQ(http("GET", plain.url("/frontend/settings")).j()["language"]["source"]["code"], "en");
  EXPECT_EQ(plain.terminate(), 0) << plain.log();

  // An identifier that knows none of the served sources is refused at start.
  test::spit(tmp.path + "/es.txt", "el gato est\u00e1 en la mesa\n");
  test::spit(tmp.path + "/it.txt", "il gatto \u00e8 sul tavolo\n");
  auto r = test::run_tfm_in(tmp.path, {"langid", "train", "--corpus", "es=" + tmp.path + "/es.txt", "--corpus",
                                       "it=" + tmp.path + "/it.txt", "--out", tmp.path + "/esit.json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = test::run_tfm_in(tmp.path, {"serve", "--model", test::fixture("d2l_trained"), "--port", "0", "--threads", "1",
                                  "--langid", tmp.path + "/esit.json"});
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("esit.json tells apart es, it, none of the languages served models translate from (en)"),
            std::string::npos) << r.err;
  test::expect_one_line_error(
      test::run_tfm_in(tmp.path, {"serve", "--model", test::fixture("d2l_trained"), "--port", "0", "--langid",
                                  tmp.path + "/missing.json"}),
      "missing.json: no such file");
}

// One source language: "auto" is it (confidence 100 without an identifier), as /detect says.
TEST(ServeLibreTranslate, OneSourceNeedsNoIdentifier) {
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  std::vector<std::string> preds;
  const std::vector<std::string> src = reference_sources(&preds);
  const Reply t = http("POST", s.url("/translate"), json{{"q", src[1]}, {"source", "auto"}, {"target", "fr"}}.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.j()["translatedText"], preds[1]);
  EXPECT_EQ(t.j()["detectedLanguage"], json({{"confidence", 100.0}, {"language", "en"}})) << t.body;
  EXPECT_EQ(http("POST", s.url("/detect"), R"({"q": "go ."})").j(),
            json::array({{{"confidence", 100.0}, {"language", "en"}}}));
}

// format "html": the markup kept, each text node translated as /translate translates it; bad formats are 400.
TEST(ServeLibreTranslate, HtmlFormat) {
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  std::vector<std::string> preds;
  const std::vector<std::string> src = reference_sources(&preds);
  const std::string doc = "<p class=\"x\">" + src[0] + "</p>\n<ul><li>" + src[1] + "</li></ul><script>var a = \"" +
                          src[0] + "\";</script>";
  const Reply t = http("POST", s.url("/translate"),
                       json{{"q", doc}, {"source", "en"}, {"target", "fr"}, {"format", "html"}}.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  const std::string want = "<p class=\"x\">" + serve::html_escape(preds[0]) + "</p>\n<ul><li>" +
                           serve::html_escape(preds[1]) + "</li></ul><script>var a = \"" + src[0] + "\";</script>";
  EXPECT_EQ(t.j()["translatedText"], want) << t.body;
  // A list of documents, as a form (curl -d 'q=...&format=html').
  const Reply f = http("POST", s.url("/translate"), "q=%3Cb%3E" + std::string("go+.") + "%3C%2Fb%3E&source=en&target=fr&format=html",
                       {"Content-Type: application/x-www-form-urlencoded"});
  ASSERT_EQ(f.status, 200) << f.body;
  EXPECT_EQ(f.j()["translatedText"].get<std::string>().rfind("<b>", 0), 0u) << f.body;
  expect_lt_error(http("POST", s.url("/translate"), R"({"q": "x", "target": "fr", "format": "markdown"})"), 400,
                  "`format` 'markdown' is not supported");
}

// curl -F file=@doc.txt -F source=en -F target=fr /translate_file, then the URL it answers.
std::string multipart(const std::vector<std::tuple<std::string, std::string, std::string>>& parts,
                      const std::string& boundary) {
  std::string b;
  for (const auto& [name, filename, content] : parts) {
    b += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"";
    if (!filename.empty()) b += "; filename=\"" + filename + "\"\r\nContent-Type: text/plain";
    b += "\r\n\r\n" + content + "\r\n";
  }
  return b + "--" + boundary + "--\r\n";
}

TEST(ServeLibreTranslate, TranslateFile) {
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  std::vector<std::string> preds;
  const std::vector<std::string> src = reference_sources(&preds);
  const std::string boundary = "------------------------d74496d66958873e";  // curl's kind of boundary
  const std::string ct = "Content-Type: multipart/form-data; boundary=" + boundary;
  const std::string text = src[0] + "\n\n  " + src[1] + "\n";
  Reply r = http("POST", s.url("/translate_file"),
                 multipart({{"file", "my doc.txt", text}, {"source", "", "en"}, {"target", "", "fr"}}, boundary), {ct});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string url = r.j().value("translatedFileUrl", "");
  const std::string prefix = "http://127.0.0.1:" + std::to_string(s.port()) + "/download_file/";
  ASSERT_EQ(url.rfind(prefix, 0), 0u) << r.body;
  EXPECT_NE(url.find("my_doc.txt"), std::string::npos) << url;
  const Reply got = http("GET", url);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.body, preds[0] + "\n\n  " + preds[1] + "\n");
  EXPECT_EQ(got.header("Content-Disposition"), "attachment; filename=\"my_doc.txt\"");
  // html files keep their markup.
  r = http("POST", s.url("/translate_file"),
           multipart({{"file", "p.html", "<h1>" + src[0] + "</h1>"}, {"source", "", "en"}, {"target", "", "fr"}},
                     boundary),
           {ct});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(http("GET", r.j()["translatedFileUrl"]).body, "<h1>" + serve::html_escape(preds[0]) + "</h1>");
  // Errors, in LibreTranslate's words and shape.
  expect_lt_error(http("POST", s.url("/translate_file"),
                       multipart({{"file", "a.pdf", "x"}, {"source", "", "en"}, {"target", "", "fr"}}, boundary), {ct}),
                  400, "file format not supported");
  expect_lt_error(http("POST", s.url("/translate_file"), multipart({{"file", "a.txt", "x"}, {"target", "", "fr"}}, boundary),
                       {ct}),
                  400, "missing source");
  expect_lt_error(http("POST", s.url("/translate_file"), R"({"source": "en"})"), 400, "missing file");
  expect_lt_error(http("GET", s.url("/download_file/nothing.txt")), 404, "Invalid filename");
  expect_lt_error(http("POST", s.url("/suggest"), "{}"), 403, "Suggestions are disabled");
}

// The npm `libretranslate` client (1.0.1), installed as a user would, pointed at the server: it reads /languages,
// then posts {q, source, target, format, apiKey} to /translate.
TEST(ServeLibreTranslate, NpmClient) {
  if (std::system("command -v npm > /dev/null 2>&1 && command -v node > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "node / npm are not installed";
  const std::string cache = fs::temp_directory_path().string() + "/tfm-npm-libretranslate-1.0.1";
  if (!fs::exists(cache + "/node_modules/libretranslate/package.json")) {
    fs::create_directories(cache);
    const std::string cmd = "cd '" + cache + "' && (test -f package.json || npm init -y > /dev/null) && timeout 180 "
                            "npm install --no-audit --no-fund libretranslate@1.0.1 > npm.log 2>&1";
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "npm could not install libretranslate (offline?)";
  }
  ServeProcess s({"--model", test::fixture("d2l_trained"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  std::vector<std::string> preds;
  const std::vector<std::string> src = reference_sources(&preds);
  test::TempFolder tmp;
  test::spit(tmp.path + "/client.js",
             "const { translate } = require(" + json(cache + "/node_modules/libretranslate").dump() + ");\n"
             "(async () => {\n"
             "  const apiurl = process.argv[2], query = " + json(src[0]).dump() + ";\n"
             "  const a = await translate({ query, source: 'en', target: 'fr', apiurl });\n"
             "  const b = await translate({ query, target: 'fr', apiurl });\n"
             "  console.log(JSON.stringify([a, b]));\n"
             "})().catch(e => { console.error(String(e)); process.exit(1); });\n");
  const std::string out = tmp.path + "/out.json";
  const std::string cmd = "timeout 60 node '" + tmp.path + "/client.js' 'http://127.0.0.1:" + std::to_string(s.port()) +
                          "' > '" + out + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::slurp(out);
  EXPECT_EQ(json::parse(test::slurp(out), nullptr, false), json::array({preds[0], preds[0]})) << test::slurp(out);
}

}  // namespace
}  // namespace tfm
