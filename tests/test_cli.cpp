// End-to-end tests of the `tfm` command-line tool, run as a subprocess (TFM_BINARY).
// Each test gets a fresh folder under testing::TempDir(); the child runs with OMP_NUM_THREADS=1.
// Expected values come from the reference facts of ../shared/data/README.md, from the fixtures' config.json,
// or are computed by hand in the comments; none is copied from tfm's own output.
#include "test_paths.h"
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "run_tfm.h"
#include "test_util.h"

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

using RunResult = TfmRun;

std::string read_file(const std::string& path) { return slurp(path); }

void write_file(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> lines;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

// A fresh folder per test, removed unless the test failed; tfm runs through tests/run_tfm.h.
using ScopedDir = TempFolder;

RunResult run_tfm(const std::string& dir, const std::vector<std::string>& args, const std::string& stdin_text = "") {
  return run_tfm_in(dir, args, stdin_text);
}

std::string describe(const RunResult& r) { return r.describe(); }

// A failed run: exited (no signal, so no crash) with a non-zero status, and said on stderr, in one line
// starting "tfm: error:", something that contains `needle`.
void expect_clean_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.signal, 0) << describe(r);
  EXPECT_GT(r.exit_code, 0) << describe(r);
  std::vector<std::string> lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << describe(r);
  EXPECT_EQ(lines[0].rfind("tfm: error: ", 0), 0u) << describe(r);
  EXPECT_NE(lines[0].find(needle), std::string::npos) << "expected '" << needle << "' in: " << lines[0];
}

std::string bert_vocab_dir() { return data_dir() + "/bert-base-uncased"; }

// A model folder for the encode tests: tests/fixtures/bert (vocab_size 60, hidden_size 32,
// max_position_embeddings 20, 2 layers) plus a 60-line WordPiece vocab.txt.
std::string make_bert_dir(const std::string& dir) {
  std::string m = dir + "/bert";
  fs::create_directories(m);
  fs::copy_file(fixture("bert/config.json"), m + "/config.json");
  fs::copy_file(fixture("bert/model.safetensors"), m + "/model.safetensors");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  const char* words[] = {"the",   "a",     "an",    "time",  "flies", "like",  "arrow", "fruit", "banana", "i",
                         "have",  "dream", "cat",   "dog",   "sat",   "on",    "mat",   "is",    "was",    "and",
                         "or",    "to",    "of",    "in",    "it",    "he",    "she",   "we",    "they",   "you",
                         "red",   "blue",  "green", "big",   "small", "run",   "walk",  "eat",   "drink",  "sleep",
                         "house", "car",   "tree",  "bird",  "fish",  "sun",   "moon",  "star",  "water",  "fire",
                         "one",   "two",   "three", "four",  "five"};
  static_assert(sizeof(words) / sizeof(words[0]) == 55);
  for (const char* w : words) vocab += std::string(w) + "\n";
  write_file(m + "/vocab.txt", vocab);
  return m;
}

// A copy of tests/fixtures/d2l_trained (transformer_seq2seq, src/tgt vocab 189/201) to break for translate tests.
std::string make_seq2seq_dir(const std::string& dir) {
  std::string m = dir + "/seq2seq";
  fs::copy(fixture("d2l_trained"), m, fs::copy_options::recursive);
  return m;
}

std::vector<int64_t> shape_of(const Tensor& t) { return t.shape(); }

// ------------------------------------------------------------------------------------------------ tokenize

TEST(CliTokenize, SingleSentenceWithoutSpecialTokens) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  RunResult r = run_tfm(dir, {"tokenize", "--model", bert_vocab_dir(), "--no-special-tokens", "time flies like an arrow"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  nlohmann::json j = nlohmann::json::parse(r.out);  // throws (test error) if not valid JSON
  EXPECT_EQ(j.at("input_ids").get<std::vector<int64_t>>(), (std::vector<int64_t>{2051, 10029, 2066, 2019, 8612}));
  EXPECT_EQ(j.at("token_type_ids").get<std::vector<int64_t>>(), std::vector<int64_t>(5, 0));
  EXPECT_EQ(j.at("attention_mask").get<std::vector<int64_t>>(), std::vector<int64_t>(5, 1));
  EXPECT_EQ(j.at("tokens").size(), 5u);
}

TEST(CliTokenize, PairLayout) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  RunResult r = run_tfm(dir, {"tokenize", "--model", bert_vocab_dir(), "time flies like an arrow", "--pair",
                              "I have a dream."});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  nlohmann::json j = nlohmann::json::parse(r.out);
  // [CLS] a [SEP] b [SEP]; a and b from the README's reference facts.
  std::vector<int64_t> ids = {101, 2051, 10029, 2066, 2019, 8612, 102, 1045, 2031, 1037, 3959, 1012, 102};
  std::vector<int64_t> types = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(j.at("input_ids").get<std::vector<int64_t>>(), ids);
  EXPECT_EQ(j.at("token_type_ids").get<std::vector<int64_t>>(), types);
  EXPECT_EQ(j.at("attention_mask").get<std::vector<int64_t>>(), std::vector<int64_t>(13, 1));
  EXPECT_EQ(j.at("tokens").front(), "[CLS]");
  EXPECT_EQ(j.at("tokens").back(), "[SEP]");
}

