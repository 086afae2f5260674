// tfm classify: sequence classification ({"label", "score"}) or token classification (entities) with a Hugging
// Face *For*Classification checkpoint of any encoder family, printing what the text-classification / token-classification pipelines
// return, one JSON line per input.
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli_util.h"
#include "commands.h"
#include "head_util.h"
#include "tfm/classifier.h"

namespace tfm::cli {

void add_classify_command(CLI::App& app) {
  struct Opts {
    std::string model, input, function = "default", dtype;  // "": as the folder stores it
    std::vector<std::string> texts;
    bool all_scores = false, all_tokens = false, skip_empty = false;
    int64_t batch_size = 32, max_length = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "classify", "Classify texts with a *ForSequenceClassification checkpoint of any family (BERT, RoBERTa, XLM-R, CamemBERT, DistilBERT, ...) ({\"label\", \"score\"} per line) "
                  "or tag tokens with a *ForTokenClassification one (a list of {\"entity\", \"score\", \"index\", "
                  "\"word\", \"start\", \"end\"} per line, special tokens and label O left out)");
  cmd->add_option("--model", o->model, "Checkpoint folder: config.json (architectures, id2label), model.safetensors, "
                                       "tokenizer files")
      ->required();
  cmd->add_option("text", o->texts, "Texts to classify");
  cmd->add_option("--input,-i", o->input, "File with one text a line (- for stdin)");
  cmd->add_flag("--all-scores", o->all_scores, "Sequence classification: every label with its score, best first");
  cmd->add_flag("--all-tokens", o->all_tokens, "Token classification: keep tokens labelled O too");
  cmd->add_option("--function-to-apply", o->function,
                  "default (none for problem_type regression, sigmoid for one label or multi-label, else softmax), "
                  "sigmoid, softmax or none")
      ->check(CLI::IsMember({"default", "sigmoid", "softmax", "none"}));
  cmd->add_option("--batch-size", o->batch_size, "Texts per forward pass (default 32)")->check(whole_range(1, 1 << 16));
  cmd->add_option("--max-length", o->max_length, "Truncate texts to this many tokens (default: refuse longer ones)")
      ->check(whole_range(2, 1 << 20));
  add_skip_empty_flag(cmd, o->skip_empty,
                     "each JSON line then has \"line\": N (1-based input line): {\"line\", \"label\", \"score\"}, "
                     "or {\"line\", \"scores\": [...]} with --all-scores, {\"line\", \"entities\": [...]} for token "
                     "classification");
  add_dtype_option(cmd, o->dtype);
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    std::vector<int64_t> line_of;
    std::vector<std::string> texts = gather_texts(o->texts, o->input, "TEXT", o->skip_empty, &line_of);
    if (texts.empty() && o->input.empty()) throw CLI::ValidationError("give texts to classify, or --input FILE");
    const TaskHead kind = detect_task_head(o->model);
    if (kind == TaskHead::MaskedLM)
      throw std::runtime_error(o->model + " is a masked-LM checkpoint: it has no classification head (use tfm fill-mask)");
    if (kind == TaskHead::TokenClassification && o->all_scores)
      throw CLI::ValidationError("--all-scores is for sequence classification; " + o->model + " tags tokens");
    if (kind == TaskHead::SequenceClassification && o->all_tokens)
      throw CLI::ValidationError("--all-tokens is for token classification; " + o->model + " classifies sequences");
    const std::string fn = o->function == "default" ? "" : o->function;
    if (kind == TaskHead::SequenceClassification) {
      const Classifier m(o->model, ClassifierOptions{o->threads, o->dtype});
      const auto& labels = m.labels();
      const int64_t C = m.num_labels();
      for (size_t s = 0; s < texts.size(); s += (size_t)o->batch_size) {
        std::vector<std::string> chunk(texts.begin() + s, texts.begin() + std::min(texts.size(), s + o->batch_size));
        const FloatArray logits =
            m.logits(encode_all(m.tokenizer(), m.max_position_embeddings(), chunk, nullptr, o->max_length));
        for (size_t b = 0; b < chunk.size(); ++b) {
          std::vector<float> sc = m.scores(logits.data() + b * C, fn);
          std::vector<int64_t> order(C);
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return sc[a] > sc[c]; });
          const int64_t line = line_of[s + b];
          if (o->all_scores) {
            nlohmann::ordered_json arr = nlohmann::ordered_json::array();
            for (int64_t k : order) arr.push_back({{"label", labels[k]}, {"score", sc[k]}});
            emit_line(o->skip_empty ? nlohmann::ordered_json({{"line", line}, {"scores", arr}}).dump() : arr.dump());
          } else {
            nlohmann::ordered_json best = {{"label", labels[order[0]]}, {"score", sc[order[0]]}};
            if (o->skip_empty) best = {{"line", line}, {"label", labels[order[0]]}, {"score", sc[order[0]]}};
            emit_line(best.dump());
          }
        }
      }
    } else {
      const TokenClassifier m(o->model, ClassifierOptions{o->threads, o->dtype});
      TagOptions to;
      to.function = fn.empty() ? "softmax" : fn;
      to.all_tokens = o->all_tokens;
      for (size_t s = 0; s < texts.size(); s += (size_t)o->batch_size) {
        std::vector<std::string> chunk(texts.begin() + s, texts.begin() + std::min(texts.size(), s + o->batch_size));
        const auto tags = m.tag(encode_all(m.tokenizer(), m.max_position_embeddings(), chunk, nullptr, o->max_length), to);
        for (size_t b = 0; b < tags.size(); ++b) {
          nlohmann::ordered_json arr = nlohmann::ordered_json::array();
          for (const TokenTag& t : tags[b])
            arr.push_back({{"entity", t.entity}, {"score", t.score}, {"index", t.index}, {"word", t.word},
                           {"start", t.start}, {"end", t.end}});
          emit_line(o->skip_empty ? nlohmann::ordered_json({{"line", line_of[s + b]}, {"entities", arr}}).dump()
                                  : arr.dump());
        }
      }
    }
    finish_stdout();
  });
}

}  // namespace tfm::cli
