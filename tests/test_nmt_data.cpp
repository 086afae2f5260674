// d2l fra-eng pipeline (preprocess, tokenize, Vocab, arrays) against d2lnmt.py outputs dumped by
// scripts/make_nmt_fixtures.py, plus error messages and the BatchSampler.
#include "test_paths.h"
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "text/nmt_data.h"
#include "text/vocab.h"

namespace {

namespace fs = std::filesystem;
using Tokens = std::vector<std::vector<std::string>>;

std::string data_dir() {
  const char* env = std::getenv("TFM_DATA_DIR");
  return env ? std::string(env) : std::string(TFM_SOURCE_DIR) + "/../shared/data";
}

std::string fra_path() { return data_dir() + "/fra-eng/fra.txt"; }

const nlohmann::json& fixture() {
  static const nlohmann::json fx = [] {
    const std::string path = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/nmt/d2l_600.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error(path + ": missing (run /usr/bin/python3 scripts/make_nmt_fixtures.py)");
    return nlohmann::json::parse(in);
  }();
  return fx;
}

const std::vector<std::string> kReserved = {"<pad>", "<bos>", "<eos>"};

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("tfm_nmt_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name, const std::string& bytes) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Runs f, expects exception E whose message contains every string in `parts`.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(NmtData, PreprocessMatchesD2l) {
  ASSERT_GE(fixture()["preprocess"].size(), 15u);
  for (const auto& c : fixture()["preprocess"]) {
    const std::string in = c["input"], want = c["output"];
    EXPECT_EQ(tfm::preprocess_nmt(in), want) << "input: " << in;
  }
}

TEST(NmtData, PreprocessRejectsInvalidUtf8WithOffset) {
  expect_error<std::invalid_argument>([] { tfm::preprocess_nmt("ab\xff"); }, {"byte offset 2"});
  // Overlong encoding of '/' and a lone surrogate are invalid for Python's decoder too.
  expect_error<std::invalid_argument>([] { tfm::preprocess_nmt("\xc0\xaf"); }, {"byte offset 0"});
  expect_error<std::invalid_argument>([] { tfm::preprocess_nmt("x\xed\xa0\x80"); }, {"byte offset 1"});
}

TEST(NmtData, UnicodeLowerLikePython) {
  // Python: 'Go .'.lower() == 'go .', 'ÉTÉ'.lower() == 'été', 'ΣΑΣ'.lower() == 'σας'.
  EXPECT_EQ(tfm::unicode_lower("Go ."), "go .");
  EXPECT_EQ(tfm::unicode_lower("\xc3\x89T\xc3\x89"), "\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(tfm::unicode_lower("\xce\xa3\xce\x91\xce\xa3"), "\xcf\x83\xce\xb1\xcf\x82");
}

TEST(NmtData, TokenizeSplitsLikePython) {
  // Python: 'a  b\tc' -> (['a', '', 'b'], ['c']); 'bad line' and 'x\ty\tz' have 1 and 3 fields -> skipped.
  const auto c = tfm::tokenize_nmt("a  b\tc\nbad line\nx\ty\tz\nd\te .\n", 0);
  EXPECT_EQ(c.source, (Tokens{{"a", "", "b"}, {"d"}}));
  EXPECT_EQ(c.target, (Tokens{{"c"}, {"e", "."}}));
  EXPECT_EQ(c.skipped_lines, (std::vector<int64_t>{2, 3}));  // the piece after the final '\n' is not counted
}

TEST(NmtData, TokenizeReadsNumExamplesPlusOneLines) {
  // d2l breaks when i > num_examples, so num_examples = 2 keeps lines 0, 1, 2.
  const auto c = tfm::tokenize_nmt("a\tA\nb\tB\nc\tC\nd\tD\ne\tE", 2);
  EXPECT_EQ(c.source, (Tokens{{"a"}, {"b"}, {"c"}}));
  EXPECT_EQ(tfm::tokenize_nmt("a\tA\nb\tB\nc\tC\nd\tD\ne\tE", 0).source.size(), 5u);
  EXPECT_THROW(tfm::tokenize_nmt("a\tA", -1), std::invalid_argument);
}

TEST(NmtData, LoadData600MatchesD2l) {
  const auto& fx = fixture();
  const int64_t num_steps = fx["num_steps"], num_examples = fx["num_examples"];
  const auto corpus = tfm::read_nmt_file(fra_path(), num_examples);
  ASSERT_EQ(static_cast<int64_t>(corpus.source.size()), fx["num_pairs"].get<int64_t>());
  EXPECT_TRUE(corpus.skipped_lines.empty());
  const tfm::Vocab src(corpus.source, 2, kReserved), tgt(corpus.target, 2, kReserved);
  EXPECT_EQ(src.idx_to_token(), fx["src_vocab"].get<std::vector<std::string>>());
  EXPECT_EQ(tgt.idx_to_token(), fx["tgt_vocab"].get<std::vector<std::string>>());

  const auto a = tfm::build_arrays_nmt(corpus, src, tgt, num_steps);
  ASSERT_EQ(a.size(), fx["num_pairs"].get<int64_t>());
  ASSERT_EQ(a.src.size(), static_cast<size_t>(a.size() * num_steps));
  EXPECT_EQ(a.src_valid_len, fx["src_valid_len"].get<std::vector<int64_t>>());
  EXPECT_EQ(a.tgt_valid_len, fx["tgt_valid_len"].get<std::vector<int64_t>>());
  for (int64_t i = 0; i < a.size(); ++i) {
    const auto row = [&](const std::vector<int64_t>& v) {
      return std::vector<int64_t>(v.begin() + i * num_steps, v.begin() + (i + 1) * num_steps);
    };
    EXPECT_EQ(row(a.src), fx["src"][i].get<std::vector<int64_t>>()) << "src row " << i;
    EXPECT_EQ(row(a.tgt), fx["tgt"][i].get<std::vector<int64_t>>()) << "tgt row " << i;
  }
}

TEST(NmtData, FullFileVocabMatchesD2l) {
  const auto& ff = fixture()["full_file"];
  const auto corpus = tfm::read_nmt_file(fra_path(), 0);
  ASSERT_EQ(static_cast<int64_t>(corpus.source.size()), ff["num_pairs"].get<int64_t>());
  const tfm::Vocab src(corpus.source, 2, kReserved), tgt(corpus.target, 2, kReserved);
  ASSERT_EQ(src.size(), ff["src_vocab_size"].get<int64_t>());
  ASSERT_EQ(tgt.size(), ff["tgt_vocab_size"].get<int64_t>());
  const auto head = [](const tfm::Vocab& v, size_t n) {
    return std::vector<std::string>(v.idx_to_token().begin(), v.idx_to_token().begin() + n);
  };
  const auto tail = [](const tfm::Vocab& v, size_t n) {
    return std::vector<std::string>(v.idx_to_token().end() - n, v.idx_to_token().end());
  };
  EXPECT_EQ(head(src, 30), ff["src_vocab_head"].get<std::vector<std::string>>());
  EXPECT_EQ(head(tgt, 30), ff["tgt_vocab_head"].get<std::vector<std::string>>());
  // The tail is all frequency-2 tokens: it checks the first-seen order of ties and the min_freq cut.
  EXPECT_EQ(tail(src, 10), ff["src_vocab_tail"].get<std::vector<std::string>>());
  EXPECT_EQ(tail(tgt, 10), ff["tgt_vocab_tail"].get<std::vector<std::string>>());
}

TEST(NmtData, ReadGzipEqualsPlain) {
  TempDir dir;
  const std::string text = "Go.\tVa !\nHi.\tSalut\xe2\x80\xaf!\n";
  const std::string gz = dir.path("pairs.txt.gz");
  gzFile f = gzopen(gz.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
  const auto c = tfm::read_nmt_file(gz, 0);
  EXPECT_EQ(c.source, (Tokens{{"go", "."}, {"hi", "."}}));
  EXPECT_EQ(c.target, (Tokens{{"va", "!"}, {"salut", "!"}}));
  EXPECT_EQ(tfm::read_nmt_file(dir.file("pairs.txt", text), 0).target, c.target);
}

TEST(NmtData, ReadErrorsNameFileAndLine) {
  TempDir dir;
  const std::string empty = dir.file("empty.txt", "");
  expect_error<std::runtime_error>([&] { tfm::read_nmt_file(empty, 0); },
                                   {empty, "no sentence pairs", "source<TAB>target"});
  const std::string bad = dir.file("bad.txt", "Go.\tVa !\nHi.\tSalut !\nRun!\tCours\xff!\n");
  expect_error<std::runtime_error>([&] { tfm::read_nmt_file(bad, 0); },
                                   {bad + ": line 3: invalid UTF-8", "0xff", "byte offset 10"});
  const std::string missing = dir.path("nope.txt");
  expect_error<std::runtime_error>([&] { tfm::read_nmt_file(missing, 0); }, {missing, "cannot open"});
  const std::string no_tab = dir.file("no_tab.txt", "Go. Va !\nHi. Salut !\n");
  expect_error<std::runtime_error>([&] { tfm::read_nmt_file(no_tab, 0); },
                                   {no_tab, "no sentence pairs", "line 1 has 1 tab-separated field"});
}

TEST(NmtData, BuildArraysTruncatesWithoutEosAndPads) {
  // ids: <unk>0 <pad>1 <bos>2 <eos>3 a4 b5 (b's count 1 < min_freq 2 -> unknown).
  const Tokens src = {{"a"}, {"a", "a", "a"}, {"b"}};
  const tfm::Vocab v(src, 2, kReserved);
  ASSERT_EQ(v.idx_to_token(), (std::vector<std::string>{"<unk>", "<pad>", "<bos>", "<eos>", "a"}));
  const auto arr = tfm::build_arrays_nmt({src, src, {}}, v, v, 3);
  EXPECT_EQ(arr.src, (std::vector<int64_t>{4, 3, 1, /**/ 4, 4, 4, /**/ 0, 3, 1}));
  EXPECT_EQ(arr.src_valid_len, (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(arr.tgt, arr.src);
  EXPECT_THROW(tfm::build_arrays_nmt({src, src, {}}, v, v, 0), std::invalid_argument);
  const tfm::Vocab no_eos(src, 0, {"<pad>"});
  expect_error<std::invalid_argument>([&] { tfm::build_arrays_nmt({src, src, {}}, no_eos, v, 3); }, {"'<eos>'"});
}

TEST(NmtData, EncodeSourceSentenceLikePredictSeq2seq) {
  const auto idx = fixture()["src_vocab"].get<std::vector<std::string>>();
  const auto id = [&](const std::string& t) {
    return static_cast<int64_t>(std::find(idx.begin(), idx.end(), t) - idx.begin());
  };
  const tfm::Vocab v = tfm::Vocab::from_idx_to_token(idx);
  const auto e = tfm::encode_source_sentence("Go .", v, 10);
  EXPECT_EQ(e.ids, (std::vector<int64_t>{id("go"), id("."), id("<eos>"), id("<pad>"), id("<pad>"), id("<pad>"),
                                         id("<pad>"), id("<pad>"), id("<pad>"), id("<pad>")}));
  EXPECT_EQ(e.valid_len, 3);
  // 4 tokens + <eos> = 5 > num_steps 3: truncated (no <eos>), valid length clamped to num_steps.
  const auto t = tfm::encode_source_sentence("i'm home zzz .", v, 3);
  EXPECT_EQ(t.ids, (std::vector<int64_t>{id("i'm"), id("home"), 0}));
  EXPECT_EQ(t.valid_len, 3);
}

TEST(Vocab, OrdersByFrequencyThenFirstSeen) {
  // Counts x3 c2 a2 d1, first seen in the order c x a d: the tie c/a keeps first-seen order; min_freq 2 stops at d.
  const Tokens lines = {{"c", "x", "a"}, {"x", "d", "a", "c", "x"}};
  const tfm::Vocab v(lines, 2, {"<pad>"});
  EXPECT_EQ(v.idx_to_token(), (std::vector<std::string>{"<unk>", "<pad>", "x", "c", "a"}));
  EXPECT_EQ(v["a"], 4);
  EXPECT_EQ(v["d"], 0);
  EXPECT_EQ(v.to_token(2), "x");
  expect_error<std::out_of_range>([&] { v.to_token(5); }, {"id 5", "[0, 5)"});
  EXPECT_EQ(tfm::Vocab(lines, 0).size(), 5);  // <unk> x c a d
  expect_error<std::invalid_argument>([&] { tfm::Vocab(lines, 0, {"<pad>", "<pad>"}); }, {"'<pad>'"});
}

TEST(Vocab, SaveLoadRoundTrip) {
  TempDir dir;
  // "" (from d2l's split(' ') of double spaces) must survive, also as the last token.
  const tfm::Vocab v = tfm::Vocab::from_idx_to_token({"<unk>", "<pad>", "été", "", "l'eau"});
  const tfm::Vocab w = tfm::Vocab::from_idx_to_token({"<unk>", "a", ""});
  v.save(dir.path("v.txt"));
  w.save(dir.path("w.txt"));
  EXPECT_EQ(tfm::Vocab::load(dir.path("v.txt")).idx_to_token(), v.idx_to_token());
  EXPECT_EQ(tfm::Vocab::load(dir.path("w.txt")).idx_to_token(), w.idx_to_token());
  std::ifstream in(dir.path("w.txt"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "<unk>\na\n\n");
  expect_error<std::invalid_argument>(
      [&] { tfm::Vocab::from_idx_to_token({"<unk>", "a\nb"}).save(dir.path("x.txt")); }, {"token 1", "newline"});
}

TEST(Vocab, LoadErrors) {
  TempDir dir;
  const std::string missing = dir.path("missing.txt");
  expect_error<std::runtime_error>([&] { tfm::Vocab::load(missing); }, {missing, "cannot open"});
  const std::string empty = dir.file("empty.txt", "");
  expect_error<std::runtime_error>([&] { tfm::Vocab::load(empty); }, {empty, "empty"});
  const std::string dup = dir.file("dup.txt", "<unk>\na\nb\na\n");
  expect_error<std::runtime_error>([&] { tfm::Vocab::load(dup); },
                                   {dup, "line 4: duplicate token 'a'", "first on line 2"});
  const std::string no_unk = dir.file("no_unk.txt", "<pad>\n<unk>\n");
  expect_error<std::runtime_error>([&] { tfm::Vocab::load(no_unk); }, {no_unk, "line 1 is '<pad>'"});
}

TEST(NmtBatchSampler, EachIndexOncePerEpochLastBatchSmaller) {
  tfm::BatchSampler s(601, 64, 7);
  std::vector<int64_t> first_order;
  for (int e = 0; e < 3; ++e) {
    const auto batches = s.epoch();
    ASSERT_EQ(batches.size(), 10u);  // ceil(601 / 64)
    EXPECT_EQ(batches.back().size(), 601u - 9 * 64);
    std::vector<int64_t> all;
    for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
    if (e == 0) {
      first_order = all;
    } else {
      EXPECT_NE(all, first_order) << "epoch " << e << " repeats epoch 0's order";
    }
    std::vector<int64_t> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 601; ++i) ASSERT_EQ(sorted[i], i);
  }
  EXPECT_TRUE(tfm::BatchSampler(0, 4, 1).epoch().empty());
  EXPECT_THROW(tfm::BatchSampler(5, 0, 1), std::invalid_argument);
}

TEST(NmtBatchSampler, SeedAndStateReproduceOrder) {
  tfm::BatchSampler a(100, 8, 42), b(100, 8, 42), c(100, 8, 43);
  const auto ea = a.epoch();
  EXPECT_EQ(ea, b.epoch());
  EXPECT_NE(ea, c.epoch());
  // Restoring a checkpointed state continues with the same epochs.
  const std::string saved = a.state();
  const auto next = a.epoch();
  tfm::BatchSampler d(100, 8, 0);
  d.set_state(saved);
  EXPECT_EQ(d.epoch(), next);
  EXPECT_THROW(d.set_state("not a state"), std::invalid_argument);
}

}  // namespace
