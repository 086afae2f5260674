// tfm bleu: d2l's sentence BLEU of a prediction against a label.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "eval/bleu.h"

namespace tfm::cli {

void add_bleu_command(CLI::App& app) {
  struct Opts {
    std::string pred, label;
    int k = 2;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "bleu", "d2l BLEU of PRED against LABEL (space-separated tokens): exp(min(0, 1 - len_label/len_pred)) * "
              "prod_n p_n^(1/2^n), n = 1..k; 0 when PRED is empty or shorter than k tokens");
  cmd->add_option("pred", o->pred, "Predicted sentence")->required();
  cmd->add_option("label", o->label, "Reference sentence")->required();
  cmd->add_option("--k", o->k, "Longest n-gram")->capture_default_str()->check(CLI::Range(1, 16));
  cmd->callback([o] { std::printf("%.3f\n", bleu_d2l(o->pred, o->label, o->k)); });
}

}  // namespace tfm::cli