// ------------------------------------------------------------------------------------------------ encode

TEST(CliEncode, WritesLastHiddenState) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  // "the cat sat on the mat" -> 6 words in the vocab, + [CLS] [SEP] = 8 tokens.
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--threads", "1", "--text", "the cat sat on the mat", "-o",
                              dir + "/h.npy"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("last_hidden_state shape: [1, 8, 32]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens: [CLS] the cat sat on the mat [SEP]"), std::string::npos) << r.out;
  // ids: line numbers in vocab.txt (0-based): [CLS]=2, the=5, cat=17, sat=19, on=20, mat=21, [SEP]=3.
  EXPECT_NE(r.out.find("input_ids: [2, 5, 17, 19, 20, 5, 21, 3]"), std::string::npos) << r.out;
  Tensor h = load_npy(dir + "/h.npy");
  EXPECT_EQ(shape_of(h), (std::vector<int64_t>{1, 8, 32}));
  for (int64_t i = 0; i < h.numel(); ++i) ASSERT_TRUE(std::isfinite(h.f32()[i])) << i;
}

TEST(CliEncode, BatchIsPadded) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  // 2 + 2 and 5 + 2 tokens: padded to L = 7.
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--threads", "1", "--text", "red car", "--text",
                              "the big dog was red", "-o", dir + "/h.npy"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("last_hidden_state shape: [2, 7, 32]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("input_ids: [2, 35, 46, 3, 0, 0, 0]"), std::string::npos) << r.out;
  Tensor h = load_npy(dir + "/h.npy");
  EXPECT_EQ(shape_of(h), (std::vector<int64_t>{2, 7, 32}));
}

TEST(CliEncode, AllLayersAndPooled) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--threads", "1", "--text", "one two", "--text", "three",
                              "--all-layers", "-o", dir + "/all.npy", "--pooled", dir + "/pooled.npy"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  // num_hidden_layers 2 -> 3 stacked outputs; B = 2, L = 4 ([CLS] one two [SEP]).
  EXPECT_NE(r.out.find("hidden_states shape: [3, 2, 4, 32]"), std::string::npos) << r.out;
  EXPECT_EQ(shape_of(load_npy(dir + "/all.npy")), (std::vector<int64_t>{3, 2, 4, 32}));
  EXPECT_EQ(shape_of(load_npy(dir + "/pooled.npy")), (std::vector<int64_t>{2, 32}));
}

TEST(CliEncode, RandomInitBertBase) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  RunResult r = run_tfm(dir, {"encode", "--model", bert_vocab_dir(), "--init", "random", "--seed", "0",
                              "--no-special-tokens", "--threads", "1", "--text", "time flies like an arrow"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("input_ids: [2051, 10029, 2066, 2019, 8612]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shape: [1, 5, 768]"), std::string::npos) << r.out;
}

TEST(CliEncode, MaxLengthTruncatesToPositionLimit) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  std::string text;
  for (int i = 0; i < 30; ++i) text += "the ";
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--threads", "1", "--max-length", "20", "--text", text});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("last_hidden_state shape: [1, 20, 32]"), std::string::npos) << r.out;
}

// ------------------------------------------------------------------------------------------------ train, translate

