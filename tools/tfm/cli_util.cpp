// Option helpers shared by the subcommands (declared in cli_util.h): --threads, validators with plain messages,
// checked writes to stdout.
#include "cli_util.h"
#include "io/text_file.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/threading.h"
#include "io/safetensors.h"
#include "tfm/encoder.h"

namespace tfm::cli {

namespace {
std::string g_command_line;

// 'it'"'"'s' style quoting for a POSIX shell; plain words stay as they are.
std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+=./,:@%") ==
                        std::string::npos)
    return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\"'\"'") : std::string(1, c);
  return q + "'";
}
}  // namespace

void set_command_line(int argc, char** argv) {
  g_command_line = "tfm";
  for (int i = 1; i < argc; ++i) g_command_line += " " + shell_quote(argv[i]);
}

const std::string& command_line() { return g_command_line; }

void watch_stop_signals(void (*request_stop)(int), const std::string& out_dir) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, request_stop, out_dir] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) return;
    request_stop(sig);
    if (sigwait(&set, &sig) != 0) return;
    std::fprintf(stderr, "\n%s again: stopping at once\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    // A write in progress leaves its temp file (the target keeps its previous contents): remove it.
    const std::string suffix = ".tmp." + std::to_string(::getpid());
    std::error_code ec;
    for (std::filesystem::directory_iterator it(out_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        std::filesystem::remove(it->path(), ec);
    }
    std::_Exit(128 + sig);
  }).detach();
}

void add_threads_option(CLI::App* cmd, int& threads, const char* help) {
  cmd->add_option("--threads", threads, help ? help : "Worker threads for kernels and GEMM (default: all cores)")
      ->check(whole_range(1, 1024));
  cmd->parse_complete_callback([&threads] { set_num_threads(threads); });
}

void add_dtype_option(CLI::App* cmd, std::string& dtype) {
  cmd->add_option("--dtype", dtype,
                  "Compute type of the Linear layers: fp32, bf16 (weights and GEMM inputs bf16, fp32 accumulation) "
                  "or int8 (dynamic quantisation); LayerNorm, softmax, residuals and task heads stay fp32. Default: "
                  "as the folder stores them (int8 for a 'tfm convert --dtype int8' folder, which fp32 / bf16 "
                  "dequantise; else fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}));
}

namespace {
// Parses the whole string as a finite number; nullopt for "abc", "1x", "nan", "inf".
std::optional<double> parse_finite(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}
std::string fmt(double v) {
  std::ostringstream o;
  o << std::setprecision(15) << v;  // "67108864", not "6.71089e+07"
  return o.str();
}
CLI::Validator number_check(const std::string& desc, std::function<bool(double)> ok, const std::string& want) {
  return CLI::Validator(
      [ok, want](std::string& s) -> std::string {
        std::optional<double> v = parse_finite(s);
        if (!v || !ok(*v)) return "must be " + want + ", got '" + s + "'";
        return "";
      },
      desc);
}
}  // namespace

CLI::Validator in_range(double lo, double hi) {
  return number_check("[" + fmt(lo) + " - " + fmt(hi) + "]", [=](double v) { return v >= lo && v <= hi; },
                      "a number from " + fmt(lo) + " to " + fmt(hi));
}
CLI::Validator whole_range(int64_t lo, int64_t hi) {
  const std::string want = "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, want](std::string& s) -> std::string {
        // Digits only (optional '-'): "1e9" or "2.5" would pass a double check and then fail CLI11's conversion
        // with a message that names no range.
        const size_t start = !s.empty() && s[0] == '-' ? 1 : 0;
        bool ok = s.size() > start && s.size() - start <= 18 && s.find_first_not_of("0123456789", start) == std::string::npos;
        if (ok) {
          const int64_t v = std::stoll(s);
          ok = v >= lo && v <= hi;
        }
        return ok ? "" : "must be " + want + ", got '" + s + "'";
      },
      "[" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}
CLI::Validator pooling_mode() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          Encoder::check_pooling(s);
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
        return "";
      },
      "MODE[+MODE...]");
}
CLI::Validator positive_up_to(double hi) {
  return number_check("(0 - " + fmt(hi) + "]", [=](double v) { return v > 0 && v <= hi; },
                      "a number > 0 and <= " + fmt(hi));
}
CLI::Validator positive() {
  return number_check("> 0", [](double v) { return v > 0; }, "a positive number");
}
CLI::Validator non_negative() {
  return number_check(">= 0", [](double v) { return v >= 0; }, "a number >= 0");
}
void require_utf8(const char* option, const std::string& value) {
  if (auto bad = find_invalid_utf8(value))
    throw CLI::ValidationError(std::string(option) + ": invalid UTF-8 at byte offset " + std::to_string(*bad));
}

CLI::Validator file_suffix(std::vector<std::string> suffixes) {
  std::string names;
  for (const std::string& s : suffixes) names += (names.empty() ? "" : " or ") + s;
  return CLI::Validator(
      [suffixes, names](std::string& v) -> std::string {
        for (const std::string& s : suffixes)
          if (v.size() > s.size() && v.compare(v.size() - s.size(), s.size(), s) == 0) return "";
        struct stat st;
        if (::stat(v.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return "";  // /dev/stdout
        return "must end in " + names + ", got '" + v + "'";
      },
      "FILE" + names);
}

CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        bool digits = !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
        if (!digits || (s.size() == 20 && s > "18446744073709551615"))
          return "must be a whole number from 0 to 18446744073709551615, got '" + s + "'";
        return "";
      },
      "0 - 2^64-1");
}

std::string format_ids(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

void flush_stdout() {
  errno = 0;
  std::cout.flush();
  const bool cpp_failed = !std::cout.good();
  const int rc = std::fflush(stdout);
  const int err = errno;
  if (rc != 0 || std::ferror(stdout) || cpp_failed) {
    std::cout.clear();
    std::clearerr(stdout);
    throw std::runtime_error(std::string("cannot write to standard output") +
                             (err ? std::string(": ") + std::strerror(err) : std::string()) +
                             (err == EBADF ? " (is stdout closed?)" : ""));
  }
}

}  // namespace tfm::cli
