// The task pipelines over encoder heads (issue 45) against the PyTorch references of the Hugging Face pipelines'
// post-processing in scripts/make_task_fixtures.py (tests/fixtures/tasks/expected.json; encodings from Hugging Face
// tokenizers): text classification with top_k, function_to_apply and (text, text_pair) inputs; zero-shot
// classification with NLI heads of both label orders; token classification with every aggregation strategy and
// ignore_labels. Through the pipeline core (tfm/pipeline.h), `tfm classify` and `tfm serve`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
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
  static const json j = json::parse(test::slurp(fixture("tasks/expected.json")));
  return j;
}

// Equal JSON values, numbers within `tol`; `where` names the place in failures.
void expect_near(const json& got, const json& want, double tol, const std::string& where) {
  if (want.is_number()) {
    ASSERT_TRUE(got.is_number()) << where << ": " << got.dump() << " vs " << want.dump();
    EXPECT_NEAR(got.get<double>(), want.get<double>(), tol) << where;
  } else if (want.is_array()) {
    ASSERT_TRUE(got.is_array() && got.size() == want.size()) << where << ": " << got.dump() << "\nwant " << want.dump();
    for (size_t i = 0; i < want.size(); ++i) expect_near(got[i], want[i], tol, where + "[" + std::to_string(i) + "]");
  } else if (want.is_object()) {
    ASSERT_TRUE(got.is_object() && got.size() == want.size()) << where << ": " << got.dump() << "\nwant " << want.dump();
    for (auto it = want.begin(); it != want.end(); ++it) {
      ASSERT_TRUE(got.contains(it.key())) << where << ": no " << it.key() << " in " << got.dump();
      expect_near(got[it.key()], it.value(), tol, where + "." + it.key());
    }
  } else {
    EXPECT_EQ(got, want) << where;
  }
}

std::vector<json> run_lines(const std::vector<std::string>& args) {
  test::TempFolder t;
  test::TfmRun r = test::run_tfm_in(t.path, args);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  return test::json_lines(r.out);
}

// heads_seqcls with problem_type multi_label_classification in config.json, in `dir`.
std::string multi_label_copy(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string m = dir + "/multi_label";
  fs::create_directories(m);
  for (const char* f : {"model.safetensors", "vocab.txt", "tokenizer_config.json"})
    fs::copy_file(fixture(std::string("heads_seqcls/") + f), m + "/" + f);
  json cfg = json::parse(test::slurp(fixture("heads_seqcls/config.json")));
  cfg["problem_type"] = "multi_label_classification";
  std::ofstream(m + "/config.json") << cfg.dump(2);
  return m;
}

}  // namespace

// ------------------------------------------------------------------------------------------ the pipeline core

TEST(PipelineCore, RankLabelsBestFirstCutToTopK) {
  const auto r = rank_labels({"a", "b", "c"}, {0.2f, 0.5f, 0.2f}, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].label, "b");
  EXPECT_EQ(r[1].label, "a");  // ties keep the label order
  EXPECT_EQ(rank_labels({"a", "b"}, {1, 2}, 0).size(), 2u);
  EXPECT_EQ(rank_labels({"a", "b"}, {1, 2}, 9).size(), 2u);
  EXPECT_THROW(rank_labels({"a"}, {1, 2}), std::invalid_argument);
  EXPECT_THROW(rank_labels({"a"}, {1}, -1), std::invalid_argument);
}

