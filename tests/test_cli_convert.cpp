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

// tfm convert from a folder it wrote: an int8 folder converts to bf16 from its dequantised weights (q * scale per
// output row), and to int8 as stored; no weight keeps a dtype other than the one the metadata names.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/safetensors.h"
#include "models/encoder.h"
#include "run_tfm.h"
#include "test_util.h"

using namespace tfm;
using tfm::test::fixture;
using tfm::test::run_tfm_in;
using tfm::test::TempFolder;

namespace {

float bf16_to_float(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST(CliConvert, Int8FolderConvertsToBf16FromItsDequantisedWeights) {
  TempFolder tmp;
  const std::string int8_dir = tmp.path + "/int8", bf16_dir = tmp.path + "/bf16";
  auto r = run_tfm_in(tmp.path, {"convert", "--model", fixture("bert"), "--dtype", "int8", "--out", int8_dir});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = run_tfm_in(tmp.path, {"convert", "--model", int8_dir, "--dtype", "bf16", "--out", bf16_dir});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.find("converted 0 "), std::string::npos) << r.out;

  auto q = SafeTensors::open(int8_dir + "/model.safetensors");
  auto b = SafeTensors::open(bf16_dir + "/model.safetensors");
  EXPECT_EQ(b.metadata().value("tfm_dtype", ""), "bf16");
  int64_t checked = 0;
  for (const std::string& name : q.names()) {
    if (q.dtype_of(name) != "I8") continue;
    EXPECT_FALSE(b.has(name + "_scale")) << name;
    ASSERT_EQ(b.dtype_of(name), "BF16") << name;
    ASSERT_EQ(b.shape_of(name), q.shape_of(name)) << name;
    const int64_t rows = q.shape_of(name)[0], cols = q.shape_of(name)[1];
    const int8_t* qv = reinterpret_cast<const int8_t*>(q.raw_data(name));
    const float* sc = reinterpret_cast<const float*>(q.raw_data(name + "_scale"));
    const unsigned char* bv = b.raw_data(name);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float want = (float)qv[i] * sc[i / cols];
      // bf16 keeps 8 significant bits: within half a unit in the last place.
      ASSERT_LE(std::fabs(bf16_to_float(bv + 2 * i) - want), std::fabs(want) * (1.0f / 256) + 1e-30f)
          << name << "[" << i << "]";
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
  for (const std::string& name : b.names()) EXPECT_NE(b.dtype_of(name), "I8") << name;

  // The bf16 folder runs and gives what the int8 folder gives, up to bf16 rounding.
  auto io = SafeTensors::open(fixture("bert/io.safetensors"));
  Tensor ids = io.get("input_ids"), tt = io.get("token_type_ids"), mask = io.get("attention_mask");
  Tensor want = load_encoder(int8_dir, ops::ComputeType::F32)->forward(ids, tt, mask).last_hidden_state;
  Tensor got = load_encoder(bf16_dir, ops::ComputeType::F32)->forward(ids, tt, mask).last_hidden_state;
  ASSERT_EQ(got.shape(), want.shape());
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    num += std::fabs(got.f32()[i] - want.f32()[i]);
    den += std::fabs(want.f32()[i]);
  }
  EXPECT_LT(num / den, 0.02);
}

TEST(CliConvert, Int8FolderToInt8CopiesTheStoredWeights) {
  TempFolder tmp;
  const std::string a = tmp.path + "/a", b = tmp.path + "/b";
  ASSERT_EQ(run_tfm_in(tmp.path, {"convert", "--model", fixture("bert"), "--dtype", "int8", "--out", a}).exit_code, 0);
  auto r = run_tfm_in(tmp.path, {"convert", "--model", a, "--dtype", "int8", "--out", b});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("already int8"), std::string::npos) << r.out;
  auto sa = SafeTensors::open(a + "/model.safetensors"), sb = SafeTensors::open(b + "/model.safetensors");
  ASSERT_EQ(sa.names().size(), sb.names().size());
  for (const std::string& name : sa.names()) {
    ASSERT_TRUE(sb.has(name)) << name;
    EXPECT_EQ(sb.dtype_of(name), sa.dtype_of(name)) << name;
    const int64_t n = shape_numel(sa.shape_of(name));
    const size_t bytes = sa.dtype_of(name) == "I8" ? n : 4 * n;
    EXPECT_EQ(std::memcmp(sa.raw_data(name), sb.raw_data(name), bytes), 0) << name;
  }
}
