// tfm tokenize: BERT WordPiece tokenization as one JSON object.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "tfm/tokenizer.h"

namespace tfm::cli {

void add_tokenize_command(CLI::App& app) {
  struct Opts {
    std::string model;
    std::vector<std::string> texts, pairs;
    bool no_special = false;
    int64_t max_length = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Tokenize each TEXT with the WordPiece tokenizer of a model folder; prints one JSON object a line "
                  "with input_ids, token_type_ids, attention_mask and tokens (equal to Hugging Face tokenizers)");
  cmd->add_option("--model", o->model, "Folder with tokenizer.json, or vocab.txt (+ tokenizer_config.json)")
      ->required();
  cmd->add_option("text", o->texts, "Texts to tokenize (UTF-8), one output line each")->required();
  cmd->add_option("--pair", o->pairs, "Second sentence of a pair (token_type_ids 1); one per TEXT, in order")
      ->allow_extra_args(false);  // --pair A B: B is a TEXT, not a second pair
  cmd->add_flag("--no-special-tokens", o->no_special, "Do not add [CLS] / [SEP]");
  cmd->add_option("--max-length", o->max_length, "Truncate to this many tokens (0: no truncation)")
      ->check(whole_range(0, 1 << 20));
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    if (!o->pairs.empty() && o->pairs.size() != o->texts.size())
      throw CLI::ValidationError("--pair: give one per TEXT (" + std::to_string(o->texts.size()) + " texts, " +
                                 std::to_string(o->pairs.size()) + " --pair)");
    const Tokenizer tok(o->model);
    TokenizeOptions to;
    to.add_special_tokens = !o->no_special;
    to.max_length = o->max_length;
    auto row = [](const IdArray& a) { return std::vector<int64_t>(a.begin(), a.end()); };
    for (size_t i = 0; i < o->texts.size(); ++i) {
      // A batch of one: no padding.
      const TokenBatch b = o->pairs.empty() ? tok({o->texts[i]}, to) : tok({o->texts[i]}, {o->pairs[i]}, to);
      nlohmann::json j;
      j["input_ids"] = row(b.input_ids);
      j["token_type_ids"] = row(b.token_type_ids);
      j["attention_mask"] = row(b.attention_mask);
      j["tokens"] = b.tokens[0];
      std::cout << j.dump() << "\n";
    }
  });
}

}  // namespace tfm::cli