TEST(PipelineCore, CandidateLabelsAndHypotheses) {
  EXPECT_EQ(split_candidate_labels(" dog, football ,london,"),
            (std::vector<std::string>{"dog", "football", "london"}));
  EXPECT_THROW(split_candidate_labels(" , "), std::invalid_argument);
  EXPECT_EQ(format_hypothesis("This example is {}.", "sports"), "This example is sports.");
  try {
    format_hypothesis("no placeholder", "x");
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("has no {}"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entailment_id({"CONTRADICTION", "NEUTRAL", "ENTAILMENT"}), 2);
  EXPECT_EQ(entailment_id({"entailment", "neutral", "contradiction"}), 0);
  EXPECT_EQ(entailment_id({"LABEL_0", "LABEL_1"}), -1);
  EXPECT_THROW(parse_aggregation_strategy("mean"), std::invalid_argument);
}

TEST(PipelineCore, ZeroShotScoresAsThePipeline) {
  // Two labels of a 3-way NLI head (contradiction, neutral, entailment).
  const std::vector<float> logits = {0.0f, 0.0f, 1.0f, 1.0f, 0.0f, 0.0f};
  ZeroShotResult r = zero_shot_result("s", {"x", "y"}, logits.data(), 3, 2, false);
  EXPECT_EQ(r.labels, (std::vector<std::string>{"x", "y"}));
  EXPECT_NEAR(r.scores[0], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-6);
  r = zero_shot_result("s", {"x", "y"}, logits.data(), 3, 2, true);  // entailment against contradiction per label
  EXPECT_NEAR(r.scores[0], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-6);
  EXPECT_NEAR(r.scores[1], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  // No entailment label: the last one, contradiction label 0 (Python's index -1).
  r = zero_shot_result("s", {"x"}, logits.data(), 3, -1, false);
  EXPECT_NEAR(r.scores[0], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-6);
}

// ------------------------------------------------------------------------------------------ text classification

TEST(TextClassificationPipeline, TopKFunctionsAndPairsMatchTheReference) {
  const json& c = expected()["classify"];
  const std::string m = fixture("heads_seqcls");
  for (const char* key : {"texts", "pairs"}) {
    std::vector<std::string> base = {"classify", "--model", m};
    for (const json& row : c[key]) {
      base.push_back(row["text"].get<std::string>());
      if (row.contains("text_pair")) base.insert(base.end(), {"--pair", row["text_pair"].get<std::string>()});
    }
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = base;
      a.insert(a.end(), extra.begin(), extra.end());
      return run_lines(a);
    };
    const std::vector<json> dflt = with({}), top2 = with({"--top-k", "2"}), top1 = with({"--top-k", "1"}),
                            all = with({"--top-k", "all"}), all_scores = with({"--all-scores"}),
                            sig = with({"--top-k", "all", "--function-to-apply", "sigmoid"}),
                            none = with({"--top-k", "all", "--function-to-apply", "none"});
    ASSERT_EQ(dflt.size(), c[key].size());
    for (size_t i = 0; i < c[key].size(); ++i) {
      const json& row = c[key][i];
      const std::string w = std::string(key) + " " + std::to_string(i);
      expect_near(dflt[i], row["default"], 1e-4, w + " default");
      expect_near(top2[i], row["top_k_2"], 1e-4, w + " top_k 2");
      expect_near(top1[i], row["top_k_1"], 1e-4, w + " top_k 1");
      expect_near(all[i], row["softmax_all"], 1e-4, w + " top_k all");
      expect_near(all_scores[i], row["softmax_all"], 1e-4, w + " --all-scores");
      expect_near(sig[i], row["sigmoid_all"], 1e-4, w + " sigmoid");
      expect_near(none[i], row["none_all"], 1e-4, w + " none");
    }
  }
}

TEST(TextClassificationPipeline, MultiLabelProblemsDefaultToSigmoid) {
  test::ScratchDir t;  // not a TempFolder: run_lines makes (and removes) that one
  const std::string m = multi_label_copy(t.path);
  const json& rows = expected()["classify"]["texts"];
  std::vector<std::string> args = {"classify", "--model", m};
  for (const json& row : rows) args.push_back(row["text"].get<std::string>());
  const std::vector<json> got = run_lines(args);
  ASSERT_EQ(got.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) expect_near(got[i], rows[i]["multi_label_default"], 1e-4, std::to_string(i));
}

TEST(TextClassificationPipeline, LibraryPairsEqualTheCli) {
  const json& rows = expected()["classify"]["pairs"];
  const Classifier c(fixture("heads_seqcls"));
  ClassifyOptions o;
  std::vector<std::string> texts;
  for (const json& row : rows) texts.push_back(row["text"].get<std::string>()), o.text_pairs.push_back(row["text_pair"].get<std::string>());
  const FloatArray lg = c.logits(texts, o);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(lg.data()[i * 3 + k], rows[i]["logits"][k].get<double>(), 1e-4);
  o.text_pairs.pop_back();
  EXPECT_THROW(c.logits(texts, o), std::invalid_argument);
}

TEST(TextClassificationPipeline, CliErrors) {
  test::TempFolder t;
  const std::string m = fixture("heads_seqcls");
  test::expect_error(test::run_tfm_in(t.path, {"classify", "--model", m, "a", "b", "--pair", "x"}), "--pair: give one per TEXT");
  test::expect_error(test::run_tfm_in(t.path, {"classify", "--model", m, "a", "--top-k", "0"}), "--top-k");
  test::expect_error(test::run_tfm_in(t.path, {"classify", "--model", m, "a", "--top-k", "two"}), "--top-k");
  test::expect_error(test::run_tfm_in(t.path, {"classify", "--model", m, "a", "--aggregation-strategy", "simple"}),
                     "is for token classification");
  test::expect_error(test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_tokcls"), "a", "--top-k", "2"}),
                     "is for sequence classification");
}

// ------------------------------------------------------------------------------------------ zero-shot

TEST(ZeroShotPipeline, BothLabelOrdersMatchTheReference) {
  const json& z = expected()["zero_shot"];
  for (const char* folder : {"nli_contradiction_first", "nli_entailment_first"}) {
    const std::string m = fixture(std::string("tasks/") + folder);
    size_t checked = 0;
    for (const json& want : z["results"][folder]) {
      const bool single = want.value("single", false);
      std::vector<std::string> args = {"classify", "--model", m, "--candidate-labels",
                                       single ? z["single_label"].get<std::string>()
                                              : z["candidate_labels"].get<std::string>(),
                                       "--hypothesis-template", want["template"].get<std::string>(),
                                       want["result"]["sequence"].get<std::string>()};
      if (want["multi_label"].get<bool>()) args.push_back("--multi-label");
      const std::vector<json> got = run_lines(args);
      ASSERT_EQ(got.size(), 1u);
      expect_near(got[0], want["result"], 1e-5, std::string(folder) + " " + want.dump());
      ++checked;
    }
    EXPECT_EQ(checked, 12u);
  }
}

TEST(ZeroShotPipeline, DefaultTemplateSeveralSequencesAndTheLibrary) {
  const json& z = expected()["zero_shot"];
  const std::string m = fixture("tasks/nli_entailment_first");
  std::vector<std::string> args = {"classify", "--model", m, "--candidate-labels",
                                   z["candidate_labels"].get<std::string>()};
  for (const json& s : z["sequences"]) args.push_back(s.get<std::string>());
  const std::vector<json> got = run_lines(args);
  std::vector<json> want;
  for (const json& r : z["results"]["nli_entailment_first"])
    if (r["template"] == "This example is {}." && !r["multi_label"].get<bool>() && !r.value("single", false))
      want.push_back(r["result"]);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) expect_near(got[i], want[i], 1e-5, "sequence " + std::to_string(i));
  const Classifier c(m);
  EXPECT_EQ(c.entailment_id(), 0);
  const auto r = c.zero_shot({z["sequences"][0].get<std::string>()}, {"dog", "football", "london"});
  ASSERT_EQ(r.size(), 1u);
  expect_near(json{{"sequence", r[0].sequence}, {"labels", r[0].labels}, {"scores", r[0].scores}}, want[0], 1e-5,
              "library");
  test::TempFolder t;
  test::expect_error(test::run_tfm_in(t.path, {"classify", "--model", m, "--candidate-labels", "a,b",
                                               "--hypothesis-template", "no slot", "x"}),
                     "has no {}");
  test::expect_error(test::run_tfm_in(t.path, {"classify", "--model", m, "--candidate-labels", " , ", "x"}),
                     "no candidate labels");
}