// The first 60 lines of fra.txt, copied into `dir` (the corpus itself stays in ../shared/data).
std::string make_corpus(const std::string& dir) {
  std::ifstream in(data_dir() + "/fra-eng/fra.txt", std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << data_dir() << "/fra-eng/fra.txt";
  std::string text, line;
  for (int i = 0; i < 60 && std::getline(in, line); ++i) text += line + "\n";
  std::string path = dir + "/corpus.txt";
  write_file(path, text);
  return path;
}

std::vector<std::string> train_args(const std::string& data, const std::string& out, const std::string& seed,
                                    const std::string& epochs = "30") {
  return {"train",     "--data", data,  "--out",     out, "--num-examples", "50", "--epochs", epochs,
          "--threads", "1",      "--seed", seed, "--no-progress"};
}

double csv_loss(const std::string& line, const std::vector<std::string>& header) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
  for (size_t i = 0; i < header.size() && i < cells.size(); ++i)
    if (header[i] == "loss") return std::stod(cells[i]);
  ADD_FAILURE() << "no 'loss' column in train_log.csv line: " << line;
  return 0;
}

TEST(CliTrain, TrainTranslateEndToEnd) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string data = make_corpus(dir), out = dir + "/model";
  RunResult r = run_tfm(dir, train_args(data, out, "0"));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* f : {"config.json", "model.safetensors", "src_vocab.txt", "tgt_vocab.txt", "train_log.csv",
                        "loss.png"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;

  std::vector<std::string> log = lines_of(read_file(out + "/train_log.csv"));
  ASSERT_EQ(log.size(), 31u) << "header + 30 epochs";
  std::vector<std::string> header;
  {
    std::stringstream ss(log[0]);
    for (std::string c; std::getline(ss, c, ',');) header.push_back(c);
  }
  double first = csv_loss(log[1], header), last = csv_loss(log[30], header);
  EXPECT_LT(last, first) << "loss did not decrease: " << log[1] << " -> " << log[30];

  std::string png = read_file(out + "/loss.png");
  ASSERT_GE(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));

  RunResult t = run_tfm(dir, {"translate", "--model", out, "--threads", "1", "go ."});
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  EXPECT_EQ(lines_of(t.out).size(), 1u) << t.out;

  RunResult s = run_tfm(dir, {"translate", "--model", out, "--threads", "1"}, "go .\ni lost .\n");
  ASSERT_EQ(s.exit_code, 0) << describe(s);
  EXPECT_EQ(lines_of(s.out).size(), 2u) << s.out;

  RunResult b = run_tfm(dir, {"translate", "--model", out, "--threads", "1", "--beam", "3", "go .", "hi ."});
  ASSERT_EQ(b.exit_code, 0) << describe(b);
  EXPECT_EQ(lines_of(b.out).size(), 2u) << b.out;

  std::string att = dir + "/att.png";
  RunResult a = run_tfm(dir, {"translate", "--model", out, "--threads", "1", "--attention-png", att, "go ."});
  ASSERT_EQ(a.exit_code, 0) << describe(a);
  EXPECT_EQ(lines_of(a.out).size(), 1u) << a.out;
  std::string att_bytes = read_file(att);
  ASSERT_GE(att_bytes.size(), 8u);
  EXPECT_EQ(att_bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST(CliTrain, SameSeedSameWeightsOtherSeedOtherWeights) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string data = make_corpus(dir);
  for (auto [name, seed] : {std::pair{"a", "7"}, std::pair{"b", "7"}, std::pair{"c", "8"}}) {
    RunResult r = run_tfm(dir, train_args(data, dir + "/" + name, seed, "5"));
    ASSERT_EQ(r.exit_code, 0) << describe(r);
  }
  std::string a = read_file(dir + "/a/model.safetensors"), b = read_file(dir + "/b/model.safetensors"),
              c = read_file(dir + "/c/model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "same seed and threads gave different model.safetensors";
  EXPECT_FALSE(a == c) << "different seeds gave identical model.safetensors";
}

// ------------------------------------------------------------------------------------------------ bleu

TEST(CliBleu, HandComputedValue) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  // pred "il est riche ." vs label "il est calme .", equal lengths (brevity factor 1).
  // Unigrams: il, est, . match, riche does not -> p1 = 3/4.
  // Bigrams: "il est" matches, "est riche" and "riche ." do not -> p2 = 1/3.
  // BLEU = p1^(1/2) * p2^(1/4) = 0.8660 * 0.7598 = 0.6580.
  RunResult r = run_tfm(dir, {"bleu", "--k", "2", "il est riche .", "il est calme ."});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, "0.658\n");
}

