// tfm: the transformer.cpp command-line tool. One subcommand per file in this folder.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "io/hub.h"
#include "tfm/tfm.h"

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
// Commands that run at most one batch (encode, tokenize, convert, ...) skip it: the second start-up costs ~13 ms
// (loading the shared libraries again), a tenth of a one-sentence `tfm encode`, and they have few barriers to
// wait at. The binary is re-executed by its own path, so that the process keeps its name ("tfm", not "exe").
static void default_omp_spin_count(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  const std::string_view cmd = argc > 1 ? argv[1] : "";
  for (const char* brief : {"", "tokenize", "encode", "convert", "bleu", "data", "download", "--version", "--help",
                            "-h", "--help-all"})
    if (cmd == brief) return;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  if (setenv("GOMP_SPINCOUNT", "1000", 1) != 0) return;
  execv(self, argv);
  unsetenv("GOMP_SPINCOUNT");  // the exec failed: go on with libgomp's default, as the environment says
}

// CLI11 reads an argument of the form "[a, b]" as a list of values (its vector syntax), also after "--": "[MASK]"
// reached fill-mask as "MASK" and "[1, 2, 3]" as three texts. Every free-text argument must reach its command byte
// for byte, so such an argument (or the VALUE of --name=VALUE) is marked with a leading \x1f before parsing, which
// CLI11 leaves whole, and every option strips the mark from its values before they are converted. Arguments that
// already start with the mark are marked too, so the mapping is one to one.
static constexpr char kVerbatim = '\x1f';
static bool needs_verbatim_mark(const std::string& s) {
  return s.size() >= 2 && (s[0] == '[' || s[0] == kVerbatim) && s.back() == ']';
}
static std::string mark_verbatim(const std::string& arg) {
  if (needs_verbatim_mark(arg)) return kVerbatim + arg;
  const size_t eq = arg.find('=');
  if (arg.rfind("--", 0) == 0 && eq != std::string::npos && needs_verbatim_mark(arg.substr(eq + 1)))
    return arg.substr(0, eq + 1) + kVerbatim + arg.substr(eq + 1);
  return arg;
}
static void strip_verbatim_marks(CLI::App* app) {
  const CLI::Validator strip(
      [](std::string& s) {
        if (!s.empty() && s[0] == kVerbatim && needs_verbatim_mark(s.substr(1))) s.erase(0, 1);
        return std::string();
      },
      "");
  for (CLI::Option* opt : app->get_options()) opt->transform(strip);
  for (CLI::App* sub : app->get_subcommands({})) strip_verbatim_marks(sub);
}
static std::string without_verbatim_marks(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), kVerbatim), s.end());
  return s;
}

// Every command with --model takes a Hugging Face model id there too (io/hub.h resolve_model): --revision picks
// the branch, tag or commit. The id is resolved (found in the cache, else downloaded) when --model is parsed, so
// the command sees the snapshot folder.
static void add_revision_option(CLI::App* cmd) {
  CLI::Option* model = cmd->get_option_no_throw("--model");
  if (!model) return;
  model->description(model->get_description() + ", or a Hugging Face model id (org/name, or a name the hub kept "
                     "without an organisation, as bert-base-uncased), found in the huggingface_hub cache or "
                     "downloaded into it");
  static std::deque<std::string> values;  // one per command; read back through the option's results
  values.emplace_back();
  cmd->add_option("--revision", values.back(), "With a model id: the branch, tag or commit hash (default: main)");
}
static void resolve_model_ids(CLI::App* cmd) {
  CLI::Option* model = cmd->get_option_no_throw("--model");
  if (!model) return;
  CLI::Option* revision = cmd->get_option("--revision");
  model->transform(CLI::Validator(
      [revision](std::string& s) {
        tfm::hub::HubOptions o;
        if (!revision->results().empty()) o.revision = without_verbatim_marks(revision->results().back());
        s = tfm::hub::resolve_model(s, o);
        return std::string();
      },
      ""));
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
  default_omp_spin_count(argc, argv);
  tfm::cli::set_command_line(argc, argv);
  CLI::App app{"tfm: Transformer encoders and encoder-decoders in C++ (transformer.cpp).\n"
               "Run 'tfm <command> --help' for the options of a command."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every command");
  app.set_version_flag("--version", std::string("tfm ") + tfm::version(), "Print the version and exit");
  tfm::cli::add_tokenize_command(app);
  tfm::cli::add_encode_command(app);
  tfm::cli::add_train_command(app);
  tfm::cli::add_translate_command(app);
  tfm::cli::add_score_command(app);
  tfm::cli::add_bleu_command(app);
  tfm::cli::add_data_command(app);
  tfm::cli::add_embed_command(app);
  tfm::cli::add_search_command(app);
  tfm::cli::add_classify_command(app);
  tfm::cli::add_fill_mask_command(app);
  tfm::cli::add_qa_command(app);
  tfm::cli::add_rerank_command(app);
  tfm::cli::add_convert_command(app);
  tfm::cli::add_serve_command(app);
  tfm::cli::add_download_command(app);
  tfm::cli::add_finetune_command(app);
  tfm::cli::add_langid_command(app);
  // An unknown command is an error, also with --help (CLI11 would print the top-level help and exit 0).
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) known |= sub->get_name() == argv[1];
    if (!known) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
      std::fprintf(stderr, "tfm: error: unknown command '%s' (commands: %s) (see --help)\n", argv[1], names.c_str());
      return 2;
    }
  }
  for (CLI::App* sub : app.get_subcommands({})) add_revision_option(sub);
  strip_verbatim_marks(&app);
  for (CLI::App* sub : app.get_subcommands({})) resolve_model_ids(sub);
  std::vector<std::string> marked(argv, argv + argc);
  for (size_t i = 1; i < marked.size(); ++i) marked[i] = mark_verbatim(marked[i]);
  std::vector<char*> marked_argv;
  for (std::string& a : marked) marked_argv.push_back(a.data());
  try {
    app.parse(argc, marked_argv.data());
    tfm::cli::flush_stdout();
  } catch (const CLI::CallForHelp& e) {
    return exit_with_help(app, e);
  } catch (const CLI::CallForAllHelp& e) {
    return exit_with_help(app, e);
  } catch (const CLI::CallForVersion& e) {
    return exit_with_help(app, e);
  } catch (const CLI::ParseError& e) {
    // One line with the usual prefix; CLI11's own text otherwise blames a missing command for an unknown one.
    std::string what = without_verbatim_marks(e.what());
    std::fprintf(stderr, "tfm: error: %s (see --help)\n", what.c_str());
    return 2;
  } catch (const tfm::cli::ExitStatus& e) {
    std::fflush(stdout);
    return e.code;
  } catch (const std::exception& e) {
    // Under mpirun the other ranks may be waiting for this one: end them all, with the message (rank-prefixed).
    if (tfm::process_group().world_size > 1) tfm::group::abort(1, e.what());
    std::fprintf(stderr, "tfm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