// ------------------------------------------------------------------------------------------ token classification

TEST(TokenClassificationPipeline, EveryAggregationStrategyMatchesTheReference) {
  const json& n = expected()["ner"];
  for (const char* strategy : {"none", "simple", "first", "average", "max"}) {
    std::vector<std::string> args = {"classify", "--model", fixture("heads_tokcls"), "--aggregation-strategy", strategy};
    for (const json& t : n["texts"]) args.push_back(t.get<std::string>());
    const std::vector<json> got = run_lines(args);
    ASSERT_EQ(got.size(), n["texts"].size());
    for (size_t i = 0; i < got.size(); ++i)
      expect_near(got[i], n["results"][strategy][i], 1e-4, std::string(strategy) + " text " + std::to_string(i));
  }
  // [UNK] pieces print the text they stand for; a text without entities prints [].
  EXPECT_NE(n["results"]["simple"][1].dump().find("Zürich"), std::string::npos);
  EXPECT_EQ(n["results"]["simple"].back(), json::array());
}

TEST(TokenClassificationPipeline, IgnoreLabels) {
  const json& n = expected()["ner"];
  for (const auto& [key, flag] : {std::pair<std::string, std::string>{"none_ignored", "--all-tokens"}, {"o_per", ""}}) {
    const json& want = n["ignore_labels"][key];
    std::vector<std::string> args = {"classify", "--model", fixture("heads_tokcls"), "--aggregation-strategy", "simple"};
    if (!flag.empty()) args.push_back(flag);
    else args.insert(args.end(), {"--ignore-labels", "O,PER"});
    for (const json& t : n["texts"]) args.push_back(t.get<std::string>());
    const std::vector<json> got = run_lines(args);
    ASSERT_EQ(got.size(), want["simple"].size());
    for (size_t i = 0; i < got.size(); ++i) expect_near(got[i], want["simple"][i], 1e-4, key + " " + std::to_string(i));
  }
}

