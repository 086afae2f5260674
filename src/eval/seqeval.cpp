#include "eval/seqeval.h"

#include <set>

namespace tfm {

std::vector<std::tuple<std::string, int64_t, int64_t>> seqeval_entities(const std::vector<std::vector<std::string>>& seqs) {
  std::vector<std::string> seq;
  for (const auto& s : seqs) {
    seq.insert(seq.end(), s.begin(), s.end());
    seq.push_back("O");
  }
  seq.push_back("O");  // get_entities iterates over seq + ['O']
  std::vector<std::tuple<std::string, int64_t, int64_t>> chunks;
  std::string prev_tag = "O", prev_type;
  int64_t begin = 0;
  for (int64_t i = 0; i < (int64_t)seq.size(); ++i) {
    const std::string& chunk = seq[i];
    const std::string tag = chunk.substr(0, 1);
    const std::string rest = chunk.size() > 1 ? chunk.substr(1) : "";
    const size_t dash = rest.find('-');
    std::string type = dash == std::string::npos ? rest : rest.substr(dash + 1);  // chunk[1:].split('-', 1)[-1]
    if (type.empty()) type.push_back('_');
    const std::string& p = prev_tag;
    const bool end = p == "E" || p == "S" || (p == "B" && (tag == "B" || tag == "S" || tag == "O")) ||
                     (p == "I" && (tag == "B" || tag == "S" || tag == "O")) ||
                     (p != "O" && p != "." && prev_type != type);
    const bool start = tag == "B" || tag == "S" || (p == "E" && (tag == "E" || tag == "I")) ||
                       (p == "S" && (tag == "E" || tag == "I")) || (p == "O" && (tag == "E" || tag == "I")) ||
                       (tag != "O" && tag != "." && prev_type != type);
    if (end) chunks.emplace_back(prev_type, begin, i - 1);
    if (start) begin = i;
    prev_tag = tag;
    prev_type = type;
  }
  return chunks;
}

SeqevalScores seqeval_scores(const std::vector<std::vector<std::string>>& gold,
                             const std::vector<std::vector<std::string>>& pred) {
  const auto g = seqeval_entities(gold), p = seqeval_entities(pred);
  const std::set<std::tuple<std::string, int64_t, int64_t>> gs(g.begin(), g.end());
  SeqevalScores s;
  s.true_entities = (int64_t)g.size();
  s.pred_entities = (int64_t)p.size();
  for (const auto& c : p) s.correct += gs.count(c) ? 1 : 0;
  s.precision = s.pred_entities ? (double)s.correct / (double)s.pred_entities : 0.0;
  s.recall = s.true_entities ? (double)s.correct / (double)s.true_entities : 0.0;
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  return s;
}

}  // namespace tfm
