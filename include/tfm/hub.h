/// @file tfm/hub.h
/// Hugging Face hub model ids: what every model constructor does with a name that is not a folder, and the
/// download `tfm download` runs. The cache is huggingface_hub's ($HF_HUB_CACHE, else $HF_HOME/hub, else
/// ~/.cache/huggingface/hub; models--org--name/refs/<revision>, snapshots/<commit>/ linking into blobs/), so a model
/// downloaded by either is found by the other. HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE=1 are read as
/// huggingface_hub reads them.
#pragma once
#include <string>
#include <vector>

namespace tfm {

struct HubDownloadOptions {
  std::string revision;              ///< branch, tag or commit hash; "" = main
  std::vector<std::string> include;  ///< fnmatch globs on repository paths; empty = the files tfm reads
  std::string cache_dir;             ///< "" = the environment's
  bool progress = true;              ///< a progress bar per file on stderr
};

/// An existing path is returned unchanged; a model id ("org/name") gives its snapshot folder in the cache,
/// downloaded first when it is not there (unless HF_HUB_OFFLINE=1). Throws tfm::FileNotFoundError naming the id
/// and the cache folder when offline and not cached; std::runtime_error naming the id for a download that fails
/// (401 gated or private: set HF_TOKEN; 404 no such model, revision or file; no network).
std::string resolve_model(const std::string& path_or_id, const std::string& revision = "");

/// Downloads model `id` into the cache (files already there are not fetched again) and returns its snapshot
/// folder. Errors as resolve_model; std::invalid_argument when `id` is not of the form org/name.
std::string download_model(const std::string& id, const HubDownloadOptions& options = {});

}  // namespace tfm
