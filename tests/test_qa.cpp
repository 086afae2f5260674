// Extractive question answering (issue 45 item 1) against the PyTorch reference of transformers' question-answering
// pipeline in scripts/make_qa_fixtures.py (tests/fixtures/qa/expected.json; windows and offsets from Hugging Face
// tokenizers, scripts/make_qa_encodings.js): BertForQuestionAnswering, RobertaForQuestionAnswering and
// DistilBertForQuestionAnswering folders; one window and many (defaults and --max-seq-length / --doc-stride),
// top_k, the null answer, --max-answer-length, accents and emoji (code point offsets); through `tfm qa` (arguments
// and --input JSON lines) and the library (tfm::QuestionAnswerer, the tokenizer's windows).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "serve_client.h"
#include "tfm/classifier.h"
#include "tfm/pipeline.h"

using namespace tfm;
using nlohmann::json;
using test::fixture;

namespace {

const json& expected() {
  static const json j = json::parse(test::slurp(fixture("qa/expected.json")));
  return j;
}
const json& encodings() {
  static const json j = json::parse(test::slurp(fixture("qa/encodings.json")));
  return j;
}

// A pipeline answer (or list) equal to the reference: texts and offsets exactly, scores within 1e-5 + 1e-3 relative.
void expect_answers(const json& got, const json& want, const std::string& where) {
  ASSERT_EQ(got.is_array(), want.is_array()) << where << ": " << got.dump() << "\nwant " << want.dump();
  if (want.is_array()) {
    ASSERT_EQ(got.size(), want.size()) << where << ": " << got.dump() << "\nwant " << want.dump();
    for (size_t i = 0; i < want.size(); ++i) expect_answers(got[i], want[i], where + "[" + std::to_string(i) + "]");
    return;
  }
  EXPECT_EQ(got["answer"], want["answer"]) << where;
  EXPECT_EQ(got["start"], want["start"]) << where;
  EXPECT_EQ(got["end"], want["end"]) << where;
  const double w = want["score"].get<double>();
  EXPECT_NEAR(got["score"].get<double>(), w, 1e-5 + 1e-3 * std::fabs(w)) << where;
}

std::vector<std::string> option_args(const json& o) {
  std::vector<std::string> a;
  if (o.contains("top_k")) a.insert(a.end(), {"--top-k", std::to_string(o["top_k"].get<int>())});
  if (o.contains("max_seq_length")) a.insert(a.end(), {"--max-seq-length", std::to_string(o["max_seq_length"].get<int>())});
  if (o.contains("doc_stride")) a.insert(a.end(), {"--doc-stride", std::to_string(o["doc_stride"].get<int>())});
  if (o.contains("max_answer_length"))
    a.insert(a.end(), {"--max-answer-length", std::to_string(o["max_answer_length"].get<int>())});
  if (o.value("handle_impossible_answer", false)) a.push_back("--handle-impossible-answer");
  return a;
}

QuestionAnsweringOptions options_of(const json& o) {
  QuestionAnsweringOptions q;
  q.top_k = o.value("top_k", 1);
  q.max_seq_length = o.value("max_seq_length", 0);
  q.doc_stride = o.value("doc_stride", 0);
  q.max_answer_length = o.value("max_answer_length", 15);
  q.handle_impossible_answer = o.value("handle_impossible_answer", false);
  return q;
}

json answers_json(const std::vector<QaAnswer>& answers) {
  json list = json::array();
  for (const QaAnswer& a : answers) list.push_back({{"score", a.score}, {"start", a.start}, {"end", a.end}, {"answer", a.answer}});
  return list.size() == 1 ? list[0] : list;
}

const char* kFamilies[] = {"bert", "roberta", "distilbert"};

}  // namespace