TEST(CliBleu, EmptyPredictionIsZero) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  RunResult r = run_tfm(dir, {"bleu", "", "il est calme ."});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, "0.000\n");
}

// ------------------------------------------------------------------------------------------------ bad input

TEST(CliBadInput, MissingModelFolder) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  RunResult r = run_tfm(dir, {"encode", "--model", dir + "/no_such_model", "--text", "the cat"});
  expect_clean_error(r, "no_such_model");
}

TEST(CliBadInput, ConfigIsNotJson) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  write_file(m + "/config.json", "{\"hidden_size\": 32,");
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat"});
  expect_clean_error(r, "config.json");
}

TEST(CliBadInput, HiddenSizeNotDivisibleByHeads) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  nlohmann::json c = nlohmann::json::parse(read_file(m + "/config.json"));
  c["num_attention_heads"] = 5;  // 32 % 5 != 0
  write_file(m + "/config.json", c.dump(2));
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat"});
  expect_clean_error(r, "num_attention_heads");
}

TEST(CliBadInput, TruncatedSafetensors) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  std::string bytes = read_file(m + "/model.safetensors");
  write_file(m + "/model.safetensors", bytes.substr(0, bytes.size() / 2));
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat"});
  expect_clean_error(r, "model.safetensors");
}

TEST(CliBadInput, SafetensorsHeaderLengthBeyondFile) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  std::string bytes = read_file(m + "/model.safetensors");
  uint64_t n = bytes.size() + 1000;  // little-endian u64 header length larger than the whole file
  for (int i = 0; i < 8; ++i) bytes[i] = (char)((n >> (8 * i)) & 0xff);
  write_file(m + "/model.safetensors", bytes);
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat"});
  expect_clean_error(r, "model.safetensors");
}

TEST(CliBadInput, TextLongerThanMaxPositionEmbeddings) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  std::string text;
  for (int i = 0; i < 30; ++i) text += "the ";  // 30 + 2 tokens > max_position_embeddings 20
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", text});
  expect_clean_error(r, "max_position_embeddings");
}

TEST(CliBadInput, InvalidUtf8Text) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "\xff\xfe"});
  expect_clean_error(r, "UTF-8");
}

TEST(CliBadInput, EmptyText) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", ""});
  expect_clean_error(r, "empty");
}

TEST(CliBadInput, TrainOnEmptyFile) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  write_file(dir + "/empty.txt", "");
  RunResult r = run_tfm(dir, train_args(dir + "/empty.txt", dir + "/out", "0", "1"));
  expect_clean_error(r, "no sentence pairs");
}

TEST(CliBadInput, TrainOnFileWithoutTab) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  write_file(dir + "/notab.txt", "go . va !\nhi . salut !\n");
  RunResult r = run_tfm(dir, train_args(dir + "/notab.txt", dir + "/out", "0", "1"));
  expect_clean_error(r, "no sentence pairs");
}

TEST(CliBadInput, TrainOnNonUtf8File) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  write_file(dir + "/latin1.txt", "Go.\tVa !\nCaf\xe9.\tCaf\xe9 !\n");  // Latin-1 e-acute
  RunResult r = run_tfm(dir, train_args(dir + "/latin1.txt", dir + "/out", "0", "1"));
  expect_clean_error(r, "UTF-8");
}

TEST(CliBadInput, TrainOutUnderRegularFile) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string data = make_corpus(dir);
  write_file(dir + "/file.txt", "x");
  RunResult r = run_tfm(dir, train_args(data, dir + "/file.txt/sub", "0", "1"));
  expect_clean_error(r, "file.txt");
}

TEST(CliBadInput, TranslateVocabDoesNotMatchConfig) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_seq2seq_dir(dir);
  std::string tgt = read_file(m + "/tgt_vocab.txt");
  write_file(m + "/tgt_vocab.txt", tgt + "extraword\n");  // 202 lines, config says tgt_vocab_size 201
  RunResult r = run_tfm(dir, {"translate", "--model", m, "go ."});
  expect_clean_error(r, "tgt_vocab_size");
}

TEST(CliBadInput, TranslateNaNWeight) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_seq2seq_dir(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    SafeTensors st = SafeTensors::open(m + "/model.safetensors");
    for (const auto& name : st.names()) {
      tensors.emplace_back(name, st.get(name).clone());  // owned: the file is rewritten below
    }
  }
  ASSERT_FALSE(tensors.empty());
  ASSERT_EQ(tensors[0].second.dtype(), DType::F32);
  tensors[0].second.f32()[0] = std::nanf("");
  save_safetensors(m + "/model.safetensors", tensors);
  RunResult r = run_tfm(dir, {"translate", "--model", m, "go ."});
  expect_clean_error(r, "NaN");
}

