// tfm classify: sequence classification ({"label", "score"}) or token classification (entities) with a Hugging
// Face *For*Classification checkpoint of any encoder family, printing what the text-classification / token-classification pipelines
// return, one JSON line per input.
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli_util.h"
#include "commands.h"
#include "head_util.h"
#include "tfm/classifier.h"
#include "tfm/pipeline.h"

namespace tfm::cli {

namespace {

// --top-k: a whole number >= 1 or "all"; 0 = not given ({label, score}), -1 = all.
int64_t parse_top_k(const std::string& v) {
  if (v.empty()) return 0;
  if (v == "all") return -1;
  size_t used = 0;
  long long k = 0;
  try {
    k = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || k < 1) throw CLI::ValidationError("--top-k: give a whole number >= 1 or all, got '" + v + "'");
  return (int64_t)k;
}

nlohmann::ordered_json label_list(const std::vector<LabelScore>& ranked) {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const LabelScore& x : ranked) arr.push_back({{"label", x.label}, {"score", x.score}});
  return arr;
}

}  // namespace

void add_classify_command(CLI::App& app) {
  struct Opts {
    std::string model, input, function = "default", dtype, top_k;  // dtype "": as the folder stores it
    std::vector<std::string> texts, pairs;
    std::string candidate_labels, hypothesis_template = "This example is {}.", aggregation = "none", ignore_labels;
    bool all_scores = false, all_tokens = false, skip_empty = false, multi_label = false, no_truncate = false;
    int64_t batch_size = 32, max_length = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "classify", "Classify texts (or text pairs) with a *ForSequenceClassification checkpoint of any family (BERT, "
                  "RoBERTa, XLM-R, CamemBERT, DistilBERT, ...) ({\"label\", \"score\"} per line), classify them "
                  "zero-shot over candidate labels with an NLI one ({\"sequence\", \"labels\", \"scores\"}), "
                  "or tag tokens with a *ForTokenClassification one (a list of {\"entity\", \"score\", \"index\", "
                  "\"word\", \"start\", \"end\"} per line, special tokens and label O left out; entity groups with "
                  "--aggregation-strategy)");
  cmd->add_option("--model", o->model, "Checkpoint folder: config.json (architectures, id2label), model.safetensors, "
                                       "tokenizer files")
      ->required();
  cmd->add_option("text", o->texts, "Texts to classify");
  cmd->add_option("--input,-i", o->input, "File with one text a line (- for stdin)");
  cmd->add_option("--pair", o->pairs, "Second text of a (text, text_pair) input; one per TEXT, in order")
      ->allow_extra_args(false);  // --pair A B: B is a TEXT, not a second pair
  cmd->add_flag("--all-scores", o->all_scores,
                "Sequence classification: every label with its score, best first (as --top-k all)");
  cmd->add_option("--top-k", o->top_k,
                  "Sequence classification: the best N labels (or all) as a list, best first, as the "
                  "text-classification pipeline's top_k (default: the best label as one {label, score})");
  cmd->add_flag("--all-tokens", o->all_tokens, "Token classification: keep tokens labelled O too");
  cmd->add_option("--function-to-apply", o->function,
                  "default (none for problem_type regression, sigmoid for one label or multi-label, else softmax), "
                  "sigmoid, softmax or none")
      ->check(CLI::IsMember({"default", "sigmoid", "softmax", "none"}));
  cmd->add_option("--candidate-labels", o->candidate_labels,
                  "Zero-shot classification with an NLI model: comma-separated labels (\"sports, politics\"); "
                  "each text is paired with the hypothesis of each label, one JSON line {sequence, labels, "
                  "scores} per text, best first");
  cmd->add_option("--hypothesis-template", o->hypothesis_template,
                  "Zero-shot: the hypothesis, {} standing for the label (default \"This example is {}.\")");
  cmd->add_flag("--multi-label", o->multi_label,
                "Zero-shot: score each label on its own (entailment against contradiction) instead of softmaxing "
                "the labels together");
  cmd->add_option("--aggregation-strategy", o->aggregation,
                  "Token classification: none (tokens, default), simple (entity groups by B-/I- tags), first, "
                  "average or max (words agree on one label first); groups print {entity_group, score, word, "
                  "start, end}")
      ->check(CLI::IsMember({"none", "simple", "first", "average", "max"}));
  cmd->add_option("--ignore-labels", o->ignore_labels,
                  "Token classification: comma-separated labels (or entity groups) to leave out (default O)");
  cmd->add_option("--batch-size", o->batch_size, "Texts per forward pass (default 32)")->check(whole_range(1, 1 << 16));
  cmd->add_option("--max-length", o->max_length,
                  "Truncate texts to this many tokens (default: the model's max_position_embeddings)")
      ->check(whole_range(2, 1 << 20));
  add_no_truncate_flag(cmd, o->no_truncate);
  add_skip_empty_flag(cmd, o->skip_empty,
                     "each JSON line then has \"line\": N (1-based input line): {\"line\", \"label\", \"score\"}, "
                     "or {\"line\", \"scores\": [...]} with --all-scores / --top-k, {\"line\", \"entities\": [...]} "
                     "for token classification, {\"line\", \"sequence\", \"labels\", \"scores\"} zero-shot");
  add_dtype_option(cmd, o->dtype);
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    if (!o->pairs.empty() && !o->input.empty()) throw CLI::ValidationError("--pair takes TEXT arguments, not --input");
    if (!o->pairs.empty() && o->pairs.size() != o->texts.size())
      throw CLI::ValidationError("--pair: give one per TEXT (" + std::to_string(o->texts.size()) + " texts, " +
                                 std::to_string(o->pairs.size()) + " --pair)");
    std::vector<int64_t> line_of;
    std::vector<std::string> texts = gather_texts(o->texts, o->input, "TEXT", o->skip_empty, &line_of);
    if (texts.empty() && o->input.empty()) throw CLI::ValidationError("give texts to classify, or --input FILE");
    std::vector<std::string> pairs;
    for (size_t i = 0; i < texts.size() && !o->pairs.empty(); ++i) pairs.push_back(o->pairs[line_of[i] - 1]);
    const int64_t top_k = o->all_scores ? -1 : parse_top_k(o->top_k);
    const bool zero_shot = !o->candidate_labels.empty();
    const TaskHead kind = detect_task_head(o->model);
    if (kind == TaskHead::MaskedLM)
      throw std::runtime_error(o->model + " is a masked-LM checkpoint: it has no classification head (use tfm fill-mask)");
    if (kind == TaskHead::QuestionAnswering)
      throw std::runtime_error(o->model + " is a question-answering checkpoint: it has no classification head (use tfm qa)");
    if (kind == TaskHead::TokenClassification) {
      for (const auto& [given, name] : std::initializer_list<std::pair<bool, const char*>>{
               {o->all_scores, "--all-scores"}, {!o->top_k.empty(), "--top-k"}, {!o->pairs.empty(), "--pair"},
               {zero_shot, "--candidate-labels"}})
        if (given) throw CLI::ValidationError(std::string(name) + " is for sequence classification; " + o->model + " tags tokens");
    } else {
      for (const auto& [given, name] : std::initializer_list<std::pair<bool, const char*>>{
               {o->all_tokens, "--all-tokens"}, {o->aggregation != "none", "--aggregation-strategy"},
               {!o->ignore_labels.empty(), "--ignore-labels"}})
        if (given) throw CLI::ValidationError(std::string(name) + " is for token classification; " + o->model + " classifies sequences");
    }
    if (zero_shot && (top_k != 0 || !o->pairs.empty() || o->function != "default"))
      throw CLI::ValidationError("--candidate-labels scores every label (best first); --all-scores, --top-k, --pair "
                                 "and --function-to-apply are for plain classification");
    const std::string fn = o->function == "default" ? "" : o->function;
    if (kind == TaskHead::SequenceClassification && zero_shot) {
      const Classifier m(o->model, ClassifierOptions{o->threads, o->dtype});
      const std::vector<std::string> labels = split_candidate_labels(o->candidate_labels);
      format_hypothesis(o->hypothesis_template, labels[0]);  // a template without {} fails before the model runs
      if (m.entailment_id() < 0)
        std::fprintf(stderr, "note: %s: no label of id2label starts with \"entail\"; taking the last label as "
                     "entailment, as the zero-shot pipeline does\n", o->model.c_str());
      ZeroShotOptions zo;
      zo.hypothesis_template = o->hypothesis_template;
      zo.multi_label = o->multi_label;
      // (sequence, hypothesis) pairs over the model's limit are truncated longest first unless --no-truncate
      zo.max_length = o->max_length || o->no_truncate ? o->max_length : m.max_position_embeddings();
      zo.batch_size = o->batch_size;
      const size_t chunk_texts = std::max<size_t>(1, (size_t)o->batch_size / labels.size());
      for (size_t s = 0; s < texts.size(); s += chunk_texts) {
        std::vector<std::string> chunk(texts.begin() + s, texts.begin() + std::min(texts.size(), s + chunk_texts));
        const std::vector<ZeroShotResult> res = m.zero_shot(chunk, labels, zo);
        for (size_t b = 0; b < res.size(); ++b) {
          nlohmann::ordered_json j;
          if (o->skip_empty) j["line"] = line_of[s + b];
          j["sequence"] = res[b].sequence;
          j["labels"] = res[b].labels;
          j["scores"] = res[b].scores;
          emit_line(j.dump());
        }
      }
    } else if (kind == TaskHead::SequenceClassification) {
      const Classifier m(o->model, ClassifierOptions{o->threads, o->dtype});
      const auto& labels = m.labels();
      const int64_t C = m.num_labels();
      int64_t truncated = 0;
      for (size_t s = 0; s < texts.size(); s += (size_t)o->batch_size) {
        const size_t e = std::min(texts.size(), s + o->batch_size);
        std::vector<std::string> chunk(texts.begin() + s, texts.begin() + e);
        std::vector<std::string> chunk_pairs;
        if (!pairs.empty()) chunk_pairs.assign(pairs.begin() + s, pairs.begin() + e);
        const FloatArray logits = m.logits(encode_all(m.tokenizer(), m.max_position_embeddings(), chunk,
                                                      pairs.empty() ? nullptr : &chunk_pairs, o->max_length,
                                                      o->no_truncate, &truncated));
        for (size_t b = 0; b < chunk.size(); ++b) {
          const std::vector<LabelScore> ranked = rank_labels(labels, m.scores(logits.data() + b * C, fn),
                                                             top_k > 0 ? top_k : 0);
          const int64_t line = line_of[s + b];
          if (top_k != 0) {
            const nlohmann::ordered_json arr = label_list(ranked);
            emit_line(o->skip_empty ? nlohmann::ordered_json({{"line", line}, {"scores", arr}}).dump() : arr.dump());
          } else {
            nlohmann::ordered_json best = {{"label", ranked[0].label}, {"score", ranked[0].score}};
            if (o->skip_empty) best = {{"line", line}, {"label", ranked[0].label}, {"score", ranked[0].score}};
            emit_line(best.dump());
          }
        }
      }
      note_truncated(truncated, m.max_position_embeddings());
    } else {
      const TokenClassifier m(o->model, ClassifierOptions{o->threads, o->dtype});
      TagOptions to;
      to.function = fn.empty() ? "softmax" : fn;
      to.all_tokens = o->all_tokens;
      to.aggregation_strategy = o->aggregation;
      if (!o->ignore_labels.empty()) to.ignore_labels = split_candidate_labels(o->ignore_labels);
      const bool grouped = o->aggregation != "none";
      int64_t truncated = 0;
      for (size_t s = 0; s < texts.size(); s += (size_t)o->batch_size) {
        std::vector<std::string> chunk(texts.begin() + s, texts.begin() + std::min(texts.size(), s + o->batch_size));
        const auto tags =
            m.tag(encode_all(m.tokenizer(), m.max_position_embeddings(), chunk, nullptr, o->max_length, o->no_truncate,
                             &truncated),
                  chunk, to);
        for (size_t b = 0; b < tags.size(); ++b) {
          nlohmann::ordered_json arr = nlohmann::ordered_json::array();
          for (const TokenTag& t : tags[b]) {
            if (grouped)
              arr.push_back({{"entity_group", t.entity}, {"score", t.score}, {"word", t.word}, {"start", t.start},
                             {"end", t.end}});
            else
              arr.push_back({{"entity", t.entity}, {"score", t.score}, {"index", t.index}, {"word", t.word},
                             {"start", t.start}, {"end", t.end}});
          }
          emit_line(o->skip_empty ? nlohmann::ordered_json({{"line", line_of[s + b]}, {"entities", arr}}).dump()
                                  : arr.dump());
        }
      }
      note_truncated(truncated, m.max_position_embeddings());
    }
    finish_stdout();
  });
}

}  // namespace tfm::cli
