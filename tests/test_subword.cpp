// SentencePiece subword vocabulary (src/text/subword.h) and corpus line reader (src/io/text_file.h), on the
// Multi30k English/French data in shared/data/multi30k.
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_util.h"
#include "text/subword.h"
#include "io/text_file.h"

namespace {

namespace fs = std::filesystem;
using tfm::read_lines;
using tfm::SubwordModel;
using tfm::SubwordTrainOptions;

std::string multi30k(const std::string& name) { return tfm::test::data_dir() + "/multi30k/" + name; }

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("tfm_subword_" + std::to_string(::getpid()) + "_" +
                                         info->test_suite_name() + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name, const std::string& bytes) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string gz_file(const std::string& name, const std::string& bytes) const {
    const std::string p = path(name);
    gzFile f = gzopen(p.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), (int)bytes.size());
    }
    gzclose(f);
    return p;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& dir() const { return path_; }

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
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// SentencePiece's remove_extra_whitespaces: runs of ' ' become one, leading/trailing ' ' dropped.
std::string collapse_spaces(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::vector<std::string> first_lines(const std::string& path, size_t n) {
  auto lines = read_lines(path);
  lines.resize(std::min(n, lines.size()));
  return lines;
}

// Joint English+French corpus: first 2000 lines of each side of the training set.
const std::vector<std::string>& small_joint_corpus() {
  static const std::vector<std::string> corpus = [] {
    auto en = first_lines(multi30k("train.en.gz"), 2000);
    auto fr = first_lines(multi30k("train.fr.gz"), 2000);
    en.insert(en.end(), fr.begin(), fr.end());
    return en;
  }();
  return corpus;
}

// ---------------------------------------------------------------------------------------------------------------
// TextFile

TEST(TextFile, ReadsMulti30kGzip) {
  const auto en = read_lines(multi30k("train.en.gz"));
  ASSERT_EQ(en.size(), 29000u);
  EXPECT_EQ(en[0], "Two young, White males are outside near many bushes.");
  const auto fr = read_lines(multi30k("train.fr.gz"));
  ASSERT_EQ(fr.size(), 29000u);
  EXPECT_EQ(fr[0], "Deux jeunes hommes blancs sont dehors près de buissons.");
  EXPECT_EQ(read_lines(multi30k("val.en.gz")).size(), 1014u);
  EXPECT_EQ(read_lines(multi30k("val.fr.gz")).size(), 1014u);
  EXPECT_EQ(read_lines(multi30k("test_2016_flickr.en.gz")).size(), 1000u);
  EXPECT_EQ(read_lines(multi30k("test_2016_flickr.fr.gz")).size(), 1000u);
}

TEST(TextFile, PlainAndGzipGiveSameLines) {
  TempDir tmp;
  const std::string text = "première ligne\r\n\nthird line  \nlast without newline";
  const std::vector<std::string> expected = {"première ligne", "", "third line  ", "last without newline"};
  EXPECT_EQ(read_lines(tmp.file("a.txt", text)), expected);
  EXPECT_EQ(read_lines(tmp.gz_file("a.txt.gz", text)), expected);
  // A final '\n' does not add an empty line; a lone '\n' is one empty line.
  EXPECT_EQ(read_lines(tmp.file("b.txt", "x\n")), std::vector<std::string>{"x"});
  EXPECT_EQ(read_lines(tmp.file("c.txt", "\n")), std::vector<std::string>{""});
  // Only one trailing '\r' is removed, and only at the end of a line.
  EXPECT_EQ(read_lines(tmp.file("d.txt", "a\rb\r\r\n")), std::vector<std::string>{"a\rb\r"});
}

TEST(TextFile, InvalidUtf8NamesLine) {
  TempDir tmp;
  const std::string text = "ok\nfine é\nbad \xff here\nnever read \xc3\n";
  const std::string plain = tmp.file("bad.txt", text);
  expect_error<std::runtime_error>([&] { read_lines(plain); },
                                   {plain + ": line 3: invalid UTF-8 at byte offset 4 (byte 0xff)"});
  const std::string gz = tmp.gz_file("bad.txt.gz", text);
  expect_error<std::runtime_error>([&] { read_lines(gz); }, {gz + ": line 3: invalid UTF-8"});
  // A lone lead byte at the end of a line (before '\r\n') is a truncated sequence.
  const std::string cut = tmp.file("cut.txt", "a\n\xc3\r\n");
  expect_error<std::runtime_error>([&] { read_lines(cut); }, {cut + ": line 2: invalid UTF-8 at byte offset 0 (byte 0xc3)"});
}

TEST(TextFile, EmptyFileIsAnError) {
  TempDir tmp;
  const std::string plain = tmp.file("empty.txt", "");
  expect_error<std::runtime_error>([&] { read_lines(plain); }, {plain + ": empty file"});
  const std::string gz = tmp.gz_file("empty.txt.gz", "");
  ASSERT_GT(fs::file_size(gz), 0u);  // a valid gzip stream of nothing
  expect_error<std::runtime_error>([&] { read_lines(gz); }, {gz + ": empty file"});
}

TEST(TextFile, MissingFileNamesPath) {
  const std::string missing = multi30k("no_such_file.en.gz");
  expect_error<std::runtime_error>([&] { read_lines(missing); }, {missing, "cannot open", "No such file"});
}

TEST(TextFile, TruncatedGzipIsAnError) {
  TempDir tmp;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i) + " of a gzip file\n";
  const std::string full = slurp(tmp.gz_file("full.gz", text));
  const std::string cut = tmp.file("cut.gz", full.substr(0, full.size() / 2));
  expect_error<std::runtime_error>([&] { read_lines(cut); }, {cut + ": read error", "unexpected end of file"});
}

