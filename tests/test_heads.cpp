// Golden tests of the BERT task heads against PyTorch (fixtures from scripts/make_embed_fixtures.py:
// tests/fixtures/heads_*), and of `tfm classify`, `tfm fill-mask`, `tfm rerank` against the pipeline outputs the
// fixture script computed: the printed orderings for inputs in another order than the fixture's, for every --top-k
// (rerank sorts passages by score, best first; fill-mask lists the K most probable tokens, best first, ties lower id
// first as torch.topk); the token offsets /tokenize returns against Hugging Face tokenizers'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "io/safetensors.h"
#include "models/heads.h"
#include "run_tfm.h"
#include "test_util.h"
#include "text/bert_tokenizer.h"
#include "tfm/tfm.h"

using namespace tfm;
using tfm::test::data_dir;
using tfm::test::fixture;
using tfm::test::run_tfm_in;
using tfm::test::slurp;
using tfm::test::TfmRun;

namespace {

std::vector<std::string> json_strings(const nlohmann::json& j) {
  std::vector<std::string> v;
  for (auto& x : j) v.push_back(x.get<std::string>());
  return v;
}

BatchTensors encode(const TaskModel& m, const std::vector<std::string>& texts,
                    const std::vector<std::string>* pairs = nullptr) {
  std::vector<Encoding> enc;
  for (size_t i = 0; i < texts.size(); ++i) enc.push_back(m.tokenizer().encode(texts[i], pairs ? &(*pairs)[i] : nullptr));
  return make_batch(enc, m.tokenizer().pad_id());
}

void expect_same_ids(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_EQ(got.i64()[i], want.i64()[i]) << i;
}

// JSON values equal, numbers within tol (scores), everything else exactly.
void expect_json_near(const nlohmann::json& got, const nlohmann::json& want, double tol, const std::string& at = "") {
  if (want.is_number_float()) {
    ASSERT_TRUE(got.is_number()) << at << ": " << got.dump();
    EXPECT_NEAR(got.get<double>(), want.get<double>(), tol) << at;
  } else if (want.is_array()) {
    ASSERT_TRUE(got.is_array()) << at << ": " << got.dump();
    ASSERT_EQ(got.size(), want.size()) << at << ": " << got.dump() << " vs " << want.dump();
    for (size_t i = 0; i < want.size(); ++i) expect_json_near(got[i], want[i], tol, at + "[" + std::to_string(i) + "]");
  } else if (want.is_object()) {
    ASSERT_TRUE(got.is_object()) << at;
    EXPECT_EQ(got.size(), want.size()) << at << ": " << got.dump();
    for (auto& [k, v] : want.items()) {
      ASSERT_TRUE(got.contains(k)) << at << ": no key " << k << " in " << got.dump();
      expect_json_near(got[k], v, tol, at + "." + k);
    }
  } else {
    EXPECT_EQ(got, want) << at;
  }
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

nlohmann::json one_json_line(const test::TfmRun& r) {
  std::stringstream ss(r.out);
  std::string line;
  std::getline(ss, line);
  return nlohmann::json::parse(line);
}

}  // namespace

TEST(Heads, SequenceClassificationMatchesPyTorch) {
  TaskModel m = TaskModel::load(fixture("heads_seqcls"), HeadKind::SequenceClassification);
  EXPECT_EQ(m.head_config().id2label, (std::vector<std::string>{"negative", "neutral", "positive"}));
  EXPECT_EQ(m.head_config().default_score_function(), ScoreFunction::Softmax);
  auto e = SafeTensors::open(fixture("heads_seqcls/expected.safetensors"));
  std::stringstream ss(test::slurp(fixture("st_mean/sentences.txt")));
  std::vector<std::string> s;
  for (std::string line; std::getline(ss, line);) s.push_back(line);
  BatchTensors bt = encode(m, s);
  expect_same_ids(bt.input_ids, e.get("input_ids"));
  Tensor logits = m.sequence_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask);
  Tensor want = e.get("logits");
  ASSERT_EQ(logits.shape(), want.shape());
  EXPECT_TRUE(test::all_close(logits.f32(), want.f32(), logits.numel(), 1e-4f));
}

