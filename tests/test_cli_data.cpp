// `tfm data download` from a local folder or file:// mirror: checksums verified, nothing left behind by a failed
// download. Expected files are the mirror's own.
#include "cli_util.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

// data download from a local folder or file:// mirror (checksum-verified), and a failed download leaves no empty
// --to folder behind.
TEST(CliData, DownloadFromLocalMirrorAndFailedDownloadLeavesNoFolder) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string mirror = data_dir() + "/multi30k";
  TfmRun r = tfm(dir, {"data", "download", "multi30k", "--base-url", "file://" + mirror, "--to", dir + "/a"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* f : {"train.en.gz", "val.fr.gz", "test_2016_flickr.de.gz"})
    EXPECT_EQ(slurp(dir + "/a/" + f), slurp(mirror + "/" + f)) << f;
  // A mirror file whose checksum differs is refused.
  fs::create_directories(dir + "/badmirror");
  for (const auto& e : fs::directory_iterator(mirror)) fs::copy_file(e.path(), dir + "/badmirror/" + e.path().filename().string());
  fs::permissions(dir + "/badmirror/val.en.gz", fs::perms::owner_write, fs::perm_options::add);
  spit(dir + "/badmirror/val.en.gz", "not the file");
  r = tfm(dir, {"data", "download", "multi30k", "--base-url", dir + "/badmirror", "--to", dir + "/b/c"});
  expect_last_error(r, "val.en.gz: SHA-256 mismatch");
  // A mirror folder without the files: error, and the new --to folders (b and b/c) removed again... except b/c
  // holds the files that did download before the failure, so try a mirror that has none.
  r = tfm(dir, {"data", "download", "multi30k", "--base-url", dir + "/empty_mirror", "--to", dir + "/d/e"});
  expect_last_error(r, "cannot read '" + dir + "/empty_mirror/train.en.gz' (local mirror)");
  EXPECT_FALSE(fs::exists(dir + "/d")) << "a failed download left an empty --to folder";
}

}  // namespace
}  // namespace tfm::test
