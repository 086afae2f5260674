// pytorch_model.bin read by the restricted unpickler (io/torch_pickle.h) and model folders in every checkpoint
// form (models/checkpoint_weights.h). Fixtures: scripts/make_torch_pickle_fixtures.py (Debian's torch 1.13).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "models/checkpoint_weights.h"
#include "run_tfm.h"
#include "test_util.h"

using namespace tfm;
using namespace tfm::test;
namespace fs = std::filesystem;

namespace {

std::string tp(const std::string& rel) { return fixture("torch_pickle/" + rel); }

std::string error_of(const std::string& path) {
  try {
    TorchCheckpoint::open(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void expect_matches_torch(const TorchCheckpoint& ck) {
  std::ifstream f(tp("expected.json"));
  nlohmann::json want = nlohmann::json::parse(f);
  ASSERT_EQ(ck.names().size(), want.size());
  for (const auto& [name, w] : want.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(ck.has(name));
    EXPECT_EQ(ck.dtype_of(name), w["dtype"].get<std::string>());
    EXPECT_EQ(ck.shape_of(name), w["shape"].get<Shape>());
    Tensor t = ck.get(name);
    EXPECT_EQ(t.shape(), w["shape"].get<Shape>());
    const auto& v = w["values"];
    ASSERT_EQ((size_t)t.numel(), v.size());
    if (w["dtype"] == "I64" || w["dtype"] == "I32") {
      ASSERT_EQ(t.dtype(), DType::I64);
      for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.i64()[i], v[i].get<int64_t>()) << i;
    } else {
      ASSERT_EQ(t.dtype(), DType::F32);
      for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.f32()[i], (float)v[i].get<double>()) << i;
    }
  }
}

}  // namespace

TEST(TorchPickle, ReadsEveryDtypeViewAndSharedStorageAsTorchLoads) {
  expect_matches_torch(TorchCheckpoint::open(tp("dtypes.bin")));
}

TEST(TorchPickle, ReadsDeflatedEntries) { expect_matches_torch(TorchCheckpoint::open(tp("dtypes_deflate.bin"))); }

TEST(TorchPickle, StorageOffsetOfAHandWrittenArchive) {
  TorchCheckpoint ck = TorchCheckpoint::open(tp("handmade_ok.bin"));
  Tensor t = ck.get("w");
  ASSERT_EQ(t.shape(), (Shape{3}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.f32()[i], 1.0f);
}

TEST(TorchPickle, RefusesCraftedArchivesNamingTheCause) {
  const std::pair<const char*, const char*> cases[] = {
      {"evil_posix_system.bin", "global 'posix.system' is not allowed"},
      {"evil_eval.bin", "global '__builtin__.eval' is not allowed"},
      {"evil_eval_p4.bin", "global 'builtins.eval' is not allowed"},
      {"evil_unknown_global.bin", "global 'collections.Counter' is not allowed"},
      {"evil_inst_opcode.bin", "pickle opcode 0x69 (INST) at byte 1 is not allowed"},
      {"evil_huge_size.bin", "declares 2305843009213693952 elements of 4 bytes, but archive/data/0 holds 16 bytes"},
      {"evil_storage_bigger.bin", "declares 1000 elements of 4 bytes"},
      {"evil_offset_past.bin", "tensor (storage offset 3, size [2]) reaches past its storage"},
      {"evil_missing_entry.bin", "zip entry 'archive/data/7' is missing"},
      {"evil_truncated.bin", "end-of-central-directory record not found"},
      {"legacy.bin", "legacy torch.save format"},
  };
  for (const auto& [file, fragment] : cases) {
    const std::string msg = error_of(tp(file));
    EXPECT_EQ(msg.rfind(tp(file) + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << file << ": " << msg;
  }
}

TEST(TorchPickle, EveryTruncationIsRefusedCleanly) {
  const std::string whole = slurp(tp("dtypes.bin"));
  TempFolder tmp;
  const std::string p = tmp.path + "/cut.bin";
  for (size_t n = 0; n < whole.size(); n += 7) {
    spit(p, whole.substr(0, n));
    EXPECT_FALSE(error_of(p).empty()) << n;
  }
  // Flipped bytes in the pickle: refused or read, never a crash.
  for (size_t i = 0; i < 700; ++i) {
    std::string s = whole;
    s[64 + i] = char(s[64 + i] ^ 0x5a);
    spit(p, s);
    error_of(p);
  }
}

// ---------------------------------------------------------------------------------------- model folders

TEST(CheckpointWeights, EveryFormHoldsTheSafetensorsTwin) {
  SafeTensors twin = SafeTensors::open(fixture("bert/model.safetensors"));
  for (const char* sub : {"bert_bin", "bert_bin_sharded", "bert_st_sharded"}) {
    SCOPED_TRACE(sub);
    CheckpointWeights w(tp(sub));
    ASSERT_EQ(w.names(), twin.names());
    for (const auto& n : twin.names()) {
      Tensor a = twin.get(n), b = w.get(n, twin.shape_of(n));
      ASSERT_EQ(a.shape(), b.shape()) << n;
      for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]) << n << " " << i;
    }
  }
  EXPECT_EQ(CheckpointWeights::find(tp("bert_bin")), tp("bert_bin") + "/pytorch_model.bin");
  EXPECT_EQ(CheckpointWeights::find(tp("bert_st_sharded")), tp("bert_st_sharded") + "/model.safetensors.index.json");
}

// What the safetensors shards of a folder hand out through CheckpointWeights, as SafeTensorsWeights does: values
// in place without the NaN / Inf check (get_unchecked; get() still refuses), raw BF16 values (get_bf16, which marks
// them used), and page releasers for their own bytes only.
TEST(CheckpointWeights, SafetensorsShardsHandOutUncheckedRawBf16AndReleasers) {
  TempFolder tmp;
  const std::vector<uint16_t> bf = {0x3f80, 0xc000, 0x3f00, 0x4040};  // 1, -2, 0.5, 3
  RawTensor b{"b", "BF16", {2, 2}, std::vector<unsigned char>(8)};
  std::memcpy(b.bytes.data(), bf.data(), 8);
  Tensor nan_w = Tensor::zeros({3});
  nan_w.f32()[1] = std::nanf("");
  RawTensor w{"w", "F32", {3}, std::vector<unsigned char>(12)};
  std::memcpy(w.bytes.data(), nan_w.f32(), 12);
  save_safetensors_raw(tmp.path + "/model.safetensors", {b, w});
  CheckpointWeights cw(tmp.path);

  Tensor u = cw.get_unchecked("w", {3});
  EXPECT_TRUE(std::isnan(u.f32()[1]));
  try {
    cw.get("w", {3});
    FAIL() << "get() must refuse the NaN";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'w' contains NaN or Inf at element 1"), std::string::npos) << e.what();
  }

  EXPECT_EQ(cw.unused(), (std::vector<std::string>{"b"}));
  const uint16_t* raw = cw.get_bf16("b", {2, 2}, {});
  ASSERT_NE(raw, nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(raw[i], bf[i]) << i;
  EXPECT_TRUE(cw.unused().empty());
  EXPECT_EQ(cw.get_bf16("w", {3}, {}), nullptr);  // stored F32: get() converts instead

  EXPECT_TRUE(static_cast<bool>(cw.bytes_releaser(raw, 8)));  // the file's bytes: kept until released
  const std::vector<uint16_t> elsewhere(4);
  EXPECT_FALSE(static_cast<bool>(cw.bytes_releaser(elsewhere.data(), 8)));  // not the file's: the caller copies
}

TEST(CheckpointWeights, ShapeMismatchAndMissingNameTheShard) {
  CheckpointWeights w(tp("bert_bin_sharded"));
  try {
    w.get("embeddings.word_embeddings.weight", {61, 32});
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch_model-0000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("has shape [60, 32], config expects [61, 32]"), std::string::npos) << e.what();
  }
  try {
    w.get("nope.weight", {1});
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch_model.bin.index.json: missing tensor 'nope.weight'"), std::string::npos)
        << e.what();
  }
}

TEST(CheckpointWeights, BadFoldersAndIndexesAreRefused) {
  TempFolder tmp;
  auto error = [](const std::string& dir) -> std::string {
    try {
      CheckpointWeights w(dir);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  const std::string none = error(tmp.path);
  EXPECT_NE(none.find("model.safetensors"), std::string::npos) << none;
  EXPECT_NE(none.find("pytorch_model.bin"), std::string::npos) << none;

  const std::string dir = tmp.path + "/m";
  fs::create_directories(dir);
  spit(dir + "/pytorch_model.bin.index.json", R"({"weight_map": {"a": "../dtypes.bin"}})");
  EXPECT_NE(error(dir).find("shard '../dtypes.bin' is not a plain file name"), std::string::npos) << error(dir);
  fs::copy_file(tp("dtypes.bin"), dir + "/shard.bin");
  spit(dir + "/pytorch_model.bin.index.json", R"({"weight_map": {"f32": "shard.bin", "absent": "shard.bin"}})");
  EXPECT_NE(error(dir).find("weight_map puts tensor 'absent' in " + dir + "/shard.bin, which does not hold it"),
            std::string::npos)
      << error(dir);
  spit(dir + "/pytorch_model.bin.index.json", R"({"metadata": {}})");
  EXPECT_NE(error(dir).find("no \"weight_map\""), std::string::npos) << error(dir);
  // Integer tensors are not weights.
  spit(dir + "/pytorch_model.bin.index.json", R"({"weight_map": {"i64": "shard.bin"}})");
  CheckpointWeights w(dir);
  EXPECT_THROW(w.get("i64", {4}), std::runtime_error);
}

// tfm encode on a folder with only pytorch_model.bin (or only shards) gives the bytes of the safetensors folder.
TEST(CheckpointWeights, EncodeOutputEqualsTheSafetensorsFolder) {
  TempFolder tmp;
  const std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\n";
  auto encode = [&](const std::string& name, const std::string& src) {
    const std::string m = tmp.path + "/" + name;
    fs::copy(src, m, fs::copy_options::recursive);
    spit(m + "/vocab.txt", vocab);
    TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", m, "--threads", "1", "--text", "the cat sat on the mat",
                                     "-o", m + "/h.npy"});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return slurp(m + "/h.npy");
  };
  fs::create_directories(tmp.path + "/st_src");
  fs::copy_file(fixture("bert/config.json"), tmp.path + "/st_src/config.json");
  fs::copy_file(fixture("bert/model.safetensors"), tmp.path + "/st_src/model.safetensors");
  const std::string want = encode("st", tmp.path + "/st_src");
  ASSERT_GT(want.size(), 128u);
  EXPECT_EQ(encode("bin", tp("bert_bin")), want);
  EXPECT_EQ(encode("bin_sharded", tp("bert_bin_sharded")), want);
  EXPECT_EQ(encode("st_sharded", tp("bert_st_sharded")), want);

  fs::create_directories(tmp.path + "/empty");
  spit(tmp.path + "/empty/vocab.txt", vocab);
  fs::copy_file(fixture("bert/config.json"), tmp.path + "/empty/config.json");
  TfmRun r = run_tfm_in(tmp.path, {"encode", "--model", tmp.path + "/empty", "--text", "the cat"});
  expect_one_line_error(r, "model.safetensors: no such file (nor pytorch_model.bin");
}

// A sentence-transformers folder whose 2_Dense module ships pytorch_model.bin embeds as the safetensors one does
// (the same bytes); the Transformer module's pytorch_model.bin is the bert_bin case above.
TEST(CheckpointWeights, SentenceTransformersFolderWithPytorchModelBin) {
  TempFolder tmp;
  const std::string m = tmp.path + "/st";
  fs::copy(fixture("st_multi"), m, fs::copy_options::recursive);
  fs::remove(m + "/2_Dense/model.safetensors");
  fs::copy_file(tp("st_multi_bin/2_Dense/pytorch_model.bin"), m + "/2_Dense/pytorch_model.bin");
  spit(tmp.path + "/in.txt", "the cat sat\na dog ran\n");
  auto embed = [&](const std::string& model) {
    TfmRun r = run_tfm_in(tmp.path, {"embed", "--model", model, "--input", tmp.path + "/in.txt", "--no-prompt", "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return r.out;
  };
  const std::string want = embed(fixture("st_multi"));
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(embed(m), want);
}
