// Shared bits of the task-head commands (classify, fill-mask, rerank): texts from arguments or a file, batching,
// and checked writes to stdout.
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_util.h"
#include "io/text_file.h"
#include "tfm/tokenizer.h"

namespace tfm::cli {

// The texts of `args`, or the lines of `input` ("-" = stdin). An empty or all-space text is an error naming it,
// unless `skip_empty` leaves it out; `numbers`, when given, gets the 1-based input line (or argument number) of
// each text kept. An empty input file gives no texts (the command then prints nothing and exits 0, as `tfm embed`
// writes [0, dim]).
inline std::vector<std::string> gather_texts(const std::vector<std::string>& args, const std::string& input,
                                             const char* what = "TEXT", bool skip_empty = false,
                                             std::vector<int64_t>* numbers = nullptr) {
  if (!args.empty() && !input.empty()) throw std::invalid_argument(std::string("give ") + what + " arguments or --input, not both");
  std::vector<std::string> texts = args;
  std::string src = "argument ";
  if (!input.empty()) {
    texts = read_lines(input == "-" ? "/dev/stdin" : input, /*allow_empty=*/true);
    src = (input == "-" ? std::string("<stdin>") : input) + ": line ";
  }
  std::vector<std::string> kept;
  if (numbers) numbers->clear();
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].find_first_not_of(" \t\v\f\r") == std::string::npos) {
      if (skip_empty) continue;
      throw std::invalid_argument(src + std::to_string(i + 1) + " is empty; pass --skip-empty to leave empty " +
                                  (input.empty() ? "texts" : "lines") + " out");
    }
    kept.push_back(std::move(texts[i]));
    if (numbers) numbers->push_back((int64_t)i + 1);
  }
  return kept;
}

// --skip-empty of classify, fill-mask and rerank, worded as embed's.
inline void add_skip_empty_flag(CLI::App* cmd, bool& skip_empty, const char* numbered) {
  cmd->add_flag("--skip-empty", skip_empty,
                std::string("Leave empty (or all-space) lines (or text arguments) out instead of failing; so that "
                            "results can be matched to inputs, ") + numbered);
}

// Encodes every text (pairs[i] as its second segment when given) with the head's tokenizer. A text longer than the
// model allows (limit: max_position_embeddings) is cut to `limit` (pairs longest first), as text-embeddings-inference
// truncates, and counted in *truncated; with `no_truncate` it is refused. max_length > 0 truncates every text to
// that many tokens instead (a text still over `limit` is refused).
inline std::vector<TextEncoding> encode_all(const Tokenizer& tok, int64_t limit, const std::vector<std::string>& texts,
                                            const std::vector<std::string>* pairs, int64_t max_length,
                                            bool no_truncate = true, int64_t* truncated = nullptr) {
  TokenizeOptions to;
  to.max_length = max_length;
  TokenizeOptions cut = to;
  cut.max_length = limit;
  std::vector<TextEncoding> enc;
  for (size_t i = 0; i < texts.size(); ++i) {
    TextEncoding e;
    auto encode = [&](const TokenizeOptions& o) {
      try {
        return pairs ? tok.encode_pair(texts[i], (*pairs)[i], o) : tok.encode(texts[i], o);
      } catch (const std::invalid_argument& ex) {
        throw std::invalid_argument("input " + std::to_string(i + 1) + ": " + ex.what());
      }
    };
    e = encode(to);
    if ((int64_t)e.input_ids.size() > limit && max_length == 0 && !no_truncate) {
      e = encode(cut);
      if (truncated) ++*truncated;
    }
    if ((int64_t)e.input_ids.size() > limit)
      throw std::invalid_argument("input " + std::to_string(i + 1) + " has " + std::to_string(e.input_ids.size()) +
                                  " tokens, more than the model's max_position_embeddings (" + std::to_string(limit) +
                                  (max_length ? ")" : "); without --no-truncate it is truncated to " +
                                                          std::to_string(limit) + " tokens"));
    enc.push_back(std::move(e));
  }
  return enc;
}

// --no-truncate of the encoder commands (classify, fill-mask, rerank).
inline void add_no_truncate_flag(CLI::App* cmd, bool& no_truncate) {
  cmd->add_flag("--no-truncate", no_truncate,
                "Refuse an input longer than the model's max_position_embeddings instead of truncating it (the "
                "default, as text-embeddings-inference; a note on stderr counts the truncated inputs)");
}

// The one-line note of the inputs encode_all truncated (none: nothing printed).
inline void note_truncated(int64_t truncated, int64_t limit, const char* what = "input") {
  if (truncated > 0)
    std::fprintf(stderr, "note: %lld %s%s longer than the model's %lld tokens (max_position_embeddings) %s "
                 "truncated; --no-truncate refuses them\n", (long long)truncated, what, truncated == 1 ? " was" : "s were",
                 (long long)limit, truncated == 1 ? "and was" : "and were");
}

// Writes one line to stdout and fails loudly when stdout cannot take it (/dev/full, closed).
// The message names the reason, as flush_stdout's: "cannot write to standard output: No space left on device".
inline void emit_line(const std::string& s) {
  errno = 0;
  std::cout << s << '\n';
  if (!std::cout) {
    const int err = errno;
    std::cout.clear();
    throw std::runtime_error(std::string("cannot write to standard output") +
                             (err ? std::string(": ") + std::strerror(err) : std::string()) +
                             (err == EBADF ? " (is stdout closed?)" : ""));
  }
}
inline void finish_stdout() { flush_stdout(); }

}  // namespace tfm::cli
