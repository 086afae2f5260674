// tfm data: list the known public datasets and download them (checksum-verified) into a folder.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "text/datasets.h"

namespace tfm::cli {

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Public datasets: list, download");
  data->require_subcommand(1);

  data->add_subcommand("list", "List the datasets 'tfm data download' knows, with their files")->callback([] {
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
  dl->add_option("--to", o->to, "Target folder (created if missing)")->required();
  dl->add_option("--base-url", o->base_url,
                 "Mirror: fetch BASE_URL/<file name> instead of each file's upstream URL")
      ->envname("TFM_DOWNLOAD_BASE_URL");
  dl->callback([o] {
    DownloadOptions opts;
    opts.base_url = o->base_url;
    download_dataset(find_dataset(o->name), o->to, opts);
  });
}

}  // namespace tfm::cli
