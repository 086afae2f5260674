// tfm: the transformer.cpp command-line tool. One subcommand per file in this folder.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "cli_util.h"
#include "commands.h"

// A closed fd 0/1/2 would be reused by the next open() (a model file, an output .npy), and printing would then
// write into that file. Each closed one is reopened read-only on /dev/null: reads see end of input, writes still
// fail (EBADF), so flush_stdout reports a closed stdout.
static void keep_standard_fds_reserved() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int n = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (n >= 0 && n != fd) {
      ::dup2(n, fd);
      ::close(n);
    } else if (n == fd) {
      ::fcntl(fd, F_SETFD, 0);  // keep it across the exec below
    }
  }
}

// libgomp's default spins ~300,000 times at each barrier before sleeping. When another program holds a core,
// the spinning thread burns the slice its peer needs: the d2l model (thousands of tiny parallel regions) trained
// at ~4,000 tokens/s on 2 threads instead of ~75,000. A spin count of 1,000 keeps ~93% of the idle speed and is
// ~7x faster under contention; fully passive waiting costs 40% when idle (BENCHMARKS.md). libgomp reads the
// setting once, in its initializer, before main (and libc resets the environment after any earlier hook), so
// tfm re-executes itself once with the setting. Values the user set are kept; if the exec fails, tfm goes on.
static void default_omp_spin_count(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("GOMP_SPINCOUNT", "1000", 1) != 0) return;
  execv("/proc/self/exe", argv);
}

// Help text goes to stdout too: a failed write is an error there as well.
static int exit_with_help(const CLI::App& app, const CLI::Error& e) {
  int rc = app.exit(e);
  try {
    tfm::cli::flush_stdout();
  } catch (const std::exception& err) {
    std::fprintf(stderr, "tfm: error: %s\n", err.what());
    return 1;
  }
  return rc;
}

int main(int argc, char** argv) {
  keep_standard_fds_reserved();
  default_omp_spin_count(argv);
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
  tfm::cli::add_embed_command(app);
  tfm::cli::add_classify_command(app);
  tfm::cli::add_fill_mask_command(app);
  tfm::cli::add_rerank_command(app);
  tfm::cli::add_convert_command(app);
  tfm::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
    tfm::cli::flush_stdout();
  } catch (const CLI::CallForHelp& e) {
    return exit_with_help(app, e);
  } catch (const CLI::CallForAllHelp& e) {
    return exit_with_help(app, e);
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
