// tfm qa: extractive question answering with a *ForQuestionAnswering checkpoint, printed as transformers'
// question-answering pipeline returns it: {"score", "start", "end", "answer"} when there is one answer, else a list
// of them best first (start / end in code points of the context); one JSON line per question.
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "head_util.h"
#include "tfm/classifier.h"

namespace tfm::cli {

namespace {

// The pipeline's return value: the answer itself when there is exactly one, else the list.
nlohmann::ordered_json answers_json(const std::vector<QaAnswer>& answers) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const QaAnswer& a : answers)
    list.push_back({{"score", a.score}, {"start", a.start}, {"end", a.end}, {"answer", a.answer}});
  return list.size() == 1 ? list[0] : list;
}

// A string field of an --input line.
std::string field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw std::invalid_argument(where + ": no \"" + key + "\" (lines are {\"question\", \"context\"})");
  if (!j[key].is_string()) throw std::invalid_argument(where + ": \"" + key + "\" must be a string");
  return j[key].get<std::string>();
}

}  // namespace

void add_qa_command(CLI::App& app) {
  struct Opts {
    std::string model, input, dtype, question, context;
    QuestionAnsweringOptions qa;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "qa", "Extractive question answering with a *ForQuestionAnswering checkpoint (BERT, RoBERTa / XLM-R, DistilBERT, "
            "MPNet), as transformers' question-answering pipeline: the answer {score, start, end, answer} (a list, "
            "best first, when there are several), start / end in code points of the context");
  cmd->add_option("--model", o->model, "Checkpoint folder: config.json, model.safetensors, tokenizer files")->required();
  cmd->add_option("--question,-q", o->question, "The question");
  cmd->add_option("--context,-c", o->context, "The text the answer is taken from");
  cmd->add_option("--input,-i", o->input,
                  "JSON lines {\"question\": ..., \"context\": ...} (- for stdin); one JSON line out per line in");
  cmd->add_option("--top-k", o->qa.top_k, "Answers per question (default 1)")->check(whole_range(1, 1 << 20));
  cmd->add_option("--doc-stride", o->qa.doc_stride,
                  "Tokens shared by consecutive windows of a long context (default min(max-seq-length / 2, 128))")
      ->check(whole_range(1, 1 << 20));
  cmd->add_option("--max-seq-length", o->qa.max_seq_length,
                  "Tokens per window, question and special tokens included (default min(model_max_length, 384))")
      ->check(whole_range(1, 1 << 20));
  cmd->add_option("--max-answer-length", o->qa.max_answer_length, "Tokens per answer at most (default 15)")
      ->check(whole_range(1, 1 << 20));
  cmd->add_flag("--handle-impossible-answer", o->qa.handle_impossible_answer,
                "Also rank the null answer {score, start 0, end 0, answer \"\"} (SQuAD 2.0 models)");
  add_dtype_option(cmd, o->dtype);
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    const bool single = !o->question.empty() || !o->context.empty();
    if (single && !o->input.empty()) throw CLI::ValidationError("give --question and --context, or --input, not both");
    if (!single && o->input.empty()) throw CLI::ValidationError("give --question and --context, or --input FILE.jsonl");
    if (single && (o->question.empty() || o->context.empty()))
      throw CLI::ValidationError(o->question.empty() ? "--question is empty or missing" : "--context is empty or missing");
    const QuestionAnswerer qa(o->model, ClassifierOptions{o->threads, o->dtype});
    if (single) {
      emit_line(answers_json(qa.answer(o->question, o->context, o->qa)).dump());
      finish_stdout();
      return;
    }
    std::vector<int64_t> line_of;
    const std::vector<std::string> lines = gather_texts({}, o->input, "LINE", /*skip_empty=*/true, &line_of);
    const std::string src = o->input == "-" ? "<stdin>" : o->input;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string where = src + ": line " + std::to_string(line_of[i]);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(lines[i]);
      } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(where + " is not JSON: " + e.what());
      }
      if (!j.is_object()) throw std::invalid_argument(where + " is not a JSON object {\"question\", \"context\"}");
      const std::string question = field(j, "question", where), context = field(j, "context", where);
      try {
        emit_line(answers_json(qa.answer(question, context, o->qa)).dump());
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(where + ": " + e.what());
      }
    }
    finish_stdout();
  });
}

}  // namespace tfm::cli