TEST(Heads, TokenClassificationWithoutPoolerMatchesPyTorch) {
  TaskModel m = TaskModel::load(fixture("heads_tokcls"), HeadKind::TokenClassification);
  auto j = nlohmann::json::parse(test::slurp(fixture("heads_tokcls/expected.json")));
  auto e = SafeTensors::open(fixture("heads_tokcls/expected.safetensors"));
  BatchTensors bt = encode(m, json_strings(j["texts"]));
  expect_same_ids(bt.input_ids, e.get("input_ids"));
  Tensor logits = m.token_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask);
  Tensor want = e.get("logits");
  ASSERT_EQ(logits.shape(), want.shape());
  // padded positions are compared too: the classifier runs on every position, as in PyTorch
  EXPECT_TRUE(test::all_close(logits.f32(), want.f32(), logits.numel(), 1e-4f));
}

TEST(Heads, MaskedLmTiedAndStoredDecoderMatchPyTorch) {
  auto j = nlohmann::json::parse(test::slurp(fixture("heads_mlm/expected.json")));
  auto e = SafeTensors::open(fixture("heads_mlm/expected.safetensors"));
  test::TempFolder t;
  test::link_folder(fixture("heads_mlm"), t.path + "/untied", {{"model.safetensors", fixture("heads_mlm/model_untied.safetensors")}});
  for (const bool tied : {true, false}) {
    TaskModel m = TaskModel::load(tied ? fixture("heads_mlm") : t.path + "/untied", HeadKind::MaskedLM);
    EXPECT_EQ(m.tied_decoder(), tied);
    BatchTensors bt = encode(m, json_strings(j["texts"]));
    expect_same_ids(bt.input_ids, e.get("input_ids"));
    const int64_t B = bt.input_ids.size(0), L = bt.input_ids.size(1);
    std::vector<std::pair<int64_t, int64_t>> pos;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t l = 0; l < L; ++l)
        if (bt.attention_mask.i64()[b * L + l]) pos.push_back({b, l});
    Tensor logits = m.mlm_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask, pos);
    Tensor want = e.get(tied ? "logits" : "logits_untied");
    const int64_t V = want.size(2);
    ASSERT_EQ(logits.shape(), (Shape{(int64_t)pos.size(), V}));
    for (size_t p = 0; p < pos.size(); ++p)
      EXPECT_TRUE(test::all_close(logits.f32() + p * V, want.f32() + (pos[p].first * L + pos[p].second) * V, V, 1e-4f))
          << "tied " << tied << " position " << p;
  }
}

TEST(Heads, CrossEncoderPairsMatchPyTorch) {
  TaskModel m = TaskModel::load(fixture("heads_cross"), HeadKind::SequenceClassification);
  EXPECT_EQ(m.head_config().default_score_function(), ScoreFunction::Sigmoid);
  auto j = nlohmann::json::parse(test::slurp(fixture("heads_cross/expected.json")));
  auto e = SafeTensors::open(fixture("heads_cross/expected.safetensors"));
  std::vector<std::string> passages = json_strings(j["passages"]);
  std::vector<std::string> queries(passages.size(), j["query"].get<std::string>());
  BatchTensors bt = encode(m, queries, &passages);
  expect_same_ids(bt.input_ids, e.get("input_ids"));
  expect_same_ids(bt.token_type_ids, e.get("token_type_ids"));
  Tensor logits = m.sequence_logits(bt.input_ids, bt.token_type_ids, bt.attention_mask);
  EXPECT_TRUE(test::all_close(logits.f32(), e.get("logits").f32(), passages.size(), 1e-4f));
}

