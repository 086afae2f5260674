// tfm data: list the known public datasets and download them (checksum-verified) into a folder.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli_util.h"
#include "commands.h"
#include "io/datasets.h"

namespace tfm::cli {

namespace {
// The folders of `dir` and its parents that do not exist yet (deepest first), so that a failed download can
// remove the ones it created: a failed first download must not leave an empty --to folder behind.
std::vector<std::filesystem::path> missing_folders(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
    if (p.filename().empty()) continue;  // "a/b/" normalises to "a/b/" with an empty last component
    if (fs::exists(fs::symlink_status(p, ec))) break;
    out.push_back(p);
  }
  return out;
}
}  // namespace

void add_data_command(CLI::App& app) {
  auto threads = std::make_shared<int>(0);  // accepted as by every command (downloads use one thread)
  CLI::App* data = app.add_subcommand("data", "Public datasets: list, download");
  data->require_subcommand(1);

  CLI::App* list = data->add_subcommand("list", "List the datasets 'tfm data download' knows, with their files");
  add_threads_option(list, *threads, "Accepted as by every command; data runs on one thread");
  list->callback([threads] {  // the callbacks own `threads`: --threads writes it after this function returns
    for (const Dataset& d : known_datasets()) {
      std::printf("%s: %s\n", d.name.c_str(), d.description.c_str());
      for (const RemoteFile& f : d.files) std::printf("  %s  %s\n", f.filename.c_str(), f.url.c_str());
    }
  });

  struct Opts {
    std::string name, to, base_url;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* dl = data->add_subcommand(
      "download", "Download dataset NAME into DIR: files are written as DIR/<file>.part, checked against the "
                  "registry's SHA-256/SHA-1 and renamed; files already present with the right checksum are skipped");
  dl->add_option("name", o->name, "Dataset name (see 'tfm data list')")->required();
  dl->add_option("--to", o->to, "Target folder (created if missing; removed again if the download fails)")
      ->required();
  dl->add_option("--base-url", o->base_url,
                 "Mirror: fetch BASE_URL/<file name> instead of each file's upstream URL; an http(s):// URL, a "
                 "file:// URL or a local folder")
      ->envname("TFM_DOWNLOAD_BASE_URL");
  add_threads_option(dl, *threads, "Accepted as by every command; downloads run on one thread");
  dl->callback([o, threads] {
    DownloadOptions opts;
    opts.base_url = o->base_url;
    const Dataset& ds = find_dataset(o->name);
    const std::vector<std::filesystem::path> created = missing_folders(o->to);
    try {
      download_dataset(ds, o->to, opts);
    } catch (...) {
      std::error_code ec;
      for (const auto& p : created) std::filesystem::remove(p, ec);  // only empty folders are removed
      throw;
    }
  });
}

}  // namespace tfm::cli