TEST(CliBadInput, UnknownSubcommand) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  RunResult r = run_tfm(dir, {"frobnicate"});
  EXPECT_EQ(r.signal, 0) << describe(r);
  EXPECT_GT(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("frobnicate"), std::string::npos) << r.err;
}

TEST(CliBadInput, TrainWithoutData) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  RunResult r = run_tfm(dir, {"train", "--out", dir + "/out"});
  EXPECT_EQ(r.signal, 0) << describe(r);
  EXPECT_GT(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("--data"), std::string::npos) << r.err;
}

// Training writes config.json and model.safetensors: into a folder that already holds files (here a BERT model)
// only with --overwrite.
TEST(CliBadInput, TrainRefusesNonEmptyOutFolder) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string data = make_corpus(dir), m = make_bert_dir(dir);
  const std::string config_before = read_file(m + "/config.json");
  RunResult r = run_tfm(dir, train_args(data, m, "0", "1"));
  expect_clean_error(r, "already exists and is not an empty folder");
  EXPECT_EQ(read_file(m + "/config.json"), config_before);
  std::vector<std::string> args = train_args(data, m, "0", "1");
  args.push_back("--overwrite");
  r = run_tfm(dir, args);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(read_file(m + "/config.json").find("transformer_seq2seq"), std::string::npos);
  // Not even --overwrite writes a d2l model into a subword recipe run.
  write_file(m + "/spm.model", "x");
  r = run_tfm(dir, args);
  expect_clean_error(r, "holds a subword recipe run (spm.model)");
}

// Renaming a temp file over /dev/full (as root) would replace the device; over a symlink, the link.
TEST(CliBadInput, OutputToDeviceOrSymlink) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  if (fs::is_character_file("/dev/full")) {
    RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", "/dev/full"});
    expect_clean_error(r, std::strerror(ENOSPC));
    EXPECT_TRUE(fs::is_character_file("/dev/full"));
  }
  write_file(dir + "/real.npy", "old");
  fs::create_symlink(dir + "/real.npy", dir + "/link.npy");
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/link.npy"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(fs::is_symlink(dir + "/link.npy"));
  EXPECT_EQ(load_npy(dir + "/real.npy").shape(), (std::vector<int64_t>{1, 4, 32}));
  r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/x.npy", "--pooled", dir + "/x.npy"});
  expect_clean_error(r, "same file");
  r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/x.npy", "--pooled", dir + "/./x.npy"});
  expect_clean_error(r, "same file");
}

// A NaN weight must not turn into plausible numbers (masked softmax and LayerNorm could hide it).
TEST(CliBadInput, EncodeNaNWeight) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    SafeTensors st = SafeTensors::open(m + "/model.safetensors");
    for (const auto& name : st.names()) tensors.emplace_back(name, st.get(name).clone());
  }
  for (auto& [name, t] : tensors)
    if (name.find("layer.0.attention.self.query.weight") != std::string::npos) t.f32()[5] = std::nanf("");
  save_safetensors(m + "/model.safetensors", tensors);
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/o.npy"});
  expect_clean_error(r, "query.weight' contains NaN or Inf at element 5");
  EXPECT_FALSE(fs::exists(dir + "/o.npy"));
}