TEST(Heads, WrongHeadIsAClearError) {
  try {
    TaskModel::load(fixture("heads_mlm"), HeadKind::SequenceClassification);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& ex) {
    EXPECT_NE(std::string(ex.what()).find("BertForMaskedLM checkpoint: it has no sequence classification head"),
              std::string::npos)
        << ex.what();
  }
  EXPECT_THROW(TaskModel::load(fixture("st_mean"), HeadKind::MaskedLM), std::runtime_error);  // a BertModel
}

// tokenizer.decode(..., skip_special_tokens=True) with clean_up_tokenization_spaces, as transformers does it.
TEST(Heads, DecodeJoinsPiecesAndCleansSpaces) {
  TaskModel m = TaskModel::load(fixture("heads_mlm"), HeadKind::MaskedLM);
  EXPECT_EQ(decode_wordpieces(m.tokenizer(), {"[CLS]", "the", "cat", "'", "s", "x", "##yl", "!", "[SEP]", "[PAD]"}, true),
            "the cat's xyl!");
  EXPECT_EQ(decode_wordpieces(m.tokenizer(), {"the", "cat", "."}, false), "the cat .");
}

// ------------------------------------------------------------------------------------------------ CLI

TEST(HeadsCli, ClassifyPrintsPipelineShapes) {
  test::TempFolder t;
  auto e = SafeTensors::open(fixture("heads_seqcls/expected.safetensors"));
  Tensor sc = e.get("scores");
  const std::vector<std::string> labels = {"negative", "neutral", "positive"};
  test::TfmRun r = test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "--input",
                                             fixture("st_mean/sentences.txt"), "--batch-size", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 8u);
  for (size_t b = 0; b < 8; ++b) {
    const float* row = sc.f32() + b * 3;
    int64_t k = std::max_element(row, row + 3) - row;
    expect_json_near(lines[b], nlohmann::json{{"label", labels[k]}, {"score", (double)row[k]}}, 1e-4);
    EXPECT_EQ(lines[b].begin().key(), "label");
  }
  r = test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "--all-scores", "hello"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto all = json_lines(r.out);
  ASSERT_EQ(all.size(), 1u);
  const float* row = sc.f32() + 3 * 3;  // "hello" is sentence 4
  ASSERT_EQ(all[0].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    int64_t k = std::find(labels.begin(), labels.end(), all[0][i]["label"].get<std::string>()) - labels.begin();
    ASSERT_LT(k, 3);
    EXPECT_NEAR(all[0][i]["score"].get<double>(), row[k], 1e-4);
    if (i) { EXPECT_GE(all[0][i - 1]["score"].get<double>(), all[0][i]["score"].get<double>()); }
  }
}

TEST(HeadsCli, TokenClassificationEntitiesWithOffsets) {
  test::TempFolder t;
  auto j = nlohmann::json::parse(test::slurp(fixture("heads_tokcls/expected.json")));
  std::vector<std::string> args = {"classify", "--model", fixture("heads_tokcls")};
  for (auto& s : j["texts"]) args.push_back(s.get<std::string>());
  test::TfmRun r = test::run_tfm_in(t.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), j["entities"].size());
  for (size_t b = 0; b < lines.size(); ++b) expect_json_near(lines[b], j["entities"][b], 1e-4, "input " + std::to_string(b));
}

TEST(HeadsCli, FillMaskTopKWithSequences) {
  test::TempFolder t;
  auto j = nlohmann::json::parse(test::slurp(fixture("heads_mlm/expected.json")));
  std::vector<std::string> args = {"fill-mask", "--model", fixture("heads_mlm"), "--top-k", "5"};
  for (auto& s : j["texts"]) args.push_back(s.get<std::string>());
  test::TfmRun r = test::run_tfm_in(t.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), j["results"].size());
  for (size_t b = 0; b < lines.size(); ++b) expect_json_near(lines[b], j["results"][b], 1e-4, "input " + std::to_string(b));
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"fill-mask", "--model", fixture("heads_mlm"), "the cat sat"}), "input 1 has no [MASK]");
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"fill-mask", "--model", fixture("heads_seqcls"), "the [MASK] sat"}),
      "has no masked language modelling");
}