TEST(TextFile, FindInvalidUtf8) {
  using tfm::find_invalid_utf8;
  const struct {
    std::string text;
    std::optional<size_t> bad;
  } cases[] = {
      {"", std::nullopt},
      {"plain ascii", std::nullopt},
      {"\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e", std::nullopt},  // été € 𝄞
      {"\xef\xbf\xbf\xf4\x8f\xbf\xbf", std::nullopt},                    // U+FFFF, U+10FFFF
      {"a\x80", 1},                                                      // lone continuation byte
      {"ab\xc0\xaf", 2},                                                 // overlong '/'
      {"\xc1\xbf", 0},                                                   // overlong
      {"\xe0\x80\xaf", 0},                                               // overlong 3-byte
      {"x\xed\xa0\x80", 1},                                              // surrogate U+D800
      {"\xf0\x80\x80\xaf", 0},                                           // overlong 4-byte
      {"\xf4\x90\x80\x80", 0},                                           // U+110000
      {"\xf5\x80\x80\x80", 0},                                           // lead byte beyond Unicode
      {"ok\xe2\x82", 2},                                                 // truncated at end
      {"\xe2\x82z", 0},                                                  // bad continuation
      {"\xff", 0},
  };
  for (const auto& c : cases) EXPECT_EQ(find_invalid_utf8(c.text), c.bad) << "case: " << c.text;
}

// ---------------------------------------------------------------------------------------------------------------
// Subword

// One vocab-500 joint unigram model shared by the read-only tests (training takes about a second).
class Subword : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("tfm_subword_model_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    SubwordTrainOptions opt;
    opt.vocab_size = 500;
    opt.num_threads = 1;
    tfm::train_subword_model(small_joint_corpus(), (*dir_ / "joint").string(), opt);
    model_ = new SubwordModel(SubwordModel::load((*dir_ / "joint.model").string()));
  }
  static void TearDownTestSuite() {
    delete model_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  static const SubwordModel& model() { return *model_; }
  static std::string model_path() { return (*dir_ / "joint.model").string(); }

 private:
  static inline fs::path* dir_ = nullptr;
  static inline SubwordModel* model_ = nullptr;
};

TEST_F(Subword, SpecialIdsFollowSeq2SeqConventions) {
  const auto& m = model();
  EXPECT_EQ(m.vocab_size(), 500);
  EXPECT_EQ(m.unk_id(), 0);
  EXPECT_EQ(m.pad_id(), 1);
  EXPECT_EQ(m.bos_id(), 2);
  EXPECT_EQ(m.eos_id(), 3);
  EXPECT_EQ(m.id_to_piece(0), "<unk>");
  EXPECT_EQ(m.id_to_piece(1), "<pad>");
  EXPECT_EQ(m.id_to_piece(2), "<bos>");
  EXPECT_EQ(m.id_to_piece(3), "<eos>");
  EXPECT_EQ(m.piece_to_id("<eos>"), 3);
  EXPECT_EQ(m.piece_to_id("no such piece"), 0);
  // Special pieces are never produced from text: "<pad>" is segmented as ordinary characters ('<' and '>' do not
  // occur in the corpus, so they become <unk>).
  for (int64_t id : m.encode("<pad> <bos> <eos>")) {
    EXPECT_NE(id, m.pad_id());
    EXPECT_NE(id, m.bos_id());
    EXPECT_NE(id, m.eos_id());
  }
  // Learned pieces include whole frequent words of both languages (joint vocabulary).
  EXPECT_GT(m.piece_to_id("\xe2\x96\x81the"), 3);  // "▁the"
  EXPECT_GT(m.piece_to_id("\xe2\x96\x81" "de"), 3);   // "▁de"
}

