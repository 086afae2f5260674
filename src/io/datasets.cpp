#include "io/datasets.h"

#include <sys/stat.h>

#include <cstdio>
#include <stdexcept>

namespace tfm {

namespace {

// Multi30k task 1, raw (untokenized, cased) text: github.com/multi30k/dataset, data/task1/raw/ (research use;
// cite Elliott et al. 2016). The SHA-256 values were computed (sha256sum) from copies of these exact upstream
// files in the project's shared data folder (../shared/data/multi30k), not fetched from the network: the
// development machines reach no public host. Upstream publishes no checksums.
constexpr const char* kMulti30kBase = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/";

Dataset multi30k() {
  struct Entry {
    const char* filename;
    const char* sha256;
  };
  const Entry entries[] = {
      {"train.en.gz", "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"},
      {"train.de.gz", "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"},
      {"train.fr.gz", "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c"},
      {"val.en.gz", "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"},
      {"val.de.gz", "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"},
      {"val.fr.gz", "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9"},
      {"test_2016_flickr.en.gz", "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"},
      {"test_2016_flickr.de.gz", "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"},
      {"test_2016_flickr.fr.gz", "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90"},
  };
  Dataset ds{"multi30k",
             "Multi30k task 1 raw text, {train,val,test_2016_flickr}.{en,de,fr}.gz (29,000 / 1,014 / 1,000 lines); "
             "github.com/multi30k/dataset, research use",
             {},
             {}};
  for (const Entry& e : entries) ds.files.push_back({std::string(kMulti30kBase) + e.filename, e.filename, e.sha256, ""});
  return ds;
}

// Tatoeba English-French pairs as d2l.ai distributes them: d2l's DATA_HUB['fra-eng'] = (DATA_URL + 'fra-eng.zip',
// SHA-1 '94646ad1522d915e7b0f9296181140edcf86a4f5') with DATA_URL the d2l-data S3 bucket (d2l uses http://; the
// bucket serves the same object over https). The zip holds fra-eng/fra.txt ("English<TAB>French<TAB>attribution"
// lines), which d2l's read_data_nmt reads; it is extracted to DIR/fra.txt. Tatoeba / manythings.org, CC-BY 2.0 FR.
Dataset fra_eng() {
  return Dataset{"fra-eng",
                 "Tatoeba English-French sentence pairs (d2l.ai fra-eng.zip, extracted to fra.txt); CC-BY 2.0 FR",
                 {{"https://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip", "fra-eng.zip", "",
                   "94646ad1522d915e7b0f9296181140edcf86a4f5"}},
                 {{"fra-eng.zip", "fra-eng/fra.txt", "fra.txt"}}};
}

std::string known_names() {
  std::string s;
  for (const Dataset& d : known_datasets()) s += (s.empty() ? "" : ", ") + d.name;
  return s;
}

}  // namespace

const std::vector<Dataset>& known_datasets() {
  static const std::vector<Dataset> all = {fra_eng(), multi30k()};
  return all;
}

const Dataset& find_dataset(const std::string& name) {
  for (const Dataset& d : known_datasets())
    if (d.name == name) return d;
  throw std::invalid_argument("unknown dataset '" + name + "' (known: " + known_names() + ")");
}

std::vector<RemoteFile> dataset_files(const std::string& name) { return find_dataset(name).files; }

void download_dataset(const Dataset& ds, const std::string& dir, const DownloadOptions& opts) {
  std::vector<std::string> fresh;
  for (const RemoteFile& f : ds.files)
    if (download_file(f, dir, opts) == DownloadStatus::downloaded) fresh.push_back(f.filename);
  for (const ZipExtract& x : ds.extracts) {
    const std::string out = dir + "/" + x.output;
    struct stat st;
    bool archive_new = false;
    for (const auto& n : fresh) archive_new = archive_new || n == x.archive;
    if (!archive_new && ::stat(out.c_str(), &st) == 0) {
      if (opts.progress) std::fprintf(stderr, "%s: already extracted\n", out.c_str());
      continue;
    }
    extract_zip_member(dir + "/" + x.archive, x.member, out);
    if (opts.progress) std::fprintf(stderr, "%s: extracted %s\n", out.c_str(), x.member.c_str());
  }
}

}  // namespace tfm
