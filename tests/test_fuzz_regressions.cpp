// Replays every reproducer in tests/fixtures/fuzz_regressions/<target>/ through the entry point of that fuzz
// target (fuzz/fuzz_entries.h): each must now end in success or a std::exception with a message, with the
// target's invariants holding. A crash fails the whole binary; a broken invariant fails the test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "../fuzz/fuzz_entries.h"

namespace {

namespace fs = std::filesystem;

#ifdef TFM_SOURCE_DIR
const fs::path kRegressions = fs::path(TFM_SOURCE_DIR) / "tests/fixtures/fuzz_regressions";
#else
const fs::path kRegressions = "tests/fixtures/fuzz_regressions";
#endif

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class FuzzRegression : public ::testing::TestWithParam<tfm::fuzz::Target> {};

TEST_P(FuzzRegression, ReplaysWithoutCrash) {
  const tfm::fuzz::Target& target = GetParam();
  const fs::path dir = kRegressions / target.name;
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no reproducers in " << dir;
  if (target.entry == tfm::fuzz::tokenizer_entry && tfm::fuzz::bert_tokenizer() == nullptr)
    GTEST_SKIP() << "bert-base-uncased not found under $TFM_DATA_DIR";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    std::vector<uint8_t> bytes = read_bytes(f);
    try {
      target.entry(bytes.data(), bytes.size());
    } catch (const tfm::fuzz::InvariantViolation& v) {
      ADD_FAILURE() << f << ": " << v.what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegression, ::testing::ValuesIn(tfm::fuzz::kTargets),
                         [](const ::testing::TestParamInfo<tfm::fuzz::Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
