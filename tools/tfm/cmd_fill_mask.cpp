// tfm fill-mask: the most likely tokens for each mask token with a *ForMaskedLM checkpoint of any family, printed as the
// fill-mask pipeline returns them: per input a list of {"score", "token", "token_str", "sequence"}, best first
// (a list of such lists when the input has several masks).
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "head_util.h"
#include "tfm/classifier.h"

namespace tfm::cli {

void add_fill_mask_command(CLI::App& app) {
  struct Opts {
    std::string model, input, dtype;  // "": as the folder stores it
    std::vector<std::string> texts;
    int64_t top_k = 5, max_length = 0;
    bool skip_empty = false, no_truncate = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "fill-mask", "Predict the mask tokens ([MASK], <mask>: the tokenizer's mask_token) of texts with a *ForMaskedLM "
                   "checkpoint of any family (decoder tied to the word embeddings when the file does not store it); one "
                   "JSON line per input");
  cmd->add_option("--model", o->model, "Checkpoint folder: config.json, model.safetensors, tokenizer files")->required();
  cmd->add_option("text", o->texts, "Texts with at least one [MASK]");
  cmd->add_option("--input,-i", o->input, "File with one text a line (- for stdin)");
  cmd->add_option("--top-k", o->top_k, "Candidates per mask (default 5)")->check(whole_range(1, 1 << 20));
  cmd->add_option("--max-length", o->max_length,
                  "Truncate texts to this many tokens (default: the model's max_position_embeddings)")
      ->check(whole_range(2, 1 << 20));
  add_no_truncate_flag(cmd, o->no_truncate);
  add_skip_empty_flag(cmd, o->skip_empty,
                     "each JSON line is then {\"line\": N (1-based input line), \"predictions\": the line's list}");
  add_dtype_option(cmd, o->dtype);
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    std::vector<int64_t> line_of;
    std::vector<std::string> texts = gather_texts(o->texts, o->input, "TEXT", o->skip_empty, &line_of);
    if (texts.empty() && o->input.empty())
      throw CLI::ValidationError("give texts with a mask token ([MASK] or <mask>), or --input FILE");
    const MaskFiller m(o->model, ClassifierOptions{o->threads, o->dtype});
    const int64_t mask_id = m.mask_token_id();
    int64_t truncated = 0;
    std::vector<TextEncoding> enc = encode_all(m.tokenizer(), m.max_position_embeddings(), texts, nullptr, o->max_length,
                                               o->no_truncate, &truncated);
    note_truncated(truncated, m.max_position_embeddings(), "text");
    for (size_t b = 0; b < enc.size(); ++b)
      if (std::find(enc[b].input_ids.begin(), enc[b].input_ids.end(), mask_id) == enc[b].input_ids.end())
        throw std::invalid_argument("input " + std::to_string(b + 1) + " has no " + m.mask_token() + " token" +
                                    (truncated && (int64_t)enc[b].input_ids.size() == m.max_position_embeddings()
                                         ? " left after truncation to the model's limit"
                                         : "") +
                                    ": '" + texts[b] + "'");
    const size_t batch = 32;
    for (size_t s = 0; s < enc.size(); s += batch) {
      std::vector<TextEncoding> chunk(enc.begin() + s, enc.begin() + std::min(enc.size(), s + batch));
      const auto filled = m.fill(chunk, o->top_k);
      for (size_t b = 0; b < filled.size(); ++b) {
        nlohmann::ordered_json per_mask = nlohmann::ordered_json::array();
        for (const std::vector<MaskCandidate>& cands : filled[b]) {
          nlohmann::ordered_json arr = nlohmann::ordered_json::array();
          for (const MaskCandidate& c : cands)
            arr.push_back({{"score", c.score}, {"token", c.token}, {"token_str", c.token_str}, {"sequence", c.sequence}});
          per_mask.push_back(arr);
        }
        const nlohmann::ordered_json shown = per_mask.size() == 1 ? per_mask[0] : per_mask;
        emit_line(o->skip_empty ? nlohmann::ordered_json({{"line", line_of[s + b]}, {"predictions", shown}}).dump()
                                : shown.dump());
      }
    }
    finish_stdout();
  });
}

}  // namespace tfm::cli
