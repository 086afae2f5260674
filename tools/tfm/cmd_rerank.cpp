// tfm rerank: scores (query, passage) pairs with a cross-encoder (*ForSequenceClassification on pairs, any family) and
// prints [{"index", "score"}] best first, as sentence-transformers' CrossEncoder.rank does.
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli_util.h"
#include "commands.h"
#include "head_util.h"
#include "tfm/classifier.h"

namespace tfm::cli {

void add_rerank_command(CLI::App& app) {
  struct Opts {
    std::string model, query, input, dtype;  // "": as the folder stores it
    std::vector<std::string> texts;
    bool raw = false, return_documents = false, skip_empty = false, no_truncate = false;
    int64_t top_k = 0, batch_size = 32, max_length = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "rerank", "Rank passages for a query with a cross-encoder: prints [{\"index\", \"score\"}] sorted by score "
                "(sigmoid of the logit for one label, or the activation config.json names; softmax probability of "
                "label 1 for two labels)");
  cmd->add_option("--model", o->model, "Cross-encoder folder: config.json, model.safetensors, tokenizer files")
      ->required();
  // No -q: that is --quiet in every other command.
  cmd->add_option("--query", o->query, "The query")->required();
  cmd->add_option("text", o->texts, "Passages to rank");
  cmd->add_option("--input,-i", o->input, "File with one passage a line (- for stdin)");
  cmd->add_option("--top-k", o->top_k, "Print only the best K")->check(whole_range(1, 1 << 30));
  cmd->add_flag("--raw-scores", o->raw, "Print logits, no activation");
  cmd->add_flag("--return-documents", o->return_documents, "Add each passage as \"text\"");
  cmd->add_option("--batch-size", o->batch_size, "Pairs per forward pass (default 32)")->check(whole_range(1, 1 << 16));
  cmd->add_option("--max-length", o->max_length,
                  "Truncate pairs to this many tokens (longest first; default: the model's max_position_embeddings)")
      ->check(whole_range(3, 1 << 20));
  add_no_truncate_flag(cmd, o->no_truncate);
  add_skip_empty_flag(cmd, o->skip_empty,
                     "each entry then has \"line\": N (1-based input line of the passage; \"index\" counts the "
                     "passages kept)");
  add_dtype_option(cmd, o->dtype);
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    std::vector<int64_t> line_of;
    std::vector<std::string> passages = gather_texts(o->texts, o->input, "passage", o->skip_empty, &line_of);
    if (passages.empty() && o->input.empty()) throw CLI::ValidationError("give passages to rank, or --input FILE");
    if (o->query.find_first_not_of(" \t\v\f\r") == std::string::npos) throw CLI::ValidationError("--query is empty");
    require_utf8("--query", o->query);
    const Classifier m(o->model, ClassifierOptions{o->threads, o->dtype});
    const int64_t C = m.num_labels();
    if (C > 2)
      throw std::runtime_error(o->model + " has " + std::to_string(C) +
                               " labels; rerank needs a cross-encoder with one (or two) labels");
    const std::string fn = o->raw ? "none" : C == 2 ? "softmax" : "";  // "": the head's default
    std::vector<float> scores;
    int64_t truncated = 0;
    for (size_t s = 0; s < passages.size(); s += (size_t)o->batch_size) {
      std::vector<std::string> chunk(passages.begin() + s, passages.begin() + std::min(passages.size(), s + o->batch_size));
      std::vector<std::string> queries(chunk.size(), o->query);
      const FloatArray logits =
          m.logits(encode_all(m.tokenizer(), m.max_position_embeddings(), queries, &chunk, o->max_length,
                             o->no_truncate, &truncated));
      for (size_t b = 0; b < chunk.size(); ++b) {
        std::vector<float> sc = m.scores(logits.data() + b * C, fn);
        scores.push_back(C == 2 ? (o->raw ? sc[1] - sc[0] : sc[1]) : sc[0]);
      }
    }
    note_truncated(truncated, m.max_position_embeddings(), "pair");
    std::vector<int64_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
    if (o->top_k > 0 && (size_t)o->top_k < order.size()) order.resize(o->top_k);
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (int64_t i : order) {
      nlohmann::ordered_json e = {{"index", i}, {"score", scores[i]}};
      if (o->skip_empty) e["line"] = line_of[i];
      if (o->return_documents) e["text"] = passages[i];
      arr.push_back(e);
    }
    emit_line(arr.dump());
    finish_stdout();
  });
}

}  // namespace tfm::cli