TEST(HeadsCli, RerankSortsPassagesByScore) {
  test::TempFolder t;
  auto j = nlohmann::json::parse(test::slurp(fixture("heads_cross/expected.json")));
  std::string file;
  for (auto& p : j["passages"]) file += p.get<std::string>() + "\n";
  test::spit(t.path + "/p.txt", file);
  test::TfmRun r = test::run_tfm_in(t.path, {"rerank", "--model", fixture("heads_cross"), "--query",
                                             j["query"].get<std::string>(), "--input", t.path + "/p.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  expect_json_near(lines[0], j["ranking"], 1e-4);
  // raw scores are the logits
  auto e = SafeTensors::open(fixture("heads_cross/expected.safetensors"));
  r = test::run_tfm_in(t.path, {"rerank", "--model", fixture("heads_cross"), "--query", j["query"].get<std::string>(),
                                "--raw-scores", "--top-k", "1", "-i", t.path + "/p.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  auto raw = json_lines(r.out)[0];
  ASSERT_EQ(raw.size(), 1u);
  const int64_t best = j["ranking"][0]["index"].get<int64_t>();
  EXPECT_EQ(raw[0]["index"].get<int64_t>(), best);
  EXPECT_NEAR(raw[0]["score"].get<double>(), e.get("logits").f32()[best], 1e-4);
  test::expect_one_line_error(
      test::run_tfm_in(t.path, {"rerank", "--model", fixture("heads_tokcls"), "--query", "x", "y"}),
      "has no sequence classification head");
}

TEST(HeadsCli, ClassifyErrors) {
  test::TempFolder t;
  test::expect_one_line_error(test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_mlm"), "hi"}),
                              "no classification head");
  test::expect_one_line_error(test::run_tfm_in(t.path, {"classify", "--model", fixture("st_mean"), "hi"}),
                              "has no task head");
  test::expect_one_line_error(test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "hi", " "}),
                              "argument 2 is empty");
  test::TfmRun r = test::run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "hi", "--dtype", "fp32",
                                             "--threads", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
}

// The fixture's passages reversed and one repeated: the printed order must follow PyTorch's score of each
// passage (not the input order, not ascending), indices must be positions in this input, and --top-k K must be
// the first K of the full ranking.
TEST(Rerank, OrderFollowsPyTorchScoresWhateverTheInputOrder) {
  test::TempFolder t;
  auto j = nlohmann::json::parse(test::slurp(fixture("heads_cross/expected.json")));
  std::map<std::string, double> score_of;  // PyTorch's sigmoid score of each passage
  for (const auto& r : j["ranking"]) score_of[j["passages"][r["index"].get<size_t>()]] = r["score"].get<double>();
  std::vector<std::string> passages;
  for (auto it = j["passages"].rbegin(); it != j["passages"].rend(); ++it) passages.push_back(*it);
  passages.push_back(j["passages"][1]);
  std::vector<std::string> args = {"rerank", "--model", fixture("heads_cross"), "--query", j["query"]};
  args.insert(args.end(), passages.begin(), passages.end());
  test::TfmRun r = test::run_tfm_in(t.path, args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const nlohmann::json full = one_json_line(r);
  ASSERT_EQ(full.size(), passages.size()) << r.out;
  std::vector<int64_t> seen;
  for (size_t k = 0; k < full.size(); ++k) {
    const int64_t i = full[k]["index"];
    ASSERT_GE(i, 0);
    ASSERT_LT(i, (int64_t)passages.size());
    seen.push_back(i);
    EXPECT_NEAR(full[k]["score"].get<double>(), score_of[passages[i]], 1e-4) << "rank " << k << ": " << passages[i];
    if (k) {
      EXPECT_GE(full[k - 1]["score"].get<double>(), full[k]["score"].get<double>()) << "rank " << k;
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(passages.size());
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
  // The best passage by PyTorch's scores is first.
  const auto best = std::max_element(score_of.begin(), score_of.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  EXPECT_EQ(passages[full[0]["index"].get<size_t>()], best->first);
  for (int k : {1, 2, 4}) {
    args.insert(args.begin() + 1, {"--top-k", std::to_string(k)});
    test::TfmRun rk = test::run_tfm_in(t.path, args);
    args.erase(args.begin() + 1, args.begin() + 3);
    ASSERT_EQ(rk.exit_code, 0) << rk.describe();
    const nlohmann::json top = one_json_line(rk);
    ASSERT_EQ(top.size(), (size_t)k) << rk.out;
    for (int q = 0; q < k; ++q) EXPECT_EQ(top[q]["index"], full[q]["index"]) << "top-k " << k << " rank " << q;
  }
}

// --top-k K for K = 1, 3 and more than the vocabulary: the candidates are PyTorch's K most probable tokens at the
// mask (softmax of the fixture's logits), best first, each with its probability; K beyond the vocabulary gives
// every token once.
TEST(FillMask, TopKAreTheMostProbableTokensBestFirst) {
  test::TempFolder t;
  auto j = nlohmann::json::parse(test::slurp(fixture("heads_mlm/expected.json")));
  auto e = SafeTensors::open(fixture("heads_mlm/expected.safetensors"));
  const Tensor logits = e.get("logits"), ids = e.get("input_ids");
  const int64_t L = logits.size(1), V = logits.size(2);
  const int64_t mask_id = j["results"][0][0]["token"].get<int64_t>() == 4 ? 4 : -1;  // [MASK] (id 4) ranks first here
  ASSERT_EQ(mask_id, 4);
  for (size_t b = 0; b < j["texts"].size(); ++b) {
    // PyTorch's distribution at this text's mask.
    int64_t pos = -1;
    for (int64_t l = 0; l < L; ++l)
      if (ids.i64()[b * L + l] == mask_id) pos = l;
    ASSERT_GE(pos, 0);
    const float* lg = logits.f32() + (b * L + pos) * V;
    std::vector<double> p(V);
    const double mx = *std::max_element(lg, lg + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += p[v] = std::exp((double)lg[v] - mx);
    for (double& x : p) x /= sum;
    std::vector<int64_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return p[a] > p[c]; });
    for (int64_t k : {int64_t{1}, int64_t{3}, V + 20}) {
      SCOPED_TRACE("text " + std::to_string(b) + " top-k " + std::to_string(k));
      test::TfmRun r = test::run_tfm_in(t.path, {"fill-mask", "--model", fixture("heads_mlm"), "--top-k",
                                                 std::to_string(k), j["texts"][b].get<std::string>()});
      ASSERT_EQ(r.exit_code, 0) << r.describe();
      const nlohmann::json cands = one_json_line(r);
      ASSERT_EQ((int64_t)cands.size(), std::min(k, V)) << r.out;
      std::vector<int64_t> tokens;
      for (size_t q = 0; q < cands.size(); ++q) {
        const int64_t id = cands[q]["token"].get<int64_t>();
        ASSERT_GE(id, 0);
        ASSERT_LT(id, V);
        tokens.push_back(id);
        // The token at rank q has the q-th largest PyTorch probability (equal to 1e-5: near ties may swap).
        EXPECT_NEAR(p[id], p[order[q]], 1e-5) << "rank " << q << " token " << id << ", expected " << order[q];
        EXPECT_NEAR(cands[q]["score"].get<double>(), p[id], 1e-5) << "rank " << q;
      }
      std::sort(tokens.begin(), tokens.end());
      EXPECT_EQ(std::unique(tokens.begin(), tokens.end()), tokens.end()) << "a token listed twice";
    }
  }
}

// The fill-mask pipeline returns one list per [MASK]; with several masks it decodes `sequence` with
// skip_special_tokens=False, so each sequence keeps the other masks (and [CLS] / [SEP]). tfm dropped them:
// "edmonton is the of france."
TEST(FillMask, SeveralMasksGiveOneListPerMaskKeepingTheOtherMasks) {
  tfm::test::TempFolder t;
  TfmRun r = run_tfm_in(t.path, {"fill-mask", "--model", fixture("heads_mlm"), "--top-k", "3",
                                 "paris is the [MASK] of [MASK].", "the cat sat on the [MASK]."});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<nlohmann::json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u);
  ASSERT_TRUE(lines[0].is_array() && lines[0].size() == 2) << lines[0].dump();
  for (size_t m = 0; m < 2; ++m) {
    ASSERT_EQ(lines[0][m].size(), 3u);
    for (const auto& c : lines[0][m]) {
      const std::string tok = c["token_str"].get<std::string>();
      if (tok.find_first_of(".,?!'") != std::string::npos) continue;  // clean_up_tokenization would move it
      // WordPiece decoding: a "##" piece joins the word before it.
      const std::string word = tok.rfind("##", 0) == 0 ? tok.substr(2) : " " + tok;
      const std::string want = m == 0 ? "[CLS] paris is the" + word + " of [MASK]. [SEP]"
                                      : "[CLS] paris is the [MASK] of" + word + ". [SEP]";
      EXPECT_EQ(c["sequence"].get<std::string>(), want);
    }
  }
  // One mask: a flat list, special tokens skipped.
  ASSERT_TRUE(lines[1].is_array() && lines[1].size() == 3 && lines[1][0].is_object()) << lines[1].dump();
  for (const auto& c : lines[1]) {
    const std::string tok = c["token_str"].get<std::string>();
    if (tok != "[MASK]" && tok != "[UNK]" && tok != "[CLS]" && tok != "[SEP]" && tok != "[PAD]") {
      EXPECT_EQ(c["sequence"].get<std::string>(), "the cat sat on the " + tok + ".");
    }
  }
}

// tfm::MaskFiller::fill answered an input without a mask token with no candidates (Python: [[]]) where the CLI
// refuses it; it throws now, as the fill-mask pipeline raises, naming the input.
TEST(FillMask, AnInputWithoutAMaskIsRefusedByTheLibrary) {
  const tfm::MaskFiller m(fixture("heads_mlm"), tfm::ClassifierOptions{1, ""});
  const tfm::TextEncoding with = m.tokenizer().encode("the cat sat on the [MASK]");
  const tfm::TextEncoding without = m.tokenizer().encode("the cat");
  EXPECT_EQ(m.fill({with}).size(), 1u);
  try {
    m.fill({with, without});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "input 1 has no [MASK] token");
  }
}

// The character offsets /tokenize returns (token_offsets) equal Hugging Face tokenizers' offset_mapping on texts
// with accents, punctuation and extra spaces (tests/fixtures/tokenizer/bert_base_uncased_offsets.json, from the
// npm tokenizers library: scripts/make_tokenizer_fixtures.js --offsets).
TEST(HeadsTokenOffsets, MatchHuggingFaceOnAccentsAndPunctuation) {
  const auto fx = nlohmann::json::parse(slurp(fixture("tokenizer/bert_base_uncased_offsets.json")));
  BertTokenizer tok = BertTokenizer::from_dir(data_dir() + "/bert-base-uncased");
  ASSERT_GE(fx["cases"].size(), 5u);
  for (const auto& c : fx["cases"]) {
    const std::string text = c["text"];
    Encoding e = tok.encode(text, nullptr, true, 0);
    ASSERT_EQ(e.input_ids, c["ids"].get<std::vector<int64_t>>()) << text;
    auto got = token_offsets(tok, text, e);
    ASSERT_EQ(got.size(), c["offsets"].size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, c["offsets"][i][0].get<int64_t>()) << text << " token " << i;
      EXPECT_EQ(got[i].second, c["offsets"][i][1].get<int64_t>()) << text << " token " << i;
    }
  }
}
