// tfm score: the log-likelihood of given translations under a translation model (CTranslate2's score_batch).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli_util.h"
#include "commands.h"
#include "io/text_file.h"
#include "tfm/translator.h"

namespace tfm::cli {

namespace {
// One line of at most 1 MiB (false at the end of input).
bool read_line(std::istream& in, std::string& line, size_t line_no, const std::string& name) {
  constexpr size_t kMaxLine = size_t(1) << 20;
  line.clear();
  std::streambuf* buf = in.rdbuf();
  for (int ch; (ch = buf->sbumpc()) != std::char_traits<char>::eof();) {
    if (ch == '\n') return true;
    if (line.size() == kMaxLine)
      throw std::invalid_argument(name + " line " + std::to_string(line_no) + " is longer than 1 MiB");
    line.push_back((char)ch);
  }
  return !line.empty();
}

std::ifstream open_text(const std::string& path, const char* option) {
  check_not_folder(path);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument(std::string(option) + " " + path + ": cannot open");
  return f;
}
}  // namespace

void add_score_command(CLI::App& app) {
  struct Opts {
    std::string model, source, target;
    bool tokens = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "score", "Score given translations (CTranslate2's score_batch): per pair one line 'SUM<TAB>NORMALIZED', the "
               "natural-log probability of the target's tokens and <eos> under the model (teacher forcing) and that "
               "sum divided by the token count. Pairs from --source / --target files (line by line) or stdin lines "
               "'source<TAB>target'");
  cmd->add_option("--model", o->model, "Translation model folder (as tfm translate)")->required();
  cmd->add_option("--source", o->source, "Source sentences, one a line (with --target)");
  cmd->add_option("--target", o->target, "Target sentences, one a line, aligned with --source");
  cmd->add_flag("--tokens", o->tokens, "A third column: each target token and its log-probability, 'token=logp' "
                                       "separated by spaces");
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    if (o->source.empty() != o->target.empty())
      throw CLI::ValidationError("--source and --target go together (or give 'source<TAB>target' lines on stdin)");
    TranslatorOptions to;
    to.threads = o->threads;
    const Translator translator(o->model, to);
    std::ifstream src_file, tgt_file;
    if (!o->source.empty()) src_file = open_text(o->source, "--source"), tgt_file = open_text(o->target, "--target");
    std::vector<std::string> src, tgt;
    size_t first = 1;  // line number of src[0]
    auto flush = [&] {
      if (src.empty()) return;
      std::vector<ScoringResult> res;
      try {
        res = translator.score_batch(src, tgt);
      } catch (const std::invalid_argument& e) {  // "target 3 has ..." counts from this chunk's first line
        std::string what = e.what();
        const size_t sp = what.find(' ');
        if (sp != std::string::npos && (what.rfind("source ", 0) == 0 || what.rfind("target ", 0) == 0)) {
          const size_t end = what.find_first_not_of("0123456789", sp + 1);
          if (end > sp + 1) {
            const size_t k = std::stoul(what.substr(sp + 1, end - sp - 1));
            const std::string& file = what.rfind("source ", 0) == 0 ? o->source : o->target;
            const std::string where = o->source.empty() ? "stdin line " : file + ": line ";
            what = where + std::to_string(first + k - 1) + ": " + what.substr(0, sp) + what.substr(end);
          }
        }
        throw std::invalid_argument(what);
      }
      for (const ScoringResult& r : res) {
        std::printf("%.6f\t%.6f", r.cumulated_score, r.normalized_score);
        if (o->tokens)
          for (size_t t = 0; t < r.tokens.size(); ++t)
            std::printf("%s%s=%.6f", t ? " " : "\t", r.tokens[t].c_str(), r.log_probs[t]);
        std::printf("\n");
      }
      flush_stdout();
      first += src.size();
      src.clear();
      tgt.clear();
    };
    std::string a, b;
    for (size_t no = 1;; ++no) {
      if (o->source.empty()) {
        if (!read_line(std::cin, a, no, "stdin")) break;
        const size_t tab = a.find('\t');
        if (tab == std::string::npos || a.find('\t', tab + 1) != std::string::npos)
          throw std::invalid_argument("stdin line " + std::to_string(no) + ": expected 'source<TAB>target' (" +
                                      (tab == std::string::npos ? "no TAB" : "more than one TAB") + ")");
        b = a.substr(tab + 1);
        a.resize(tab);
      } else {
        const bool has_a = read_line(src_file, a, no, o->source), has_b = read_line(tgt_file, b, no, o->target);
        if (has_a != has_b) {
          // The longer file's count: its remaining lines read to the end (as bleu --corpus names both counts).
          size_t longer = no;
          for (std::string rest; read_line(has_a ? src_file : tgt_file, rest, longer + 1, has_a ? o->source : o->target);)
            ++longer;
          const size_t n_src = has_a ? longer : no - 1, n_tgt = has_b ? longer : no - 1;
          throw std::invalid_argument("score: --source " + o->source + " has " + std::to_string(n_src) +
                                      " lines but --target " + o->target + " has " + std::to_string(n_tgt));
        }
        if (!has_a) break;
      }
      for (const auto& [text, what] : {std::pair{&a, "source"}, std::pair{&b, "target"}})
        if (text->find_first_not_of(" \t\r") == std::string::npos)
          throw std::invalid_argument("line " + std::to_string(no) + ": the " + what + " is empty");
      src.push_back(a);
      tgt.push_back(b);
      if (src.size() == 256) flush();
    }
    flush();
  });
}

}  // namespace tfm::cli
