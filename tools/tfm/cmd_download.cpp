// tfm download: fetches a Hugging Face model into the huggingface_hub cache (io/hub.h), where every --model finds it.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "io/hub.h"

namespace tfm::cli {

void add_download_command(CLI::App& app) {
  struct Opts {
    std::string id, revision, cache_dir;
    std::vector<std::string> include;
    bool quiet = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "download",
      "Download a model from the Hugging Face hub (or the mirror in $HF_ENDPOINT) into the huggingface_hub cache "
      "($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) and print its snapshot folder. By default "
      "the files tfm reads: config.json, the weights (model.safetensors or pytorch_model.bin, sharded or not), the "
      "tokenizer files and the sentence-transformers modules. Files already cached are not fetched again; a cut "
      "download resumes. Gated or private models need a token in $HF_TOKEN");
  cmd->add_option("id", o->id, "Model id, e.g. sentence-transformers/all-MiniLM-L6-v2")->required();
  cmd->add_option("--revision", o->revision, "Branch, tag or commit hash (default: main)");
  cmd->add_option("--include", o->include,
                  "Download only the repository files matching this glob (fnmatch, e.g. '*.json'); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--cache-dir", o->cache_dir, "Cache folder instead of the environment's");
  cmd->add_flag("--quiet", o->quiet, "No progress on stderr");
  add_threads_option(cmd, o->threads, "Accepted as by every command; files download one after the other");
  cmd->callback([o] {
    hub::HubOptions h;
    h.revision = o->revision;
    h.cache_dir = o->cache_dir;
    h.include = o->include;
    h.progress = !o->quiet;
    hub::DownloadSummary s = hub::download_model(o->id, h);
    if (!o->quiet)
      std::fprintf(stderr, "%s: %d file(s) downloaded, %d already cached (commit %s)\n", o->id.c_str(), s.downloaded,
                   s.cached, s.commit.c_str());
    std::printf("%s\n", s.snapshot.c_str());
  });
}

}  // namespace tfm::cli
