// io/ layer: atomic writes, safetensors, npy, JSON config getters.
// Fixtures in tests/fixtures/io/ come from scripts/make_io_fixtures.py (reference/torch/st.py and np.save), so
// reading them checks compatibility with the reference writers; malformed inputs are crafted byte by byte here.
#include "test_paths.h"
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "io/atomic_file.h"
#include "io/json_util.h"
#include "io/npy.h"
#include "io/safetensors.h"

using namespace tfm;
using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/io/";

// A fresh folder per test, removed afterwards.
class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tfm-io-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << tmpl;
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  // Names in the folder that look like write_file_atomic temp files.
  std::vector<std::string> temp_files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp.") != std::string::npos) out.push_back(e.path().string());
    return out;
  }
  std::string dir_;
};

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), (std::streamsize)bytes.size());
  ASSERT_TRUE(out.good()) << path;
}

std::string read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A safetensors file: u64 LE header length (`len` overrides the true one), header text, data bytes.
std::string st_bytes(const std::string& header, const std::string& data, std::optional<uint64_t> len = {}) {
  uint64_t n = len.value_or(header.size());
  std::string out;
  for (int i = 0; i < 8; ++i) out += (char)((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string floats_bytes(const std::vector<float>& v) { return std::string((const char*)v.data(), v.size() * 4); }

// The message of the runtime_error `fn` throws; fails the test if it throws nothing.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

json expected_values() { return load_json_file(kFixtures + "expected.json"); }

// Compares `t` with a describe() record of make_io_fixtures.py: shape and every value, exactly.
void expect_matches(const Tensor& t, const json& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(t.shape(), want["shape"].get<Shape>());
  const json& vals = want["values"];
  ASSERT_EQ((size_t)t.numel(), vals.size());
  for (size_t i = 0; i < vals.size(); ++i) {
    if (t.dtype() == DType::F32) {
      float w = (float)vals[i].get<double>();
      // Bitwise, so -0.0 vs 0.0 and the last ulp both count.
      EXPECT_EQ(std::memcmp(&t.f32()[i], &w, 4), 0) << "index " << i << ": " << t.f32()[i] << " vs " << w;
    } else {
      EXPECT_EQ(t.i64()[i], vals[i].get<int64_t>()) << "index " << i;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- AtomicFile

using AtomicFile = IoTest;

TEST_F(AtomicFile, WritesNewFileAndReplacesExisting) {
  std::string p = file("out.bin");
  write_file_atomic(p, std::string_view("first version, longer"));
  EXPECT_EQ(read_raw(p), "first version, longer");
  write_file_atomic(p, [](std::FILE* f) { std::fputs("second", f); });
  EXPECT_EQ(read_raw(p), "second");  // truncated to the new contents, not overlaid
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(AtomicFile, MissingFolderThrowsWithPathAndLeavesNoTempFile) {
  std::string p = file("no/such/dir/out.bin");
  std::string msg = error_of([&] { write_file_atomic(p, std::string_view("x")); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr(std::strerror(ENOENT)));
  EXPECT_FALSE(fs::exists(file("no")));
  EXPECT_TRUE(temp_files().empty());
}

TEST_F(AtomicFile, ThrowingWriterKeepsOldFile) {
  std::string p = file("keep.txt");
  write_raw(p, "old contents");
  EXPECT_THROW(write_file_atomic(p,
                                 [](std::FILE* f) {
                                   std::fputs("partial new contents", f);
                                   throw std::logic_error("writer failed halfway");
                                 }),
               std::logic_error);
  EXPECT_EQ(read_raw(p), "old contents");
  EXPECT_TRUE(temp_files().empty());
}

// A write that fails in the kernel (here EFBIG from RLIMIT_FSIZE, standing in for ENOSPC) must be reported
// and must not touch the old file. Run in a child process so the limit does not leak into other tests.
TEST_F(AtomicFile, FailedWriteThrowsAndKeepsOldFile) {
  std::string p = file("big.bin");
  write_raw(p, "old");
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(10);
    std::string big(1 << 20, 'x');
    try {
      write_file_atomic(p, std::string_view(big));
    } catch (const std::runtime_error& e) {
      std::string msg = e.what();
      if (msg.find(p) == std::string::npos) ::_exit(11);
      if (msg.find(std::strerror(EFBIG)) == std::string::npos) ::_exit(12);
      ::_exit(0);
    }
    ::_exit(13);  // no exception
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit failed, 11: path missing from message, 12: strerror missing, "
                                       "13: no exception";
  EXPECT_EQ(read_raw(p), "old");
  EXPECT_TRUE(temp_files().empty());
}

// Renaming over a symlink, a FIFO or a device would replace the node itself (as root, `-o /dev/full` turned
// the device into a regular file): a link is followed, a FIFO or device is written through.
TEST_F(AtomicFile, FollowsSymlinksKeepsModeAndWritesThroughFifos) {
  std::string target = file("real.bin"), link = file("link.bin");
  write_raw(target, "old");
  ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
  fs::create_symlink(target, link);
  write_file_atomic(link, std::string_view("new"));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_raw(target), "new");
  EXPECT_EQ(fs::status(target).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);

  std::string fifo = file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_raw(fifo); });
  write_file_atomic(fifo, std::string_view("through the pipe"));
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(temp_files().empty());

  std::string msg = error_of([&] { write_file_atomic(dir_, std::string_view("x")); });
  EXPECT_THAT(msg, HasSubstr("it is a folder"));
}

TEST_F(AtomicFile, DeviceIsWrittenThroughAndErrorsReported) {
  write_file_atomic("/dev/null", std::string_view("discarded"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  if (!fs::is_character_file("/dev/full")) GTEST_SKIP() << "/dev/full is not a device here";
  std::string msg = error_of([] { write_file_atomic("/dev/full", std::string_view("x")); });
  EXPECT_THAT(msg, HasSubstr(std::strerror(ENOSPC)));
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

TEST_F(AtomicFile, MakeDirsCreatesParentsAndRejectsFiles) {
  std::string d = file("a/b/c");
  make_dirs(d);
  EXPECT_TRUE(fs::is_directory(d));
  make_dirs(d);  // already there: no error
  make_dirs(d + "/");
  write_raw(file("plain"), "x");
  std::string msg = error_of([&] { make_dirs(file("plain/sub")); });
  EXPECT_THAT(msg, HasSubstr(file("plain")));
  EXPECT_THAT(msg, HasSubstr("not a folder"));
}

// ---------------------------------------------------------------- Safetensors

using Safetensors = IoTest;

TEST_F(Safetensors, SaveThenOpenRoundTrips) {
  std::string p = file("model.safetensors");
  Tensor w = Tensor::from_f32({2, 3}, {0.5f, -1.f, 2.25f, 3e-7f, -0.f, 1e30f});
  Tensor ids = Tensor::from_i64({3}, {7, -8, 1LL << 50});
  Tensor b = Tensor::from_f32({}, {4.5f});  // 0-d
  Tensor none = Tensor::zeros({2, 0});
  save_safetensors(p, {{"z.weight", w}, {"ids", ids}, {"b", b}, {"none", none}}, {{"format", "pt"}});

  SafeTensors st = SafeTensors::open(p);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"b", "ids", "none", "z.weight"}));
  EXPECT_EQ(st.shape_of("b"), Shape{});
  EXPECT_EQ(st.get("none").shape(), (Shape{2, 0}));
  EXPECT_EQ(st.dtype_of("ids"), "I64");
  EXPECT_EQ(st.shape_of("z.weight"), (Shape{2, 3}));
  EXPECT_EQ(st.metadata(), (json{{"format", "pt"}}));
  Tensor w2 = st.get("z.weight");
  ASSERT_EQ(w2.dtype(), DType::F32);
  EXPECT_EQ(std::memcmp(w2.f32(), w.f32(), w.nbytes()), 0);
  Tensor ids2 = st.get("ids");
  EXPECT_EQ(std::vector<int64_t>(ids2.i64(), ids2.i64() + 3), (std::vector<int64_t>{7, -8, 1LL << 50}));
  EXPECT_EQ(st.get("b").f32()[0], 4.5f);
}

// The layout rules of the format, checked on the raw bytes rather than through our own reader.
TEST_F(Safetensors, SaveWritesStandardLayout) {
  std::string p = file("layout.safetensors");
  save_safetensors(p, {{"y", Tensor::from_f32({3}, {1, 2, 3})}, {"x", Tensor::from_i64({1}, {42})}});
  std::string raw = read_raw(p);
  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | (unsigned char)raw[i];
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(raw.size(), 8 + n + 8 + 12);
  json h = json::parse(raw.substr(8, n));
  EXPECT_EQ(h["x"]["data_offsets"], json::array({0, 8}));  // sorted by name: x first
  EXPECT_EQ(h["y"]["data_offsets"], json::array({8, 20}));
  EXPECT_EQ(h["x"]["dtype"], "I64");
  EXPECT_EQ(h["y"]["shape"], json::array({3}));
  EXPECT_FALSE(h.contains("__metadata__"));
  int64_t x;
  std::memcpy(&x, raw.data() + 8 + n, 8);
  EXPECT_EQ(x, 42);
}

TEST_F(Safetensors, SaveRejectsDuplicateNamesAndNonStringMetadata) {
  Tensor t = Tensor::from_f32({1}, {1});
  std::string p = file("dup.safetensors");
  EXPECT_THAT(error_of([&] { save_safetensors(p, {{"a", t}, {"a", t}}); }), HasSubstr("duplicate tensor name 'a'"));
  EXPECT_THAT(error_of([&] { save_safetensors(p, {{"a", t}}, {{"step", 3}}); }),
              HasSubstr("metadata value for key 'step' must be a string"));
  EXPECT_FALSE(fs::exists(p));
}

TEST_F(Safetensors, ReadsFileWrittenByPython) {
  json want = expected_values()["f32_i64.safetensors"];
  SafeTensors st = SafeTensors::open(kFixtures + "f32_i64.safetensors");
  EXPECT_EQ(st.names(), (std::vector<std::string>{"a_odd", "empty", "ids", "weight"}));
  EXPECT_EQ(st.metadata()["format"], "pt");
  for (const auto& name : st.names()) expect_matches(st.get(name), want[name], name);
}

TEST_F(Safetensors, ConvertsF16AndI32AndReadsMisalignedF32) {
  json want = expected_values()["f16.safetensors"];
  SafeTensors st = SafeTensors::open(kFixtures + "f16.safetensors");
  EXPECT_EQ(st.dtype_of("half"), "F16");
  for (const auto& name : st.names()) {
    Tensor t = st.get(name);
    EXPECT_EQ(t.dtype(), name == "i32" ? DType::I64 : DType::F32) << name;
    expect_matches(t, want[name], name);
  }
}

TEST_F(Safetensors, ConvertsBf16) {
  // bfloat16 is the top half of a float32: 0x3F80 = 1.0, 0xC020 = -2.5, 0x0001 = 2^-133, 0xFF80 = -inf.
  std::string data("\x80\x3f\x20\xc0\x01\x00\x80\xff", 8);
  std::string p = file("bf16.safetensors");
  write_raw(p, st_bytes(R"({"t":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", data));
  Tensor t = SafeTensors::open(p).get("t");
  ASSERT_EQ(t.dtype(), DType::F32);
  EXPECT_EQ(t.f32()[0], 1.0f);
  EXPECT_EQ(t.f32()[1], -2.5f);
  EXPECT_EQ(t.f32()[2], std::ldexp(1.0f, -133));
  EXPECT_EQ(t.f32()[3], -INFINITY);
}

// Aligned F32 tensors are views into the mapping: no copy, kept alive after the SafeTensors is gone, and
// writable copy-on-write without changing the file.
TEST_F(Safetensors, ViewsShareMappingOutliveReaderAndNeverWriteTheFile) {
  std::string p = file("v.safetensors");
  save_safetensors(p, {{"w", Tensor::from_f32({4}, {1, 2, 3, 4})}});
  Tensor w;
  {
    SafeTensors st = SafeTensors::open(p);
    w = st.get("w");
    EXPECT_EQ(st.get("w").f32(), w.f32());  // the same bytes, not two copies
  }
  EXPECT_EQ(w.f32()[3], 4.0f);
  w.f32()[0] = 100.0f;
  EXPECT_EQ(SafeTensors::open(p).get("w").f32()[0], 1.0f);
}

TEST_F(Safetensors, MisalignedI64IsCopiedNotViewed) {
  // In the Python fixture 'ids' starts 12 bytes into the data section, 4 bytes off int64 alignment.
  SafeTensors st = SafeTensors::open(kFixtures + "f32_i64.safetensors");
  Tensor ids = st.get("ids");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ids.i64()) % 8, 0u);
  EXPECT_NE(st.get("ids").i64(), ids.i64());
}

TEST_F(Safetensors, MissingTensorNamesFileAndTensor) {
  std::string p = file("m.safetensors");
  save_safetensors(p, {{"encoder.weight", Tensor::from_f32({1}, {1})}});
  SafeTensors st = SafeTensors::open(p);
  EXPECT_FALSE(st.has("decoder.weight"));
  EXPECT_TRUE(st.has("encoder.weight"));
  std::string msg = error_of([&] { st.get("decoder.weight"); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr("'decoder.weight'"));
  EXPECT_THAT(msg, HasSubstr("encoder.weight"));  // the key set is shown for comparison
  EXPECT_THAT(error_of([&] { st.shape_of("decoder.weight"); }), HasSubstr("'decoder.weight'"));
}

TEST_F(Safetensors, UnsupportedDtypeFailsOnGet) {
  std::string p = file("f64.safetensors");
  write_raw(p, st_bytes(R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
  SafeTensors st = SafeTensors::open(p);
  EXPECT_EQ(st.dtype_of("d"), "F64");
  std::string msg = error_of([&] { st.get("d"); });
  EXPECT_THAT(msg, HasSubstr("unsupported dtype F64"));
  EXPECT_THAT(msg, HasSubstr("'d'"));
  EXPECT_THAT(msg, HasSubstr(p));
}

// One test per malformed file: open() must throw, naming the file and what is wrong.
struct BadFile {
  const char* test_name;
  std::string bytes;
  std::vector<std::string> expect;  // substrings of the message besides the path
};

void PrintTo(const BadFile& b, std::ostream* os) { *os << b.test_name; }

class SafetensorsBadFile : public IoTest, public ::testing::WithParamInterface<BadFile> {};

TEST_P(SafetensorsBadFile, OpenThrowsNamingFileAndProblem) {
  std::string p = file("bad.safetensors");
  write_raw(p, GetParam().bytes);
  std::string msg = error_of([&] { SafeTensors::open(p); });
  EXPECT_THAT(msg, HasSubstr(p));
  for (const auto& s : GetParam().expect) EXPECT_THAT(msg, HasSubstr(s));
}

const std::string kTwoFloats = floats_bytes({1, 2});

INSTANTIATE_TEST_SUITE_P(
    Safetensors, SafetensorsBadFile,
    ::testing::Values(
        BadFile{"EmptyFile", "", {"0 bytes", "empty"}},
        BadFile{"TruncatedLengthPrefix", std::string("\x10\0\0\0\0", 5), {"5 bytes", "too short"}},
        BadFile{"HeaderLongerThanFile", st_bytes("{}", "", 1000), {"header length 1000", "exceeds"}},
        BadFile{"AbsurdHeaderLength", st_bytes("{}", "", ~0ULL), {"header length 18446744073709551615"}},
        BadFile{"InvalidJsonHeader", st_bytes(R"({"t":{"dtype":)", ""), {"not valid JSON"}},
        BadFile{"HeaderNotObject", st_bytes("[1,2]", ""), {"must be a JSON object", "array"}},
        BadFile{"UnknownDtype",
                st_bytes(R"({"t":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", kTwoFloats),
                {"'t'", "unknown dtype 'F17'"}},
        BadFile{"MissingShape", st_bytes(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", kTwoFloats),
                {"'t'", "no 'shape'"}},
        BadFile{"DtypeNotString", st_bytes(R"({"t":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", kTwoFloats),
                {"'t'", "'dtype' must be a string"}},
        BadFile{"ShapeOfStrings",
                st_bytes(R"({"t":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", kTwoFloats),
                {"'t'", "'shape' must hold integers"}},
        BadFile{"NegativeDimension",
                st_bytes(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kTwoFloats),
                {"'t'", "negative dimension"}},
        BadFile{"ShapeOffsetSizeMismatch",
                st_bytes(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kTwoFloats),
                {"'t'", "span 8 bytes", "[3]", "needs 12"}},
        BadFile{"OffsetsOutsideFile",
                st_bytes(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", kTwoFloats),
                {"'t'", "outside the data section of 8 bytes"}},
        BadFile{"BeginGreaterThanEnd",
                st_bytes(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", kTwoFloats),
                {"'t'", "begin > end"}},
        BadFile{"OffsetsNotAPair",
                st_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kTwoFloats),
                {"'t'", "'data_offsets' must be [begin, end]"}},
        BadFile{"OverlappingTensors",
                st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         kTwoFloats),
                {"'a'", "'b'", "overlap"}},
        BadFile{"MetadataNotObject", st_bytes(R"({"__metadata__":"x"})", ""), {"__metadata__ must be a JSON object"}}),
    [](const auto& info) { return std::string(info.param.test_name); });

TEST_F(Safetensors, NonexistentFileNamesPath) {
  std::string p = file("nope.safetensors");
  std::string msg = error_of([&] { SafeTensors::open(p); });
  EXPECT_THAT(msg, HasSubstr(p));
  EXPECT_THAT(msg, HasSubstr(std::strerror(ENOENT)));
}

// ---------------------------------------------------------------- Npy

using Npy = IoTest;

TEST_F(Npy, LoadsFilesWrittenByNumpy) {
  json want = expected_values();
  Tensor a = load_npy(kFixtures + "a.npy");
  ASSERT_EQ(a.dtype(), DType::F32);
  expect_matches(a, want["a.npy"], "a.npy");
  Tensor b = load_npy(kFixtures + "b.npy");
  ASSERT_EQ(b.dtype(), DType::I64);
  expect_matches(b, want["b.npy"], "b.npy");
}

// np.save's output is the specification: the same array saved by us must give the same bytes.
TEST_F(Npy, SaveIsByteIdenticalToNumpy) {
  json want = expected_values();
  for (const char* name : {"a.npy", "b.npy"}) {
    const json& w = want[name];
    Shape shape = w["shape"].get<Shape>();
    Tensor t;
    if (w["dtype"] == "float32") {
      std::vector<float> v;
      for (const auto& x : w["values"]) v.push_back((float)x.get<double>());
      t = Tensor::from_f32(shape, v);
    } else {
      t = Tensor::from_i64(shape, w["values"].get<std::vector<int64_t>>());
    }
    std::string p = file(name);
    save_npy(p, t);
    EXPECT_EQ(read_raw(p), read_raw(kFixtures + name)) << name;
  }
}

TEST_F(Npy, RoundTripsScalarsAndEmptyArrays) {
  std::string p = file("x.npy");
  save_npy(p, Tensor::from_f32({}, {-3.5f}));
  Tensor s = load_npy(p);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.f32()[0], -3.5f);
  EXPECT_THAT(read_raw(p), HasSubstr("'shape': ()"));
  save_npy(p, Tensor::zeros({0, 5}, DType::I64));
  Tensor e = load_npy(p);
  EXPECT_EQ(e.shape(), (Shape{0, 5}));
  EXPECT_EQ(e.dtype(), DType::I64);
}

namespace {
// A .npy file with the given version, header dict and data; v1 uses a u16 header length, v2 a u32.
std::string npy_bytes(int major, const std::string& dict, const std::string& data) {
  std::string out = std::string("\x93NUMPY", 6) + (char)major + '\0';
  std::string h = dict + "\n";
  int len_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < len_bytes; ++i) out += (char)((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}
}  // namespace

TEST_F(Npy, LoadsVersion2Header) {
  std::string p = file("v2.npy");
  write_raw(p, npy_bytes(2, "{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}", floats_bytes({1.5f, -2})));
  Tensor t = load_npy(p);
  EXPECT_EQ(t.shape(), (Shape{2}));
  EXPECT_EQ(t.f32()[0], 1.5f);
  EXPECT_EQ(t.f32()[1], -2.0f);
}

TEST_F(Npy, BadFilesThrowNamingFileAndProblem) {
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  struct Case {
    std::string bytes, expect;
  };
  std::vector<Case> cases = {
      {"PK\x03\x04 not numpy", "missing the \\x93NUMPY magic"},
      {npy_bytes(3, ok_dict, floats_bytes({1, 2})), "unsupported .npy version 3.0"},
      {npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0')),
       "unsupported dtype '<f8'"},
      {npy_bytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", floats_bytes({1, 2})),
       "fortran_order True"},
      {npy_bytes(1, ok_dict, floats_bytes({1})), "data is 4 bytes, but shape [2] of <f4 needs 8"},
      {npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", floats_bytes({1, 2})),
       "malformed .npy header"},
      {npy_bytes(1, "{'descr': '<f4', 'shape': (2,), }", floats_bytes({1, 2})), "lacks 'fortran_order'"},
      {std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "header length 255 exceeds"},
  };
  std::string p = file("bad.npy");
  for (const auto& c : cases) {
    write_raw(p, c.bytes);
    std::string msg = error_of([&] { load_npy(p); });
    EXPECT_THAT(msg, HasSubstr(p));
    EXPECT_THAT(msg, HasSubstr(c.expect));
  }
}

TEST_F(Npy, SaveToMissingFolderThrows) {
  std::string p = file("missing/x.npy");
  EXPECT_THAT(error_of([&] { save_npy(p, Tensor::from_f32({1}, {1})); }), HasSubstr(p));
}

// ---------------------------------------------------------------- JsonUtil

using JsonUtil = IoTest;

TEST_F(JsonUtil, LoadJsonFileReportsMissingFileAndParseErrorPosition) {
  std::string p = file("config.json");
  EXPECT_THAT(error_of([&] { load_json_file(p); }), HasSubstr(p + ": cannot open"));
  write_raw(p, R"({"a": 1,,})");
  // The second comma is the 9th byte: nlohmann's parse_error::byte counts the characters read so far.
  std::string msg = error_of([&] { load_json_file(p); });
  EXPECT_THAT(msg, HasSubstr(p + ": invalid JSON at byte 9"));
  write_raw(p, R"({"hidden_size": 768, "act": "gelu"})");
  json j = load_json_file(p);
  EXPECT_EQ(j["hidden_size"], 768);
}

TEST_F(JsonUtil, TypedGettersAcceptRightTypes) {
  json j = json::parse(R"({"n": 768, "f": 768.0, "big": 9007199254740993, "neg": -3, "x": 0.1,
                            "s": "gelu", "b": true, "nothing": null})");
  EXPECT_EQ(json_int(j, "n", "c.json"), 768);
  EXPECT_EQ(json_int(j, "f", "c.json"), 768);
  EXPECT_EQ(json_int(j, "big", "c.json"), 9007199254740993LL);  // above 2^53: must not pass through double
  EXPECT_EQ(json_int(j, "neg", "c.json"), -3);
  EXPECT_EQ(json_number(j, "x", "c.json"), 0.1);
  EXPECT_EQ(json_number(j, "n", "c.json"), 768.0);
  EXPECT_EQ(json_string(j, "s", "c.json"), "gelu");
  EXPECT_TRUE(json_bool(j, "b", "c.json"));
  EXPECT_EQ(json_int_or(j, "absent", 12, "c.json"), 12);
  EXPECT_EQ(json_int_or(j, "nothing", 12, "c.json"), 12);  // null means "use the default"
  EXPECT_EQ(json_int_or(j, "n", 12, "c.json"), 768);
  EXPECT_EQ(json_number_or(j, "absent", 0.5, "c.json"), 0.5);
  EXPECT_EQ(json_string_or(j, "absent", "relu", "c.json"), "relu");
  EXPECT_EQ(json_string_or(j, "s", "relu", "c.json"), "gelu");
  EXPECT_FALSE(json_bool_or(j, "absent", false, "c.json"));
  EXPECT_TRUE(json_bool_or(j, "b", false, "c.json"));
}

TEST_F(JsonUtil, TypedGettersNameFileKeyAndFoundType) {
  json j = json::parse(R"({"hidden_size": "768", "frac": 768.5, "flag": 1, "name": 3, "nothing": null})");
  EXPECT_EQ(error_of([&] { json_int(j, "hidden_size", "config.json"); }),
            "config.json: key 'hidden_size' must be an integer, found string");
  EXPECT_EQ(error_of([&] { json_int_or(j, "frac", 1, "config.json"); }),
            "config.json: key 'frac' must be an integer, found number 768.5");
  EXPECT_THAT(error_of([&] { json_number(j, "hidden_size", "config.json"); }),
              HasSubstr("key 'hidden_size' must be a number, found string"));
  EXPECT_THAT(error_of([&] { json_bool_or(j, "flag", false, "config.json"); }),
              HasSubstr("key 'flag' must be true or false, found number 1"));
  EXPECT_THAT(error_of([&] { json_string(j, "name", "config.json"); }),
              HasSubstr("key 'name' must be a string, found number 3"));
  EXPECT_EQ(error_of([&] { json_int(j, "num_hidden_layers", "config.json"); }),
            "config.json: missing required key 'num_hidden_layers'");
  EXPECT_THAT(error_of([&] { json_string(j, "nothing", "config.json"); }), HasSubstr("'nothing' is null"));
  EXPECT_THAT(error_of([&] { json_int(json::array(), "n", "config.json"); }),
              HasSubstr("config.json: expected a JSON object"));
}