// ------------------------------------------------------------------------------------------ tfm serve

TEST(TaskPipelinesServe, ZeroShotTokenClassificationAndFillMask) {
  const json& z = expected()["zero_shot"];
  {
    test::ServeProcess s({"--model", fixture("tasks/nli_contradiction_first"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    json want;
    for (const json& r : z["results"]["nli_contradiction_first"])
      if (r["template"] == "The topic is {}!" && r["multi_label"].get<bool>()) want = r["result"];
    const json body = {{"inputs", want["sequence"]},
                       {"parameters", {{"candidate_labels", z["labels"]}, {"multi_label", true},
                                       {"hypothesis_template", "The topic is {}!"}}}};
    for (const char* path : {"/zero-shot-classification", "/predict", "/"}) {
      test::Reply r = test::http("POST", s.url(path), body.dump());
      ASSERT_EQ(r.status, 200) << path << " " << r.body;
      expect_near(r.j(), want, 1e-5, path);
    }
    test::Reply r = test::http("POST", s.url("/zero-shot-classification"),
                               json{{"inputs", {"a"}}, {"parameters", {{"candidate_labels", "x, y"},
                                                                       {"hypothesis_template", "none"}}}}.dump());
    EXPECT_EQ(r.status, 422) << r.body;
    EXPECT_NE(r.body.find("hypothesis_template"), std::string::npos) << r.body;
    EXPECT_NE(test::http("GET", s.url("/openapi.json")).body.find("/zero-shot-classification"), std::string::npos);
  }
  {
    const json& n = expected()["ner"];
    test::ServeProcess s({"--model", fixture("heads_tokcls"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    test::Reply r = test::http("POST", s.url("/predict"),
                               json{{"inputs", n["texts"]}, {"parameters", {{"aggregation_strategy", "average"}}}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    expect_near(r.j(), n["results"]["average"], 1e-4, "/predict average");
    r = test::http("POST", s.url("/predict"), json{{"inputs", n["texts"][0]}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    expect_near(r.j(), n["results"]["none"][0], 1e-4, "/predict none");
  }
  {
    const json mlm = json::parse(test::slurp(fixture("heads_mlm/expected.json")));
    test::ServeProcess s({"--model", fixture("heads_mlm"), "--quiet"});
    ASSERT_TRUE(s.wait_ready()) << s.log();
    test::Reply r = test::http("POST", s.url("/predict"), json{{"inputs", mlm["texts"][0]}, {"parameters", {{"top_k", 5}}}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    expect_near(r.j(), mlm["results"][0], 1e-4, "/predict fill-mask");
    r = test::http("POST", s.url("/predict"), json{{"inputs", "no mask here"}}.dump());
    EXPECT_EQ(r.status, 422) << r.body;
  }
}