// Embedding tables are read in place and checked row by row as forward gathers them, which is what PyTorch
// propagates: a NaN in the row of a token the text does not use changes no output byte; an infinity in the row of
// [CLS] (id 2) or of position 1 is refused naming the table and the row, and no output is written.
TEST(CliBadInput, NonFiniteEmbeddingRowRefusedWhenGathered) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  RunResult clean = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/clean.npy"});
  ASSERT_EQ(clean.exit_code, 0) << describe(clean);
  std::vector<std::pair<std::string, Tensor>> original;
  {
    SafeTensors st = SafeTensors::open(m + "/model.safetensors");
    for (const auto& name : st.names()) original.emplace_back(name, st.get(name).clone());
  }
  // Writes the file with element `col` of row `row` of the table named `table` set to `v`.
  auto poke = [&](const std::string& table, int64_t row, int64_t col, float v) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    bool found = false;
    for (const auto& [name, t] : original) {
      Tensor c = t.clone();
      if (name.find(table) != std::string::npos) {
        ASSERT_LT(row, c.size(0)) << table;
        ASSERT_LT(col, c.size(1)) << table;
        c.f32()[row * c.size(1) + col] = v;
        found = true;
      }
      tensors.emplace_back(name, c);
    }
    ASSERT_TRUE(found) << table;
    save_safetensors(m + "/model.safetensors", tensors);
  };
  poke("embeddings.word_embeddings.weight", 4, 2, std::nanf(""));  // [MASK]: not in "[CLS] the cat [SEP]"
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/o.npy"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(read_file(dir + "/o.npy") == read_file(dir + "/clean.npy"));
  poke("embeddings.position_embeddings.weight", 10, 0, std::nanf(""));  // position 10: beyond the 4 tokens
  r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/o2.npy"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(read_file(dir + "/o2.npy") == read_file(dir + "/clean.npy"));

  poke("embeddings.word_embeddings.weight", 2, 5, INFINITY);
  r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/o3.npy"});
  expect_clean_error(r, "embedding table 'embeddings.word_embeddings.weight': row 2 contains NaN or Inf at column 5");
  EXPECT_FALSE(fs::exists(dir + "/o3.npy"));
  poke("embeddings.position_embeddings.weight", 1, 7, -INFINITY);
  r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "-o", dir + "/o4.npy"});
  expect_clean_error(r, "embedding table 'embeddings.position_embeddings.weight': row 1 contains NaN or Inf at column 7");
  EXPECT_FALSE(fs::exists(dir + "/o4.npy"));
}

// The packed copy is what is checked (the file is read once, by the packing): an infinity in a Linear packed
// alone (n == 1), in the fused QKV, and packed for each compute type, is refused naming the tensor and element.
TEST(CliBadInput, NonFiniteWeightRefusedWhateverThePacking) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  {
    SafeTensors st = SafeTensors::open(m + "/model.safetensors");
    for (const auto& name : st.names()) tensors.emplace_back(name, st.get(name).clone());
  }
  for (auto& [name, t] : tensors) {
    if (name.find("layer.1.intermediate.dense.weight") != std::string::npos) t.f32()[7] = INFINITY;
  }
  save_safetensors(m + "/model.safetensors", tensors);
  for (const char* dtype : {"fp32", "bf16", "int8"}) {
    RunResult r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat", "--dtype", dtype, "-o", dir + "/o.npy"});
    expect_clean_error(r, "intermediate.dense.weight' contains NaN or Inf at element 7");
    EXPECT_FALSE(fs::exists(dir + "/o.npy")) << dtype;
  }
}

// A `tfm convert --dtype bf16` folder is packed from its bf16 values as stored (no round trip through fp32): the
// same packed weights, hence the same bytes out, as the fp32 folder packed for bf16 at load. A NaN stored in it
// is refused naming the tensor.
TEST(CliBadInput, Bf16FolderPacksAsStoredAndRefusesNaN) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  const std::string b = dir + "/bf16";
  RunResult c = run_tfm(dir, {"convert", "--model", m, "--dtype", "bf16", "--out", b});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  RunResult r1 = run_tfm(dir, {"encode", "--model", m, "--text", "the cat sat", "--dtype", "bf16", "-o", dir + "/a.npy"});
  RunResult r2 = run_tfm(dir, {"encode", "--model", b, "--text", "the cat sat", "--dtype", "bf16", "-o", dir + "/b.npy"});
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_TRUE(read_file(dir + "/a.npy") == read_file(dir + "/b.npy"));
  // Poke a bf16 NaN (0x7fc0) into element 3 of layer 0's output.dense.weight, in place.
  std::string bytes = read_file(b + "/model.safetensors");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, hlen));
  const std::string name = "encoder.layer.0.output.dense.weight";
  ASSERT_TRUE(h.contains(name)) << h.dump();
  ASSERT_EQ(h[name]["dtype"], "BF16");
  const size_t at = 8 + hlen + h[name]["data_offsets"][0].get<size_t>() + 2 * 3;
  bytes[at] = (char)0xc0, bytes[at + 1] = (char)0x7f;
  write_file(b + "/model.safetensors", bytes);
  RunResult r = run_tfm(dir, {"encode", "--model", b, "--text", "the cat", "--dtype", "bf16", "-o", dir + "/o.npy"});
  expect_clean_error(r, "output.dense.weight' contains NaN or Inf at element 3");
  EXPECT_FALSE(fs::exists(dir + "/o.npy"));
}

