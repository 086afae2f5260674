// tfm tokenize: Hugging Face tokenizers' encode / decode of a model folder's tokenizer, as JSON lines.
#include <omp.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "line_shards.h"
#include "commands.h"
#include "io/text_file.h"
#include "tfm/source_tokenizer.h"
#include "tfm/tokenizer.h"

namespace tfm::cli {

namespace {

nlohmann::json encoding_json(const TextEncoding& e, bool with_types) {
  nlohmann::json j;
  j["input_ids"] = e.input_ids;
  if (with_types) j["token_type_ids"] = e.token_type_ids;
  j["attention_mask"] = e.attention_mask;
  j["tokens"] = e.tokens;
  nlohmann::json off = nlohmann::json::array();
  for (const auto& [a, b] : e.offsets) off.push_back(a < 0 ? nlohmann::json{0, 0} : nlohmann::json{a, b});  // HF: [0, 0] for specials
  j["offsets"] = off;
  return j;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  struct Opts {
    std::string model, input, source_lang, target_lang;
    std::vector<std::string> texts, pairs;
    std::vector<int64_t> decode;
    bool no_special = false, keep_special = false;
    int64_t max_length = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Tokenize each TEXT with the tokenizer of a model folder (tokenizer.json: WordPiece, byte-level BPE, Unigram, "
      "WordLevel; or vocab.txt); prints one JSON object a line with input_ids, token_type_ids (when the model "
      "family has them), attention_mask, tokens and offsets (code points), equal to Hugging Face tokenizers");
  cmd->add_option("--model", o->model,
                  "Folder with tokenizer.json, or vocab.txt (+ tokenizer_config.json); or a translation folder "
                  "(Marian, M2M100, NLLB, tfm train's): the source subwords tfm translate feeds the encoder, "
                  "{input_ids, attention_mask, tokens}, and --decode of target ids")
      ->required();
  cmd->add_option("--source-lang", o->source_lang, "Translation folders (M2M100, NLLB): the source language code");
  cmd->add_option("--target-lang", o->target_lang,
                  "Translation folders (multi-target Marian): the target whose >>code<< starts the source");
  cmd->add_option("text", o->texts, "Texts to tokenize (UTF-8), one output line each");
  cmd->add_option("--pair", o->pairs, "Second text of a pair; one per TEXT, in order")
      ->allow_extra_args(false);  // --pair A B: B is a TEXT, not a second pair
  cmd->add_option("--input", o->input, "Tokenize one text a line of FILE ('-': standard input), streaming JSON lines");
  cmd->add_flag("--no-special-tokens", o->no_special, "Do not add the special tokens ([CLS]/[SEP], <s>/</s>...)");
  cmd->add_option("--max-length", o->max_length, "Truncate to this many tokens, special tokens included (0: none)")
      ->check(whole_range(0, 1 << 20));
  // As Hugging Face tokenizers' decode: ids the vocabulary has no token for are skipped, no ids give an empty line.
  CLI::Option* decode = cmd->add_option("--decode", o->decode,
                                        "Print the text of these ids instead (special tokens skipped; ids without a "
                                        "token in the vocabulary skipped, as Hugging Face decode does)");
  decode->expected(0, CLI::detail::expected_max_vector_size)->check(whole_range(0, INT64_MAX));
  cmd->add_flag("--keep-special", o->keep_special, "With --decode: keep special tokens");
  add_threads_option(cmd, o->threads);
  cmd->callback([o, decode] {
    const bool decoding = decode->count() > 0;
    const int given = (!o->texts.empty()) + (!o->input.empty()) + decoding;
    if (given != 1)
      throw CLI::ValidationError("give TEXT..., --input FILE or --decode ID... (exactly one of them)");
    if (!o->pairs.empty() && o->pairs.size() != o->texts.size())
      throw CLI::ValidationError("--pair: give one per TEXT (" + std::to_string(o->texts.size()) + " texts, " +
                                 std::to_string(o->pairs.size()) + " --pair)");
    if (o->keep_special && !decoding) throw CLI::ValidationError("--keep-special goes with --decode");
    if (SourceTokenizer::is_translation_folder(o->model)) {
      const SourceTokenizer tok(o->model);
      if (!o->pairs.empty() || o->no_special || o->max_length > 0 || o->keep_special)
        throw CLI::ValidationError("--pair, --no-special-tokens, --max-length and --keep-special apply to encoder "
                                   "tokenizers; " + o->model + " is a " + tok.model_type() + " translation folder");
      if (decoding) {
        std::cout << tok.decode(o->decode) << "\n";
        return;
      }
      auto line_json = [&](const std::string& text) {
        const SourceTokens t = tok.encode(text, o->source_lang, o->target_lang);
        nlohmann::json j;
        j["input_ids"] = t.input_ids;
        j["attention_mask"] = std::vector<int64_t>(t.input_ids.size(), 1);
        j["tokens"] = t.tokens;
        return j.dump();
      };
      if (!o->texts.empty()) {
        for (const std::string& text : o->texts) std::cout << line_json(text) << "\n";
        return;
      }
      if (o->input != "-") check_not_folder(o->input);
      std::ifstream file;
      if (o->input != "-") {
        file.open(o->input, std::ios::binary);
        if (!file) throw std::runtime_error(o->input + ": cannot open");
      }
      std::istream& in = o->input == "-" ? std::cin : file;
      std::string line;
      for (size_t no = 1; std::getline(in, line); ++no) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        try {
          std::cout << line_json(line) << "\n";
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(o->input + ": line " + std::to_string(no) + ": " + e.what());
        }
        if (o->input == "-") std::cout.flush();  // a co-process gets each line's answer
      }
      if (in.bad()) throw std::runtime_error(o->input + ": read error");
      return;
    }
    if (!o->source_lang.empty() || !o->target_lang.empty())
      throw CLI::ValidationError("--source-lang and --target-lang apply to translation folders; " + o->model +
                                 " is not one");
    Tokenizer tok(o->model);
    if (decoding) {
      std::cout << tok.decode(o->decode, !o->keep_special) << "\n";
      return;
    }
    TokenizeOptions opt;
    opt.add_special_tokens = !o->no_special;
    opt.max_length = o->max_length;
    const bool types = tok.has_token_type_ids();
    if (!o->texts.empty()) {
      for (size_t i = 0; i < o->texts.size(); ++i) {
        TextEncoding e = o->pairs.empty() ? tok.encode(o->texts[i], opt) : tok.encode_pair(o->texts[i], o->pairs[i], opt);
        std::cout << encoding_json(e, types).dump() << "\n";
      }
      return;
    }
    std::ifstream file;
    if (o->input != "-") {
      check_not_folder(o->input);
      file.open(o->input, std::ios::binary);
      if (!file) throw std::runtime_error(o->input + ": cannot open");
    }
    // Standard input is read as it arrives, and a chunk ends where the writer pauses (line_shards.h LineReader),
    // so that a co-process writing a line and waiting for its answer gets it.
    const bool from_stdin = o->input == "-";
    LineReader stdin_lines;
    if (from_stdin) stdin_lines.open("-");
    std::istream& in = file;
    auto next_line = [&](std::string& line) {
      if (from_stdin) return stdin_lines.next(line);  // one trailing '\r' removed
      if (!std::getline(in, line)) return false;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return true;
    };
    // Chunks of lines encoded in parallel, printed in order and flushed; standard input in small chunks so that
    // a pipe's lines come back while more are still being written.
    const size_t chunk = from_stdin ? 64 : 4096;
    std::vector<std::string> lines;
    std::vector<std::string> out;
    size_t line_no = 0;
    std::string line;
    bool more = true;
    while (more) {
      lines.clear();
      while (lines.size() < chunk) {
        if (!lines.empty() && from_stdin && stdin_lines.paused()) break;
        if (!(more = next_line(line))) break;
        lines.push_back(line);
      }
      out.assign(lines.size(), std::string());
      std::vector<std::string> errors(lines.size());
#pragma omp parallel for schedule(dynamic, 64)
      for (long i = 0; i < (long)lines.size(); ++i) {
        try {
          out[(size_t)i] = encoding_json(tok.encode(lines[(size_t)i], opt), types).dump();
        } catch (const std::exception& e) {
          errors[(size_t)i] = e.what();
        }
      }
      for (size_t i = 0; i < lines.size(); ++i) {
        if (!errors[i].empty())
          throw std::runtime_error(o->input + ": line " + std::to_string(line_no + i + 1) + ": " + errors[i]);
        std::cout << out[i] << "\n";
      }
      std::cout.flush();
      line_no += lines.size();
    }
    if (in.bad()) throw std::runtime_error(o->input + ": read error");
    std::cout.flush();
  });
}

}  // namespace tfm::cli
