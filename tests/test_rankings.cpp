// Orderings that the task commands print, checked against PyTorch's scores (tests/fixtures/heads_*,
// scripts/make_embed_fixtures.py) for inputs in another order than the fixture's, for every --top-k: `tfm rerank`
// sorts passages by score, best first; `tfm fill-mask` lists the K most probable tokens, best first (ties: lower
// id first, as torch.topk on these logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "io/safetensors.h"
#include "run_tfm.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;

namespace {

nlohmann::json one_json_line(const test::TfmRun& r) {
  std::stringstream ss(r.out);
  std::string line;
  std::getline(ss, line);
  return nlohmann::json::parse(line);
}

}  // namespace

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
