// What a new user following README.md hit (helper `newuser`): each test runs the `tfm` binary as the README does
// and checks the behaviour that was wrong. Expected values come from the fixtures' own files (line counts, folder
// contents) and from the messages the commands are meant to give, not from the output under test.
#include "test_paths.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr together
};

Result tfm_run(const std::string& args) {
  Result r;
  const std::string cmd = std::string(TFM_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

fs::path fresh_tmp(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("tfm_newuser_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// `tfm convert` on a sentence-transformers folder copied only the top-level files, so `tfm embed` on the result
// failed with "1_Pooling/config.json: cannot open". The module folders must come along.
TEST(NewUser, ConvertKeepsSentenceTransformerModules) {
  const fs::path tmp = fresh_tmp("convert");
  for (const char* model : {"st_mean", "st_multi"}) {
    const std::string out = (tmp / model).string();
    Result c = tfm_run("convert --model " + fixture(model) + " --dtype bf16 --out " + out);
    ASSERT_EQ(c.code, 0) << c.out;
    for (const auto& e : fs::recursive_directory_iterator(fixture(model))) {
      const fs::path rel = fs::relative(e.path(), fixture(model));
      EXPECT_TRUE(fs::exists(fs::path(out) / rel)) << model << ": " << rel;
    }
    const std::string vec = (tmp / (std::string(model) + ".jsonl")).string();
    Result e = tfm_run("embed --quiet --model " + out + " --input " + fixture("st_mean/sentences.txt") +
                       " --output " + vec);
    ASSERT_EQ(e.code, 0) << e.out;
    EXPECT_EQ(count_lines(vec), count_lines(fixture("st_mean/sentences.txt")));
  }
  fs::remove_all(tmp);
}

// A translation folder given to `embed` / `convert`, or a folder that does not exist, is named as such instead of
// "has no modules.json" or "missing required key 'vocab_size'".
TEST(NewUser, EmbedAndConvertNameTheWrongFolder) {
  const fs::path tmp = fresh_tmp("wrong");
  const std::string input = fixture("st_mean/sentences.txt"), out = (tmp / "v.npy").string();
  Result a = tfm_run("embed --model " + fixture("d2l_trained") + " --input " + input + " -o " + out);
  EXPECT_NE(a.code, 0);
  EXPECT_NE(a.out.find("transformer_seq2seq"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("tfm translate"), std::string::npos) << a.out;
  Result b = tfm_run("embed --model " + fixture("d2l_trained") + " --pooling mean --input " + input + " -o " + out);
  EXPECT_NE(b.code, 0);
  EXPECT_NE(b.out.find("transformer_seq2seq"), std::string::npos) << b.out;
  Result c = tfm_run("embed --model " + (tmp / "nonexistent").string() + " --input " + input + " -o " + out);
  EXPECT_NE(c.code, 0);
  // Issue 26 item 6: the message of Python's tfm.Encoder (python/tests/test_encoder.py), not a CLI-only wording.
  EXPECT_NE(c.out.find("nonexistent: no such model folder"), std::string::npos) << c.out;
  Result e = tfm_run("embed --model " + input + " --input " + input + " -o " + out);
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.out.find("sentences.txt: not a folder (expected a model folder)"), std::string::npos) << e.out;
  Result d = tfm_run("convert --model " + fixture("d2l_trained") + " --dtype bf16 --out " + (tmp / "c").string());
  EXPECT_NE(d.code, 0);
  EXPECT_NE(d.out.find("transformer_seq2seq"), std::string::npos) << d.out;
  EXPECT_FALSE(fs::exists(tmp / "c"));
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(tmp);
}

// Range messages print whole numbers in full: "from 1 to 67108864", not "from 1 to 6.71089e+07".
TEST(NewUser, RangeMessagesPrintWholeNumbers) {
  Result r = tfm_run("embed --model " + fixture("st_mean") + " --input " + fixture("st_mean/sentences.txt") +
                     " -o /dev/null.npy --batch-tokens 0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("from 1 to 67108864"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("e+"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tfm::test