TEST_F(Subword, RoundTripsValidationSentences) {
  const auto& m = model();
  int checked = 0;
  for (const char* side : {"val.en.gz", "val.fr.gz"}) {
    for (const auto& s : first_lines(multi30k(side), 200)) {
      const auto ids = m.encode(s);
      ASSERT_FALSE(ids.empty()) << s;
      for (int64_t id : ids) ASSERT_TRUE(id >= 0 && id < m.vocab_size()) << s;
      EXPECT_EQ(m.decode(ids), collapse_spaces(s)) << side;
      // Pieces and ids agree, and the pieces spell the sentence with '▁' for each (collapsed) space.
      const auto pieces = m.encode_pieces(s);
      ASSERT_EQ(pieces.size(), ids.size());
      std::string spelled;
      for (size_t i = 0; i < pieces.size(); ++i) {
        EXPECT_EQ(m.piece_to_id(pieces[i]), ids[i]) << pieces[i];
        EXPECT_EQ(m.id_to_piece(ids[i]), pieces[i]);
        spelled += pieces[i];
      }
      std::string expected = "\xe2\x96\x81";
      for (char c : collapse_spaces(s)) expected += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
      EXPECT_EQ(spelled, expected);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 400);
}

TEST_F(Subword, FrequentWordsAreSinglePieces) {
  // A sentence is never longer in pieces than in characters (+1 for the leading '▁'), and common words are single
  // pieces: a unigram model of 500 pieces trained on this corpus keeps "▁a" and "▁man".
  const auto& m = model();
  const auto pieces = m.encode_pieces("A man is sitting.");
  EXPECT_LE(pieces.size(), std::string("A man is sitting.").size() + 1);
  EXPECT_NE(std::find(pieces.begin(), pieces.end(), "\xe2\x96\x81man"), pieces.end());
}

TEST_F(Subword, UnknownCharactersMapToUnk) {
  const auto& m = model();
  const auto ids = m.encode("\xe2\x98\x83");  // U+2603 snowman, absent from the training data
  EXPECT_NE(std::find(ids.begin(), ids.end(), m.unk_id()), ids.end());
  EXPECT_EQ(m.decode({m.unk_id()}), " \xe2\x81\x87 ");  // SentencePiece's unk_surface " ⁇ "
  // Control ids decode to nothing.
  auto with_controls = m.encode("a dog");
  const std::string plain = m.decode(with_controls);
  with_controls.insert(with_controls.begin(), m.bos_id());
  with_controls.push_back(m.eos_id());
  with_controls.push_back(m.pad_id());
  EXPECT_EQ(m.decode(with_controls), plain);
  EXPECT_EQ(plain, "a dog");
}

TEST_F(Subword, DecodeRejectsOutOfRangeIds) {
  const auto& m = model();
  expect_error<std::out_of_range>([&] { m.decode({5, 6, 500}); }, {"id 500 at position 2", "[0, 500)"});
  expect_error<std::out_of_range>([&] { m.decode({-1}); }, {"id -1 at position 0"});
  expect_error<std::out_of_range>([&] { m.id_to_piece(500); }, {"id 500", "[0, 500)"});
  expect_error<std::invalid_argument>([&] { m.encode("bad \xff"); }, {"invalid UTF-8 at byte offset 4"});
}

TEST_F(Subword, WritesStandardModelFileAtomically) {
  TempDir tmp;
  SubwordTrainOptions opt;
  opt.vocab_size = 300;
  // An explicit ".model" path is used as is; nothing else (no temp file, no .vocab) is left in the folder.
  tfm::train_subword_model(small_joint_corpus(), tmp.path("exact.model"), opt);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.dir())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"exact.model"});
  EXPECT_EQ(SubwordModel::load(tmp.path("exact.model")).vocab_size(), 300);
  // The serialized ModelProto starts with field 1 (repeated SentencePiece pieces, wire type 2): byte 0x0a, and
  // the first piece is "<unk>".
  const std::string bytes = slurp(tmp.path("exact.model"));
  ASSERT_GT(bytes.size(), 16u);
  EXPECT_EQ(bytes[0], '\x0a');
  EXPECT_NE(bytes.substr(0, 16).find("<unk>"), std::string::npos);
}