TEST(CliBadInput, ConfigSizesAreBoundedBeforeAllocating) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_bert_dir(dir);
  nlohmann::json c = nlohmann::json::parse(read_file(m + "/config.json"));
  c["hidden_size"] = 65536;
  c["num_attention_heads"] = 1;
  write_file(m + "/config.json", c.dump());
  RunResult r = run_tfm(dir, {"encode", "--model", m, "--init", "random", "--text", "the cat"});
  expect_clean_error(r, "key 'hidden_size' must be at most 16384, found 65536");
  c["hidden_size"] = 16384;
  c["num_hidden_layers"] = 1024;
  write_file(m + "/config.json", c.dump());
  r = run_tfm(dir, {"encode", "--model", m, "--init", "random", "--text", "the cat"});
  expect_clean_error(r, "GiB of float32 weights, more than this machine's");
  c = nlohmann::json::parse(read_file(fixture("bert/config.json")));
  c["position_embedding_type"] = "relative_key";
  write_file(m + "/config.json", c.dump());
  r = run_tfm(dir, {"encode", "--model", m, "--text", "the cat"});
  expect_clean_error(r, "position_embedding_type 'relative_key' is not supported");
  r = run_tfm(dir, {"encode", "--model", m, "--config", dir, "--text", "the cat"});
  expect_clean_error(r, "is a folder");
}

// Usage errors exit 2 with a plain message; NaN and out-of-range values never pass.
TEST(CliBadInput, OptionValuesAndIgnoredOptions) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const Case cases[] = {
      {{"train", "--data", "x", "--out", "y", "--epochs", "0"}, "--epochs: must be a whole number from 1 to 1000000, got '0'"},
      {{"train", "--data", "x", "--out", "y", "--lr", "nan"}, "--lr: must be a number > 0 and <= 10, got 'nan'"},
      {{"train", "--data", "x", "--out", "y", "--seed", "-1"}, "--seed: must be a whole number"},
      {{"translate", "--model", "m", "--beam", "2", "--length-penalty", "nan", "go ."}, "--length-penalty"},
      {{"translate", "--model", "m", "--threads", "abc", "go ."}, "--threads: must be a whole number from 1 to 1024"},
      {{"train", "--resume", "run", "--epochs", "3"}, "--epochs cannot change it"},
      {{"train", "--resume", "run", "--set", "vocab_size=9"}, "--set vocab_size cannot change it"},
      {{"train", "--resume", "run", "--out", "other"}, "do not give --out as well"},
      {{"train", "--config", "c.json", "--data", "fra.txt", "--out", "o"}, "--data is for the d2l trainer"},
      {{"train", "--out", dir + "/out"}, "--data is required"},
  };
  for (const Case& c : cases) {
    RunResult r = run_tfm(dir, c.args);
    expect_clean_error(r, c.needle);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
  }
}

// stdin: an empty line gives an empty output line (outputs stay aligned); errors name the line.
TEST(CliTranslate, StdinEmptyLinesAndErrorsNameTheLine) {
  ScopedDir tmp;
  const std::string& dir = tmp.path;
  std::string m = make_seq2seq_dir(dir);
  RunResult r = run_tfm(dir, {"translate", "--model", m}, "go .\n\ni lost .\n");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::vector<std::string> lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_FALSE(lines[0].empty());
  EXPECT_TRUE(lines[1].empty());
  EXPECT_FALSE(lines[2].empty());
  r = run_tfm(dir, {"translate", "--model", m}, "go .\n\xff\xfe .\n");
  expect_clean_error(r, "sentence 2: invalid UTF-8 at byte offset 0");
  r = run_tfm(dir, {"translate", "--model", m}, std::string(1100000, 'a'));
  expect_clean_error(r, "stdin line 1 is longer than 1 MiB");
  nlohmann::json c = nlohmann::json::parse(read_file(m + "/config.json"));
  c["max_len"] = 1;
  write_file(m + "/config.json", c.dump());
  r = run_tfm(dir, {"translate", "--model", m, "go ."});
  expect_clean_error(r, "max_len (1) must be at least num_steps (10)");
}

}  // namespace
}  // namespace tfm::test
