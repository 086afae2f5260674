// tfm: the transformer.cpp command-line tool. One subcommand per file in this folder.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "core/threading.h"

namespace tfm::cli {

void add_threads_option(CLI::App* cmd, int& threads) {
  cmd->add_option("--threads", threads, "Worker threads for kernels and GEMM (default: all cores)")
      ->check(CLI::Range(1, 1024));
  cmd->parse_complete_callback([&threads] { set_num_threads(threads); });
}

std::string format_ids(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace tfm::cli

int main(int argc, char** argv) {
  CLI::App app{"tfm: Transformer encoders and encoder-decoders in C++ (transformer.cpp).\n"
               "Run 'tfm <command> --help' for the options of a command."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every command");
  tfm::cli::add_tokenize_command(app);
  tfm::cli::add_encode_command(app);
  tfm::cli::add_train_command(app);
  tfm::cli::add_translate_command(app);
  tfm::cli::add_bleu_command(app);
  tfm::cli::add_data_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line with the usual prefix; CLI11's own text otherwise blames a missing command for an unknown one.
    std::string what = e.what();
    if (argc > 1 && argv[1][0] != '-') {
      bool known = false;
      for (const CLI::App* sub : app.get_subcommands({})) known |= sub->get_name() == argv[1];
      if (!known) {
        std::string names;
        for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
        what = std::string("unknown command '") + argv[1] + "' (commands: " + names + ")";
      }
    }
    std::fprintf(stderr, "tfm: error: %s (see --help)\n", what.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tfm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
