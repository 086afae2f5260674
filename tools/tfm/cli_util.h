// Helpers the tfm subcommands share: --threads, option validators, checked writes to stdout (cli_util.cpp).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace tfm::cli {

// Adds --threads to a subcommand (default: all cores) and applies it before the callback runs.
// `help` replaces the description for commands that run on one thread (bleu, data) and accept it for uniformity.
void add_threads_option(CLI::App* cmd, int& threads, const char* help = nullptr);
// --dtype fp32|bf16|int8 of the encoder commands (encode, embed, classify, fill-mask, rerank): the compute type of
// the encoder's Linear layers. Left empty, the folder's stored type applies (int8 for a `tfm convert --dtype int8`
// folder, which fp32 / bf16 dequantise; else fp32).
void add_dtype_option(CLI::App* cmd, std::string& dtype);
// Option validators with plain messages. CLI11's own accept NaN and print the whole double range
// ("not in range 0.000000 to 1797693...").
// A number in [lo, hi] (finite): "must be a number from 0 to 5, got nan".
CLI::Validator in_range(double lo, double hi);
// A whole number (digits, optional '-') in [lo, hi], for integer options: "must be a whole number from 1 to 100000,
// got '1e9'".
CLI::Validator whole_range(int64_t lo, int64_t hi);
// A pooling as tfm::Encoder takes it (cls, mean, max, mean_sqrt_len, weightedmean, lasttoken, or several joined by
// '+'), checked by tfm::Encoder::check_pooling: embed and serve accept the same modes.
CLI::Validator pooling_mode();
// A finite number in (0, hi] (learning rates).
CLI::Validator positive_up_to(double hi);
// A finite number > 0 (learning rates) or, for integers, >= 1: "must be positive, got 0".
CLI::Validator positive();
// A finite number >= 0.
CLI::Validator non_negative();
// A whole number in [0, 2^64): seeds (CLI11 would turn -1 into 18446744073709551615).
CLI::Validator seed_value();
// A file name ending in one of `suffixes` (the format written follows it): "must end in .npy, got 'x.txt'".
// A device or pipe that exists (/dev/stdout) is taken as it is.
CLI::Validator file_suffix(std::vector<std::string> suffixes);
// Throws CLI::ValidationError "<option>: invalid UTF-8 at byte offset N" when an option's text is not UTF-8.
void require_utf8(const char* option, const std::string& value);
// "[1, 2, 3]"
std::string format_ids(const std::vector<int64_t>& ids);
// Flushes stdout (C++ and C streams) and throws std::runtime_error "cannot write to standard output: <reason>" when
// any write to it failed (a full disk, /dev/full, a closed stdout): output that was lost must not exit 0. main()
// calls it after every command; long-running commands also call it after each chunk of output to stop early.
void flush_stdout();

// The command line tfm was started with, each argument shell-quoted where needed ("tfm finetune --model m ..."),
// for messages that tell the user what to run next. set_command_line is called once, by main().
void set_command_line(int argc, char** argv);
const std::string& command_line();

// Ctrl-C / SIGTERM during a long run (training): blocks SIGINT and SIGTERM in the calling thread, so that every
// thread started after it inherits the mask (a handler run on a kernel's stack corrupted its heap), and takes them
// in a watcher thread with sigwait. The first calls request_stop(signo), which asks the run to stop at its next
// step boundary; a second removes the temp files of this process's atomic writes in `out_dir`
// ("<name>.tmp.<pid>") and ends tfm at once with exit status 128 + signo. Call before any worker thread starts.
void watch_stop_signals(void (*request_stop)(int), const std::string& out_dir);

// Thrown by a command to end tfm with this exit status after it has said why (e.g. 130 after a Ctrl-C).
struct ExitStatus {
  int code;
};

}  // namespace tfm::cli
