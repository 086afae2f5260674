// Subcommands of the tfm CLI, one file each (cmd_*.cpp): each add_* registers its options and its callback on the
// app. main.cpp calls them; the helpers they share are in cli_util.h.
#pragma once
#include <CLI/CLI.hpp>

namespace tfm::cli {

void add_tokenize_command(CLI::App& app);
void add_encode_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_translate_command(CLI::App& app);
void add_score_command(CLI::App& app);
void add_bleu_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_embed_command(CLI::App& app);
void add_classify_command(CLI::App& app);
void add_fill_mask_command(CLI::App& app);
void add_qa_command(CLI::App& app);
void add_rerank_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_download_command(CLI::App& app);
void add_finetune_command(CLI::App& app);
void add_langid_command(CLI::App& app);
void add_search_command(CLI::App& app);

}  // namespace tfm::cli
