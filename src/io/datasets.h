// Registry of the public datasets `tfm data download` knows: where each file lives, its expected checksum and the
// archive members to extract after downloading.
#pragma once
#include <string>
#include <vector>

#include "io/download.h"

namespace tfm {

// After all files are downloaded: extract `member` of the zip `archive` (a RemoteFile::filename of the same
// dataset) to `output` (a name under the same folder).
struct ZipExtract {
  std::string archive;  // e.g. "fra-eng.zip"
  std::string member;   // e.g. "fra-eng/fra.txt"
  std::string output;   // e.g. "fra.txt"
};

struct Dataset {
  std::string name;         // "multi30k", "fra-eng"
  std::string description;  // one line, with the source and license
  std::vector<RemoteFile> files;
  std::vector<ZipExtract> extracts;
};

// All known datasets, sorted by name.
const std::vector<Dataset>& known_datasets();

// The dataset called `name`. Throws std::invalid_argument "unknown dataset 'NAME' (known: fra-eng, multi30k)".
const Dataset& find_dataset(const std::string& name);

// The files of dataset `name` (find_dataset(name).files); same error for an unknown name.
std::vector<RemoteFile> dataset_files(const std::string& name);

// Downloads every file of `ds` into `dir` (download_file: checksum-verified, already-present files skipped), then
// runs its extracts; an extract is redone when its archive was just downloaded or its output is missing.
// Errors: those of download_file and extract_zip_member, unchanged.
void download_dataset(const Dataset& ds, const std::string& dir, const DownloadOptions& opts = {});

}  // namespace tfm
