// Replays every reproducer in tests/fixtures/fuzz_regressions/<target>/ through the entry point of that fuzz
// target (fuzz/fuzz_entries.h): each must now end in success or a std::exception with a message, with the
// target's invariants holding. A crash fails the whole binary; a broken invariant fails the test.
#include "test_paths.h"
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "../fuzz/fuzz_entries.h"
#include "test_util.h"

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

// The tokenizer.json reproducers are rejected at load time, and the message says why.
TEST(FuzzRegression, TokenizerJsonIdConflictsNamed) {
  const fs::path dir = kRegressions / "fuzz_vocab_load";
  const std::pair<const char*, const char*> cases[] = {
      {"added_token_id_conflict.json", "added token '[SEP]' has id 103, the vocabulary gives it id 102"},
      {"huge_token_id.json", "largest id is 1000000000000000 but there are only"},
      {"two_tokens_one_id.json", "both have id 7"},
  };
  for (const auto& [file, message] : cases) {
    const std::string path = (dir / file).string();
    try {
      (void)tfm::BertTokenizer::from_tokenizer_json(path);
      ADD_FAILURE() << path << " loaded without error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind(path, 0), 0u) << "message does not start with the path: " << e.what();
    }
  }
}

// The malformed safetensors reproducers are refused with a message that names the file; the well-formed one
// (F16, BF16 and I32 tensors, metadata) reads back its values.
TEST(FuzzRegression, MalformedSafetensorsRefusedNamingTheFile) {
  const fs::path dir = kRegressions / "fuzz_safetensors";
  for (const char* file : {"shorter_than_length_prefix", "header_length_past_end", "header_not_an_object",
                           "header_not_json", "offsets_past_data", "offsets_reversed", "negative_offset",
                           "shape_disagrees_with_bytes", "shape_product_overflows", "negative_dimension",
                           "unknown_dtype", "overlapping_tensors"}) {
    const std::string path = (dir / (std::string(file) + ".safetensors")).string();
    try {
      tfm::SafeTensors st = tfm::SafeTensors::open(path);
      for (const std::string& n : st.names()) (void)st.get(n);
      ADD_FAILURE() << path << " was read without error";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  tfm::SafeTensors st = tfm::SafeTensors::open((dir / "f16_bf16_i32_and_metadata.safetensors").string());
  EXPECT_EQ(st.get("h").f32()[0], 1.5f);
  EXPECT_EQ(st.get("h").f32()[1], INFINITY);
  EXPECT_TRUE(std::isnan(st.get("b").f32()[0]));
  EXPECT_EQ(st.get("b").f32()[1], 1.0f);
  EXPECT_EQ(st.get("i").i64()[0], -7);
}

// A max_len near INT64_MAX made the max_tokens check overflow (UBSan) and, in a normal build, pass.
TEST(FuzzRegression, RecipeConfigHugeMaxLenRejected) {
  const fs::path path = kRegressions / "fuzz_config" / "max_len_overflow.json";
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  try {
    (void)tfm::RecipeConfig::from_json(j, "train_config.json");
    ADD_FAILURE() << path << " accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("must hold at least one pair of max_len (8113264344455046780)"),
              std::string::npos)
        << e.what();
  }
}

// The fuzz_checkpoint reproducers exercise a copy of train_recipe's resume branch; this checks the real one:
// a checkpoint whose state would index the batch order out of range, or whose log rows lack a field that
// write_logs reads, is refused before training starts.
TEST(FuzzRegression, RecipeResumeRejectsOutOfRangeState) {
  if (!fs::exists(tfm::test::data_dir() + "/multi30k/train.en.gz")) GTEST_SKIP() << "Multi30k not found";
  const std::string root = ::testing::TempDir() + "/fuzz_resume_" + std::to_string(::getpid());
  fs::remove_all(root);
  tfm::RecipeConfig c;
  c.data_dir = tfm::test::data_dir();
  c.train_limit = 200;
  c.valid_limit = 8;
  c.vocab_size = 300;
  c.num_hiddens = 8;
  c.num_layers = 1;
  c.num_heads = 2;
  c.ffn_num_hiddens = 8;
  c.max_len = 30;
  c.num_steps = 8;
  c.max_tokens = 600;
  c.epochs = 1;
  c.stop_after_steps = 2;
  tfm::train_recipe(c, root, false, false);
  const std::string ck = root + "/checkpoint.safetensors";
  tfm::SafeTensors good = tfm::SafeTensors::open(ck);
  std::vector<std::pair<std::string, tfm::Tensor>> tensors;
  for (const std::string& n : good.names()) tensors.emplace_back(n, good.get(n).clone());
  const nlohmann::json meta = good.metadata();
  const nlohmann::json state = nlohmann::json::parse(meta["state"].get<std::string>());
  auto resume_with = [&](const std::function<void(nlohmann::json&)>& corrupt) -> std::string {
    nlohmann::json st = state, m = meta;
    corrupt(st);
    m["state"] = st.dump();
    tfm::save_safetensors(ck, tensors, m);
    try {
      tfm::train_recipe(tfm::RecipeConfig{}, root, true, false);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(no error)";
  };
  std::string msg = resume_with([](nlohmann::json& st) { st["batch_pos"] = -3; });
  EXPECT_NE(msg.find("state out of range"), std::string::npos) << msg;
  EXPECT_NE(msg.find("batch_pos -3"), std::string::npos) << msg;
  msg = resume_with([](nlohmann::json& st) {
    st["log"] = nlohmann::json::array({nlohmann::json{{"epoch", 1}, {"step", 2}}});
  });
  EXPECT_NE(msg.find("log row 0 has no number 'train_loss'"), std::string::npos) << msg;
  // A float where an integer belongs was cast to int64 (undefined behaviour, printed as INT64_MIN).
  msg = resume_with([](nlohmann::json& st) { st["step"] = 1e30; });
  EXPECT_NE(msg.find("key 'step' must be an integer, found number 1e+30"), std::string::npos) << msg;
  msg = resume_with([](nlohmann::json& st) { st["elapsed"] = -100.0; });
  EXPECT_NE(msg.find("state out of range"), std::string::npos) << msg;
  // A NaN Adam moment is reported as a corrupt file, not later as a diverged run.
  for (auto& [name, t] : tensors)
    if (name == "optim.exp_avg_sq") t.f32()[3] = std::nanf("");
  msg = resume_with([](nlohmann::json&) {});
  EXPECT_NE(msg.find("tensor 'optim.exp_avg_sq' has a non-finite value at element 3"), std::string::npos) << msg;
  fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegression, ::testing::ValuesIn(tfm::fuzz::kTargets),
                         [](const ::testing::TestParamInfo<tfm::fuzz::Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
