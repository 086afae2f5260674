// Subcommands of the tfm CLI: each add_* registers its options and its callback on the app.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace tfm::cli {

void add_tokenize_command(CLI::App& app);
void add_encode_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_translate_command(CLI::App& app);
void add_bleu_command(CLI::App& app);
void add_data_command(CLI::App& app);

// Adds --threads to a subcommand (default: all cores) and applies it before the callback runs.
void add_threads_option(CLI::App* cmd, int& threads);
// "[1, 2, 3]"
std::string format_ids(const std::vector<int64_t>& ids);

}  // namespace tfm::cli