TEST(QuestionAnsweringPipeline, CliMatchesTheReference) {
  const json& cases = encodings()["cases"];
  for (const char* fam : kFamilies) {
    const json& rows = expected()["results"][fam];
    ASSERT_EQ(rows.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const json& c = cases[i];
      std::vector<std::string> args = {"qa", "--model", fixture(std::string("qa/") + fam), "--question",
                                       c["question"].get<std::string>(), "--context", c["context"].get<std::string>()};
      for (const std::string& a : option_args(c["options"])) args.push_back(a);
      test::TempFolder t;
      const test::TfmRun r = test::run_tfm_in(t.path, args);
      ASSERT_EQ(r.exit_code, 0) << r.describe();
      const std::vector<json> out = test::json_lines(r.out);
      ASSERT_EQ(out.size(), 1u) << r.out;
      expect_answers(out[0], rows[i]["result"], std::string(fam) + " " + c["name"].get<std::string>());
    }
  }
}

TEST(QuestionAnsweringPipeline, InputLinesGiveOneLineEach) {
  const json& cases = encodings()["cases"];
  test::TempFolder t;
  const std::string in = t.path + "/q.jsonl";
  {
    std::ofstream f(in);
    for (const json& c : cases)
      if (c["options"].empty()) f << json({{"question", c["question"]}, {"context", c["context"]}, {"id", 1}}).dump() << "\n";
    f << "\n";  // blank lines are left out
  }
  const test::TfmRun r = test::run_tfm_in(t.path, {"qa", "--model", fixture("qa/bert"), "--input", in});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::vector<json> out = test::json_lines(r.out);
  size_t k = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!cases[i]["options"].empty()) continue;
    ASSERT_LT(k, out.size());
    expect_answers(out[k], expected()["results"]["bert"][i]["result"], "line " + std::to_string(k + 1));
    ++k;
  }
  EXPECT_EQ(k, out.size());
}

TEST(QuestionAnswerer, LibraryMatchesTheReferenceAndTheTokenizerWindows) {
  const json& cases = encodings()["cases"];
  for (const char* fam : kFamilies) {
    const QuestionAnswerer qa(fixture(std::string("qa/") + fam));
    for (size_t i = 0; i < cases.size(); ++i) {
      const json& c = cases[i];
      const json& want = expected()["results"][fam][i];
      const std::vector<QaAnswer> got =
          qa.answer(c["question"].get<std::string>(), c["context"].get<std::string>(), options_of(c["options"]));
      expect_answers(answers_json(got), want["result"], std::string(fam) + " " + c["name"].get<std::string>());
    }
  }
}