TEST(SubwordTrain, SameOptionsGiveIdenticalModelFiles) {
  TempDir tmp;
  for (int threads : {1, 2}) {
    SubwordTrainOptions opt;
    opt.vocab_size = 500;
    opt.num_threads = threads;
    const std::string a = tmp.path("a" + std::to_string(threads)), b = tmp.path("b" + std::to_string(threads));
    tfm::train_subword_model(small_joint_corpus(), a, opt);
    tfm::train_subword_model(small_joint_corpus(), b, opt);
    const std::string ma = slurp(a + ".model"), mb = slurp(b + ".model");
    ASSERT_FALSE(ma.empty());
    EXPECT_TRUE(ma == mb) << "num_threads " << threads << ": models differ (" << ma.size() << " vs " << mb.size()
                          << " bytes)";
  }
  // Sampling a subset of the corpus is reproducible, and does sample (the model differs from the full-corpus one).
  SubwordTrainOptions opt;
  opt.vocab_size = 300;
  tfm::train_subword_model(small_joint_corpus(), tmp.path("all"), opt);
  opt.input_sentence_size = 1000;
  tfm::train_subword_model(small_joint_corpus(), tmp.path("s1"), opt);
  tfm::train_subword_model(small_joint_corpus(), tmp.path("s2"), opt);
  EXPECT_TRUE(slurp(tmp.path("s1.model")) == slurp(tmp.path("s2.model")));
  EXPECT_FALSE(slurp(tmp.path("s1.model")) == slurp(tmp.path("all.model")));
}

TEST(SubwordTrain, BpeModelRoundTrips) {
  TempDir tmp;
  SubwordTrainOptions opt;
  opt.vocab_size = 400;
  opt.model_type = "bpe";
  tfm::train_subword_model(small_joint_corpus(), tmp.path("bpe"), opt);
  const auto m = SubwordModel::load(tmp.path("bpe.model"));
  EXPECT_EQ(m.vocab_size(), 400);
  EXPECT_EQ(m.id_to_piece(1), "<pad>");
  for (const auto& s : first_lines(multi30k("val.fr.gz"), 50)) EXPECT_EQ(m.decode(m.encode(s)), collapse_spaces(s));
}

TEST(SubwordTrain, RejectsBadOptions) {
  TempDir tmp;
  const std::string prefix = tmp.path("m");
  const std::vector<std::string> corpus = {"a small corpus", "with two lines"};
  SubwordTrainOptions opt;
  expect_error<std::invalid_argument>([&] { tfm::train_subword_model({}, prefix, opt); }, {"no training sentences"});
  expect_error<std::invalid_argument>([&] { tfm::train_subword_model({"ok", "two\nlines"}, prefix, opt); },
                                      {"sentence 1 contains '\\n'"});
  expect_error<std::invalid_argument>([&] { tfm::train_subword_model({"ok", "bad \xc3"}, prefix, opt); },
                                      {"sentence 1: invalid UTF-8 at byte offset 4"});
  opt.vocab_size = 4;
  expect_error<std::invalid_argument>([&] { tfm::train_subword_model(corpus, prefix, opt); }, {"vocab_size 4"});
  opt = {};
  opt.model_type = "word";
  expect_error<std::invalid_argument>([&] { tfm::train_subword_model(corpus, prefix, opt); }, {"model_type 'word'"});
  opt = {};
  opt.num_threads = 0;
  expect_error<std::invalid_argument>([&] { tfm::train_subword_model(corpus, prefix, opt); }, {"num_threads 0"});
  opt = {};
  opt.character_coverage = 0.0;
  expect_error<std::invalid_argument>([&] { tfm::train_subword_model(corpus, prefix, opt); },
                                      {"character_coverage 0"});
  // SentencePiece's own failure: 8000 pieces cannot be drawn from two short lines.
  opt = {};
  expect_error<std::runtime_error>([&] { tfm::train_subword_model(corpus, prefix, opt); },
                                   {"SentencePiece training failed", "Vocabulary size"});
  EXPECT_FALSE(fs::exists(prefix + ".model"));
}

TEST(SubwordLoad, MissingAndCorruptModelNamePath) {
  TempDir tmp;
  const std::string missing = tmp.path("missing.model");
  expect_error<std::runtime_error>([&] { SubwordModel::load(missing); }, {missing, "No such file"});

  std::mt19937 rng(123);
  std::string junk(4096, '\0');
  for (auto& c : junk) c = static_cast<char>(rng() & 0xff);
  const std::string corrupt = tmp.file("corrupt.model", junk);
  expect_error<std::runtime_error>([&] { SubwordModel::load(corrupt); }, {corrupt, "not a SentencePiece model"});

  const std::string empty = tmp.file("empty.model", "");
  expect_error<std::runtime_error>([&] { SubwordModel::load(empty); }, {empty, "empty file"});

  // A readable text file is not a model either.
  const std::string text = tmp.file("text.model", "Deux jeunes hommes blancs sont dehors.\n");
  expect_error<std::runtime_error>([&] { SubwordModel::load(text); }, {text, "not a SentencePiece model"});
}

}  // namespace
