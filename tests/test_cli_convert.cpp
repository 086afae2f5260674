// `tfm convert` on sentence-transformers folders: the module folders come along and `tfm embed` reads the result.
// Expected values come from the fixture folders (file lists, line counts).
#include "cli_util.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

// `tfm convert` on a sentence-transformers folder copied only the top-level files, so `tfm embed` on the result
// failed with "1_Pooling/config.json: cannot open". The module folders must come along.
TEST(CliConvert, KeepsSentenceTransformerModules) {
  const fs::path tmp = fresh_tmp("convert");
  for (const char* model : {"st_mean", "st_multi"}) {
    const std::string out = (tmp / model).string();
    ShellRun c = tfm_run("convert --model " + fixture(model) + " --dtype bf16 --out " + out);
    ASSERT_EQ(c.code, 0) << c.out;
    for (const auto& e : fs::recursive_directory_iterator(fixture(model))) {
      const fs::path rel = fs::relative(e.path(), fixture(model));
      EXPECT_TRUE(fs::exists(fs::path(out) / rel)) << model << ": " << rel;
    }
    const std::string vec = (tmp / (std::string(model) + ".jsonl")).string();
    ShellRun e = tfm_run("embed --quiet --model " + out + " --input " + fixture("st_mean/sentences.txt") +
                       " --output " + vec);
    ASSERT_EQ(e.code, 0) << e.out;
    EXPECT_EQ(count_lines(vec), count_lines(fixture("st_mean/sentences.txt")));
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace tfm::test