TEST(QuestionAnswerer, BadInputIsRefusedWithItsReason) {
  const QuestionAnswerer qa(fixture("qa/bert"));
  auto message = [&](const std::string& q, const std::string& c, const QuestionAnsweringOptions& o) {
    try {
      qa.answer(q, c, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_NE(message("", "text", {}).find("question cannot be empty"), std::string::npos);
  EXPECT_NE(message("q", "", {}).find("context cannot be empty"), std::string::npos);
  QuestionAnsweringOptions o;
  o.top_k = 0;
  EXPECT_NE(message("q", "c", o).find("top_k must be >= 1"), std::string::npos);
  o = {};
  o.max_seq_length = 16;
  o.doc_stride = 20;
  EXPECT_NE(message("q", "c", o).find("doc_stride (20) is larger than max_seq_length (16)"), std::string::npos);
  o = {};
  o.max_seq_length = 1000;
  EXPECT_NE(message("q", "c", o).find("more than the model takes"), std::string::npos);
  o = {};
  o.max_seq_length = 8;
  EXPECT_NE(message("what is the capital of england and france", "paris", o).find("too long"), std::string::npos);
  // A sequence-classification folder has no question-answering head; a question-answering folder no classifier.
  EXPECT_THROW(QuestionAnswerer(fixture("heads_seqcls")), std::runtime_error);
  test::TempFolder t;
  const test::TfmRun r = test::run_tfm_in(t.path, {"classify", "--model", fixture("qa/bert"), "hello"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("use tfm qa"), std::string::npos) << r.describe();
  const test::TfmRun r2 = test::run_tfm_in(t.path, {"qa", "--model", fixture("qa/bert"), "--question", "q"});
  EXPECT_NE(r2.exit_code, 0);
  EXPECT_NE(r2.err.find("--context"), std::string::npos) << r2.describe();
}

TEST(PipelineCore, QuestionAnsweringMergesLowerCasedAnswersAndRanksTheNullAnswer) {
  // One window: [CLS] q [SEP] "Paris paris" [SEP]; the two context words are the same lower-cased text.
  QaWindow w;
  w.start_logits = {1.0f, 0.0f, 0.0f, 2.0f, 2.0f, 0.0f};
  w.end_logits = {1.0f, 0.0f, 0.0f, 2.0f, 2.0f, 0.0f};
  w.candidate = {1, 0, 0, 1, 1, 0};
  w.sequence_ids = {-1, 0, -1, 1, 1, -1};
  w.words = {-1, 0, -1, 0, 1, -1};
  w.offsets = {{0, 0}, {0, 1}, {0, 0}, {0, 5}, {6, 11}, {0, 0}};
  QuestionAnsweringOptions o;
  o.top_k = 3;
  o.handle_impossible_answer = true;
  const std::vector<QaAnswer> a = question_answering_result("Paris paris", {w}, o);
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), z = e1 + 2 * e2, p = e2 / z;
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].answer, "Paris");  // (3, 3) and (4, 4) merged: "Paris" == "paris".lower()
  EXPECT_NEAR(a[0].score, 2 * p * p, 1e-6);
  EXPECT_EQ(a[1].answer, "Paris paris");
  EXPECT_NEAR(a[1].score, p * p, 1e-6);
  EXPECT_EQ(a[2].answer, "");  // the null answer: [CLS] start * end
  EXPECT_NEAR(a[2].score, (e1 / z) * (e1 / z), 1e-6);
  EXPECT_EQ(a[2].start, 0);
  EXPECT_THROW(question_answering_result("x", {}, o), std::invalid_argument);
}

TEST(QuestionAnsweringServe, HuggingFaceInferenceApiShape) {
  const json& cases = encodings()["cases"];
  const json& rows = expected()["results"]["roberta"];
  test::ServeProcess s({"--model", fixture("qa/roberta"), "--quiet"});
  ASSERT_TRUE(s.wait_ready()) << s.log();
  json batch = json::array(), want = json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    json params = {{"top_k", c["options"].value("top_k", 1)},
                   {"max_answer_len", c["options"].value("max_answer_length", 15)},
                   {"handle_impossible_answer", c["options"].value("handle_impossible_answer", false)}};
    if (c["options"].contains("max_seq_length")) params["max_seq_len"] = c["options"]["max_seq_length"];
    if (c["options"].contains("doc_stride")) params["doc_stride"] = c["options"]["doc_stride"];
    const json input = {{"question", c["question"]}, {"context", c["context"]}};
    test::Reply r = test::http("POST", s.url("/question-answering"), json{{"inputs", input}, {"parameters", params}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    expect_answers(r.j(), rows[i]["result"], "/question-answering " + c["name"].get<std::string>());
    if (c["options"].empty()) batch.push_back(input), want.push_back(rows[i]["result"]);
  }
  test::Reply r = test::http("POST", s.url("/question-answering"), json{{"inputs", batch}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  expect_answers(r.j(), want, "/question-answering list");
  r = test::http("POST", s.url("/question-answering"), json{{"inputs", {{"question", ""}, {"context", "c"}}}}.dump());
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_NE(r.body.find("question"), std::string::npos) << r.body;
  r = test::http("POST", s.url("/question-answering"), json{{"inputs", "just text"}}.dump());
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_NE(test::http("GET", s.url("/openapi.json")).body.find("/question-answering"), std::string::npos);
  // A folder without the head answers 501.
  test::ServeProcess e({"--model", fixture("heads_tokcls"), "--quiet"});
  ASSERT_TRUE(e.wait_ready()) << e.log();
  EXPECT_EQ(test::http("POST", e.url("/question-answering"), json{{"inputs", {{"question", "q"}, {"context", "c"}}}}.dump()).status, 501);
}
