// tfm bleu: d2l's sentence BLEU of a prediction against a label, or sacreBLEU's corpus BLEU of two files.
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "cli_util.h"
#include "commands.h"
#include "io/text_file.h"
#include "tfm/bleu.h"

namespace tfm::cli {

void add_bleu_command(CLI::App& app) {
  struct Opts {
    std::string pred, label;
    std::vector<std::string> corpus;  // {REF, HYP}
    int k = 2;
    int threads = 0;  // accepted as by every command (BLEU runs on one thread)
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "bleu",
      "d2l BLEU of PRED against LABEL (space-separated tokens): exp(min(0, 1 - len_label/len_pred)) * "
      "prod_n p_n^(1/2^n), n = 1..k; 0 when PRED is empty or shorter than k tokens.\n"
      "With --corpus REF HYP: corpus BLEU of the hypothesis file against the reference file (one sentence a line, "
      "UTF-8, same number of lines) exactly as sacreBLEU computes it by default (13a tokenizer, case-sensitive, "
      "4-grams, exp smoothing), printed as sacreBLEU's score line");
  CLI::Option* pred = cmd->add_option("pred", o->pred, "Predicted sentence");
  CLI::Option* label = cmd->add_option("label", o->label, "Reference sentence");
  CLI::Option* k = cmd->add_option("--k", o->k, "Longest n-gram (sentence BLEU)")
                       ->capture_default_str()
                       ->check(whole_range(1, 16));
  cmd->add_option("--corpus", o->corpus, "REF HYP: reference and hypothesis files for corpus BLEU")
      ->expected(2)
      ->type_name("REF HYP")
      ->excludes(pred)
      ->excludes(label)
      ->excludes(k);
  add_threads_option(cmd, o->threads, "Accepted as by every command; BLEU runs on one thread");
  cmd->callback([o, pred, label] {
    if (!o->corpus.empty()) {
      const std::string& ref_path = o->corpus[0];
      const std::string& hyp_path = o->corpus[1];
      // read_lines throws "<path>: cannot open: ..." / "<path>: line N: invalid UTF-8 at byte offset B (...)" / "<path>: empty file".
      const std::vector<std::string> refs = read_lines(ref_path);
      const std::vector<std::string> hyps = read_lines(hyp_path);
      if (refs.size() != hyps.size())
        throw std::invalid_argument("bleu --corpus: " + ref_path + " has " + std::to_string(refs.size()) +
                                    " lines but " + hyp_path + " has " + std::to_string(hyps.size()));
      for (size_t i = 0; i < refs.size(); ++i)
        if (refs[i].empty())
          throw std::invalid_argument(ref_path + ": line " + std::to_string(i + 1) +
                                      ": empty reference (sacreBLEU rejects empty references)");
      std::printf("%s\n", bleu::corpus(refs, hyps).format().c_str());
      return;
    }
    if (pred->count() == 0 || label->count() == 0)
      throw CLI::ValidationError("bleu", "needs PRED and LABEL, or --corpus REF HYP");
    for (const std::string* t : {&o->pred, &o->label})
      if (auto bad = find_invalid_utf8(*t))
        throw std::invalid_argument(std::string(t == &o->pred ? "PRED" : "LABEL") + " is not valid UTF-8 (byte " +
                                    std::to_string(*bad) + ")");
    std::printf("%.3f\n", bleu::sentence(o->pred, o->label, o->k));
  });
}

}  // namespace tfm::cli
