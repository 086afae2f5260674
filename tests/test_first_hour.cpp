// Defects a new user hits in the first hour (issue 14): each test runs `tfm` (or the library) as the README says and
// checks the behaviour the issue asks for. Expected values come from the issue, from hand-written inputs, from
// other `tfm` commands already tested against Hugging Face / PyTorch fixtures, or from the same run done another way
// (LF vs CRLF, interrupted vs uninterrupted); none is copied from the output under test.
// TFM_TEST_BINARY, when set, replaces the tfm binary under test (to run these tests against another build).
#include "test_paths.h"
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
#include "models/encoder.h"
#include "run_tfm.h"
#include "test_util.h"
#include "text/bert_tokenizer.h"
#include "text/nmt_data.h"
#include "text/vocab.h"
#include "train/recipe.h"

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string l; std::getline(ss, l);) v.push_back(l);
  return v;
}

std::string tfm_binary() {
  const char* b = std::getenv("TFM_TEST_BINARY");
  return b && *b ? b : TFM_BINARY;
}

// A fresh folder per test, removed unless the test failed.
using TempDir = TempFolder;

// Runs tfm (tests/run_tfm.h) with `args`, `stdin_text` on stdin, stdout to a file, /dev/full or closed, extra
// environment variables `env` ("K=V"), with OMP_NUM_THREADS=1.
TfmRun tfm(const std::string& dir, const std::vector<std::string>& args, const std::string& stdin_text = "",
           Stdout mode = Stdout::file, const std::vector<std::string>& env = {}) {
  RunOptions opt;
  opt.stdout_to = mode;
  opt.env = env;
  opt.binary = tfm_binary();
  return run_tfm_with(dir, args, stdin_text, opt);
}

std::string describe(const TfmRun& r) { return r.describe(); }

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Exited non-zero without a signal, with one stderr line "tfm: error: ..." containing `needle`.
void expect_error(const TfmRun& r, const std::string& needle) {
  EXPECT_EQ(r.signal, 0) << describe(r);
  EXPECT_GT(r.exit_code, 0) << describe(r);
  std::vector<std::string> l = lines(r.err);
  ASSERT_EQ(l.size(), 1u) << describe(r);
  EXPECT_EQ(l[0].rfind("tfm: error: ", 0), 0u) << describe(r);
  EXPECT_TRUE(has(l[0], needle)) << "expected '" << needle << "' in: " << l[0];
}

// As expect_error, for commands that print progress on stderr first: the last line is the error.
void expect_last_error(const TfmRun& r, const std::string& needle) {
  EXPECT_EQ(r.signal, 0) << describe(r);
  EXPECT_GT(r.exit_code, 0) << describe(r);
  std::vector<std::string> l = lines(r.err);
  ASSERT_FALSE(l.empty()) << describe(r);
  EXPECT_EQ(l.back().rfind("tfm: error: ", 0), 0u) << describe(r);
  EXPECT_TRUE(has(l.back(), needle)) << "expected '" << needle << "' in: " << l.back();
}

// tests/fixtures/bert (vocab 60, hidden 32, 20 positions) with a 60-line vocab.txt, as in test_cli.cpp.
std::string bert_dir(const std::string& dir, const std::string& eol = "\n") {
  std::string m = dir + "/bert";
  fs::create_directories(m);
  fs::copy_file(fixture("bert/config.json"), m + "/config.json");
  fs::copy_file(fixture("bert/model.safetensors"), m + "/model.safetensors");
  std::string vocab;
  for (const char* w : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",  "a",     "an",    "time",  "flies",
                        "like",  "arrow", "fruit", "banana", "i",    "have", "dream", "cat",   "dog",   "sat",
                        "on",    "mat",   "is",    "was",   "and",   "or",   "to",    "of",    "in",    "it",
                        "he",    "she",   "we",    "they",  "you",   "red",  "blue",  "green", "big",   "small",
                        "run",   "walk",  "eat",   "drink", "sleep", "house", "car",  "tree",  "bird",  "fish",
                        "sun",   "moon",  "star",  "water", "fire",  "one",  "two",   "three", "four",  "five"})
    vocab += std::string(w) + eol;
  spit(m + "/vocab.txt", vocab);
  return m;
}

std::string seq2seq_dir(const std::string& dir) {
  std::string m = dir + "/seq2seq";
  fs::copy(fixture("d2l_trained"), m, fs::copy_options::recursive);
  return m;
}

// The first `n` lines of fra.txt with the given line end.
std::string fra_corpus(const std::string& path, int n, const std::string& eol) {
  std::ifstream in(data_dir() + "/fra-eng/fra.txt", std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << data_dir() << "/fra-eng/fra.txt";
  std::string text, line;
  for (int i = 0; i < n && std::getline(in, line); ++i) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    text += line + eol;
  }
  spit(path, text);
  return path;
}

std::vector<std::string> d2l_train_args(const std::string& data, const std::string& out, const std::string& epochs) {
  return {"train", "--data", data, "--out", out, "--num-examples", "40", "--epochs", epochs, "--threads", "1",
          "--seed", "0", "--no-progress"};
}

// A small subword recipe config (as test_recipe.cpp's tiny_config) written to dir/recipe.json; data_dir is the
// shared data unless `with_data_dir` is false.
std::string recipe_json(const std::string& dir, nlohmann::json extra = nlohmann::json::object(),
                        bool with_data_dir = true) {
  nlohmann::json j = {{"train_limit", 300}, {"valid_limit", 16}, {"vocab_size", 500},  {"num_hiddens", 16},
                      {"num_layers", 1},    {"num_heads", 2},    {"ffn_num_hiddens", 32}, {"max_len", 40},
                      {"num_steps", 12},    {"max_tokens", 800}, {"epochs", 1},      {"warmup_steps", 5},
                      {"checkpoint_every", 4}};
  if (with_data_dir) j["data_dir"] = data_dir();
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  std::string p = dir + "/recipe.json";
  spit(p, j.dump(2));
  return p;
}

// ------------------------------------------------------------------------------------------------ item 2

// Every command that prints exits non-zero with a message when stdout cannot be written: /dev/full and a closed
// stdout. Before: exit 0 and the output silently lost.
TEST(FirstHour, OutputWriteFailureExitsNonZero) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir), s2s = seq2seq_dir(dir);
  spit(dir + "/ref.txt", "a b c d\n");
  spit(dir + "/hyp.txt", "a b c d\n");
  const std::string corpus = fra_corpus(dir + "/corpus.txt", 40, "\n");
  struct Case {
    std::vector<std::string> args;
    std::string stdin_text;
  };
  const Case cases[] = {
      {{"tokenize", "--model", bert, "the cat"}, ""},
      {{"encode", "--model", bert, "--threads", "1", "--text", "the cat"}, ""},
      {{"translate", "--model", s2s, "--threads", "1", "go ."}, ""},
      {{"translate", "--model", s2s, "--threads", "1"}, "go .\ni lost .\n"},
      {{"translate", "--model", s2s, "--threads", "1", "--beam", "2", "go ."}, ""},
      {{"bleu", "a b c", "a b c"}, ""},
      {{"bleu", "--corpus", dir + "/ref.txt", dir + "/hyp.txt"}, ""},
      {{"data", "list"}, ""},
      {{"--help"}, ""},
      {{"translate", "--help"}, ""},
  };
  for (Stdout mode : {Stdout::dev_full, Stdout::closed}) {
    const char* name = mode == Stdout::dev_full ? "/dev/full" : "closed stdout";
    for (const Case& c : cases) {
      TfmRun r = tfm(dir, c.args, c.stdin_text, mode);
      SCOPED_TRACE(std::string(name) + ": tfm " + c.args[0] + (c.args.size() > 1 ? " " + c.args[1] : ""));
      expect_error(r, "cannot write to standard output");
      EXPECT_EQ(r.exit_code, 1) << describe(r);
    }
    // train prints its summary line last: the model is written, the exit status still reports the lost line.
    const std::string out = dir + "/model_" + std::to_string((int)mode);
    TfmRun r = tfm(dir, d2l_train_args(corpus, out, "1"), "", mode);
    SCOPED_TRACE(std::string(name) + ": tfm train");
    expect_error(r, "cannot write to standard output");
  }
  // The same commands with a writable stdout succeed (the failure above is the output, not the command).
  TfmRun ok = tfm(dir, {"bleu", "--corpus", dir + "/ref.txt", dir + "/hyp.txt"});
  EXPECT_EQ(ok.exit_code, 0) << describe(ok);
  EXPECT_TRUE(has(ok.out, "BLEU = 100.00")) << ok.out;
}

// ------------------------------------------------------------------------------------------------ item 3

// A CRLF copy of a corpus trains the same model as the LF original (d2l reads it in Python text mode). Before:
// tgt_vocab.txt held ".\r", "!\r", "?\r" and translations ended in "\r".
TEST(FirstHour, CrlfCorpusTrainsTheSameModelAsLf) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string lf = fra_corpus(dir + "/lf.txt", 40, "\n"), crlf = fra_corpus(dir + "/crlf.txt", 40, "\r\n");
  TfmRun a = tfm(dir, d2l_train_args(lf, dir + "/lf", "2"));
  ASSERT_EQ(a.exit_code, 0) << describe(a);
  TfmRun b = tfm(dir, d2l_train_args(crlf, dir + "/crlf", "2"));
  ASSERT_EQ(b.exit_code, 0) << describe(b);
  for (const char* f : {"src_vocab.txt", "tgt_vocab.txt", "config.json", "model.safetensors"})
    EXPECT_EQ(slurp(dir + "/lf/" + f), slurp(dir + "/crlf/" + f)) << f << " differs between LF and CRLF corpora";
  EXPECT_FALSE(has(slurp(dir + "/crlf/tgt_vocab.txt"), "\r"));
  TfmRun t = tfm(dir, {"translate", "--model", dir + "/crlf", "--threads", "1", "go ."});
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  EXPECT_FALSE(has(t.out, "\r")) << t.out;
  // The library reader, directly.
  ParallelCorpus x = tokenize_nmt("go .\tva !\r\nhi .\tsalut !\r\n", 0), y = tokenize_nmt("go .\tva !\nhi .\tsalut !\n", 0);
  EXPECT_EQ(x.source, y.source);
  EXPECT_EQ(x.target, y.target);
}

// Vocabulary files saved with CRLF (an editor on Windows) load as the LF ones: translate's src/tgt_vocab.txt and
// BERT's vocab.txt. Before: translate failed with "line 1 is '<unk>\r', expected '<unk>'".
TEST(FirstHour, CrlfVocabularyFilesReadAsLf) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string s2s = seq2seq_dir(dir);
  TfmRun lf = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "go .", "i lost ."});
  ASSERT_EQ(lf.exit_code, 0) << describe(lf);
  for (const char* f : {"src_vocab.txt", "tgt_vocab.txt"}) {
    std::string text = slurp(s2s + "/" + f), out;
    for (char c : text) out += c == '\n' ? std::string("\r\n") : std::string(1, c);
    spit(s2s + "/" + f, out);
  }
  TfmRun crlf = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "go .", "i lost ."});
  ASSERT_EQ(crlf.exit_code, 0) << describe(crlf);
  EXPECT_EQ(crlf.out, lf.out);
  EXPECT_EQ(Vocab::load(s2s + "/src_vocab.txt").size(), 189);  // config.json src_vocab_size

  const std::string b_lf = bert_dir(dir + "/lf"), b_crlf = bert_dir(dir + "/crlf", "\r\n");
  TfmRun t1 = tfm(dir, {"tokenize", "--model", b_lf, "the cat sat on the mat"});
  TfmRun t2 = tfm(dir, {"tokenize", "--model", b_crlf, "the cat sat on the mat"});
  ASSERT_EQ(t1.exit_code, 0) << describe(t1);
  EXPECT_EQ(t1.out, t2.out);
}

// ------------------------------------------------------------------------------------------------ item 4

// train_log.csv (and loss.png) after a resume mid-epoch equal an uninterrupted run's: the resumed epoch's
// train_loss covers the batches before the resume too. Before: 4.914 instead of 5.330 (only the batches after).
TEST(FirstHour, ResumedTrainLogEqualsUninterruptedRun) {
  TempDir tmp;
  const std::string& root = tmp.path;
  RecipeConfig c = RecipeConfig::from_json(
      nlohmann::json::parse(slurp(recipe_json(root, {{"epochs", 2}, {"train_limit", 150}, {"valid_limit", 8}}))), "t");
  RecipeResult full = train_recipe(c, root + "/full", false, false);
  ASSERT_GE(full.steps, 8);
  RecipeConfig stop = c;
  stop.stop_after_steps = 3;  // mid epoch 1
  train_recipe(stop, root + "/split", false, false);
  RecipeConfig again;
  again.stop_after_steps = full.steps - 2;  // mid epoch 2
  train_recipe(again, root + "/split", true, false);
  RecipeResult rest = train_recipe(RecipeConfig{}, root + "/split", true, false);
  ASSERT_EQ(rest.steps, full.steps);
  // Columns that do not depend on the clock: epoch, step, train_loss, valid_loss, valid_bleu, lr.
  auto stable = [](const std::string& csv) {
    std::string s;
    for (const std::string& l : lines(csv)) {
      std::stringstream ss(l);
      std::string cell;
      for (int i = 0; i < 6 && std::getline(ss, cell, ','); ++i) s += cell + ",";
      s += "\n";
    }
    return s;
  };
  const std::string a = stable(slurp(root + "/full/train_log.csv")), b = stable(slurp(root + "/split/train_log.csv"));
  EXPECT_EQ(lines(a).size(), 3u) << a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(slurp(root + "/full/loss.png"), slurp(root + "/split/loss.png")) << "loss.png differs after resume";
}

// ------------------------------------------------------------------------------------------------ item 5

// A recipe run stopped before the end of its first epoch says that no model was written and how to continue.
// Before: "best validation BLEU -1.00 (epoch 0); model in DIR" with no config.json / model.safetensors in DIR.
TEST(FirstHour, RunStoppedBeforeFirstEpochSaysNoModelWasWritten) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string cfg = recipe_json(dir), out = dir + "/run";
  TfmRun r = tfm(dir, {"train", "--config", cfg, "--out", out, "--set", "stop_after_steps=2", "--threads", "1",
                    "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_FALSE(fs::exists(out + "/config.json"));
  EXPECT_FALSE(has(r.out, "model in")) << r.out;
  EXPECT_TRUE(has(r.out, "no model written")) << r.out;
  EXPECT_TRUE(has(r.out, "--resume " + out)) << r.out;
  TfmRun done = tfm(dir, {"train", "--resume", out, "--threads", "1", "--no-progress"});
  ASSERT_EQ(done.exit_code, 0) << describe(done);
  EXPECT_TRUE(has(done.out, "model in " + out)) << done.out;
  EXPECT_TRUE(fs::exists(out + "/config.json"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
}

// ------------------------------------------------------------------------------------------------ item 6

// A failed recipe start leaves nothing that blocks a retry, and a missing data file says where it was looked for.
// Before: train_config.json stayed; the rerun said "already exists", --resume "no checkpoint".
TEST(FirstHour, FailedRecipeStartLeavesNothingThatBlocksARetry) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string out = dir + "/run";
  // Missing data file: the message names the absolute path, data_dir and how to change it.
  std::string cfg = recipe_json(dir, {{"train_src", "nosuch/train.en.gz"}});
  TfmRun r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"});
  expect_error(r, "training data not found: " + fs::absolute(data_dir()).lexically_normal().string() + "/nosuch/train.en.gz");
  EXPECT_TRUE(has(r.err, "TFM_DATA_DIR")) << r.err;
  EXPECT_TRUE(has(r.err, "data_dir")) << r.err;
  EXPECT_FALSE(fs::exists(out)) << "a failed start left " << out;
  // Without data_dir in the config: relative to $TFM_DATA_DIR, and the message says so.
  cfg = recipe_json(dir, {{"train_src", "nosuch/train.en.gz"}}, false);
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"}, "", Stdout::file,
          {"TFM_DATA_DIR=" + dir + "/mydata"});
  expect_error(r, dir + "/mydata/nosuch/train.en.gz");
  EXPECT_TRUE(has(r.err, "$TFM_DATA_DIR")) << r.err;
  // SentencePiece cannot build the vocabulary: no train_config.json / spm.model left, no spm_train flag advised.
  cfg = recipe_json(dir, {{"vocab_size", 100000}, {"train_limit", 20}});
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"});
  expect_error(r, "SentencePiece cannot train a 100000-piece subword model on 40 sentences");
  EXPECT_FALSE(fs::exists(out)) << "a failed start left " << out;
  // Too small for the characters: SentencePiece's own advice is an spm_train flag tfm does not have.
  cfg = recipe_json(dir, {{"vocab_size", 10}, {"train_limit", 20}});
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"});
  expect_error(r, "--set vocab_size=N");
  EXPECT_FALSE(has(r.err, "character_coverage")) << r.err;
  EXPECT_FALSE(fs::exists(out)) << "a failed start left " << out;
  // The same --out into an existing empty folder: the folder stays, empty.
  fs::create_directories(out);
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--threads", "1", "--no-progress"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_TRUE(fs::is_directory(out) && fs::is_empty(out)) << "files left in " << out;
  // The retry with a good config succeeds.
  cfg = recipe_json(dir);
  r = tfm(dir, {"train", "--config", cfg, "--out", out, "--set", "stop_after_steps=1", "--threads", "1",
                "--no-progress"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

// The README's `tfm data download multi30k --to data/multi30k` puts the files where the recipe looks with
// TFM_DATA_DIR=data (README: "TFM_DATA_DIR=data build/tfm train --config ..."), here from a local mirror.
TEST(FirstHour, DataDownloadedAsTheReadmeSaysIsFoundByTheRecipe) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  TfmRun d = tfm(dir, {"data", "download", "multi30k", "--base-url", data_dir() + "/multi30k", "--to",
                    dir + "/data/multi30k"});
  ASSERT_EQ(d.exit_code, 0) << describe(d);
  const std::string cfg = recipe_json(dir, nlohmann::json::object(), /*with_data_dir=*/false);
  TfmRun r = tfm(dir, {"train", "--config", cfg, "--out", dir + "/run", "--set", "stop_after_steps=1", "--threads", "1",
                    "--no-progress"},
              "", Stdout::file, {"TFM_DATA_DIR=" + dir + "/data"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  const std::string readme = slurp(source_dir() + "/README.md");
  EXPECT_TRUE(has(readme, "tfm data download multi30k --to data/multi30k")) << "README no longer shows the download";
  EXPECT_TRUE(has(readme, "TFM_DATA_DIR=data build/tfm train --config")) << "README does not say how to point the "
                                                                             "recipe at the downloaded data";
}

// ------------------------------------------------------------------------------------------------ item 8

// A text that gives no tokens is an error in a batch as alone. Before: alone an error, with --text hi an all-[PAD]
// row written with non-zero hidden and pooled values.
TEST(FirstHour, EncodeTextWithoutTokensIsAnErrorInABatchToo) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir);
  TfmRun alone = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--no-special-tokens", "--text", "   "});
  expect_error(alone, "no tokens");
  TfmRun batch = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--no-special-tokens", "--text", "   ", "--text",
                        "the cat", "-o", dir + "/h.npy", "--pooled", dir + "/p.npy"});
  expect_error(batch, "--text 1 of 2 produces no tokens");
  EXPECT_FALSE(fs::exists(dir + "/h.npy"));
  EXPECT_FALSE(fs::exists(dir + "/p.npy"));
  TfmRun empty = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--text", "the", "--text", ""});
  expect_error(empty, "--text 2 of 2 is empty");
}

// ------------------------------------------------------------------------------------------------ item 9

// Options that do nothing in the given combination are refused, as train does.
TEST(FirstHour, OptionsThatWouldBeIgnoredAreRefused) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir), s2s = seq2seq_dir(dir);
  TfmRun r = tfm(dir, {"encode", "--model", bert, "--seed", "5", "--text", "the cat"});
  expect_error(r, "--seed seeds --init random only");
  EXPECT_EQ(r.exit_code, 2);
  r = tfm(dir, {"translate", "--model", s2s, "--length-penalty", "1", "go ."});
  expect_error(r, "--length-penalty applies to beam search only");
  EXPECT_EQ(r.exit_code, 2);
  r = tfm(dir, {"encode", "--model", bert, "--text", "a", "--text", "b", "--pair", "c"});
  expect_error(r, "--pair: give one per --text");
  // The combinations that use them still work.
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--beam", "2", "--length-penalty", "1", "go ."});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  r = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--init", "random", "--seed", "5", "--text", "the cat"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

// ------------------------------------------------------------------------------------------------ item 10

// Messages name the real cause; every command takes --threads as the README says.
TEST(FirstHour, MessagesNameTheRealCause) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir), s2s = seq2seq_dir(dir);
  TfmRun r = tfm(dir, {"bleu", "--threads", "1", "il est riche .", "il est calme ."});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, "0.658\n");  // README's hand-checked value
  r = tfm(dir, {"data", "list", "--threads", "1"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  r = tfm(dir, {"data", "download", "nosuch", "--to", dir + "/x", "--threads", "1"});
  expect_error(r, "unknown dataset 'nosuch'");
  // --max-length larger than the model allows: not "pass --max-length" when it was passed.
  r = tfm(dir, {"encode", "--model", bert, "--max-length", "100", "--text", "the cat"});
  expect_error(r, "--max-length 100 is more than the model's max_position_embeddings (20)");
  EXPECT_FALSE(has(r.err, "pass --max-length")) << r.err;
  // Several texts: the message says which one is too long.
  std::string long_text;
  for (int i = 0; i < 30; ++i) long_text += "the ";
  r = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--text", "the cat", "--text", long_text});
  expect_error(r, "--text 2 of 2 has 32 tokens");
  // A translation model given to encode.
  r = tfm(dir, {"encode", "--model", s2s, "--text", "go ."});
  expect_error(r, "transformer_seq2seq folder (a translation model), not an encoder");
  EXPECT_FALSE(has(r.err, "vocab_size")) << r.err;
  // ... and an encoder given to translate.
  r = tfm(dir, {"translate", "--model", bert, "go ."});
  expect_error(r, "this is a bert folder (an encoder), not a translation model");
  // --set with an unknown key is blamed on --set, not on the config file.
  const std::string cfg = recipe_json(dir);
  r = tfm(dir, {"train", "--config", cfg, "--out", dir + "/run", "--set", "nosuchkey=3"});
  expect_error(r, "--set nosuchkey: unknown recipe key");
  EXPECT_FALSE(has(r.err, "recipe.json: unknown key")) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/run"));
  r = tfm(dir, {"train", "--config", cfg, "--out", dir + "/run", "--set", "lr=-1"});
  expect_error(r, "with --set: key 'lr' must be positive");
}

// ------------------------------------------------------------------------------------------------ item 11

// translate: a source longer than num_steps is reported; warnings are capped (one summary line) or hidden with
// --quiet; empty stdin is empty output; --attention-png never plots another sentence than sentence 1.
TEST(FirstHour, TranslateInputWarningsEmptyInputAndAttentionPng) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string s2s = seq2seq_dir(dir);
  // num_steps is 10 (fixture config.json): 12 words + <eos> are cut.
  TfmRun r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "go go go go go go go go go go go ."});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(has(r.err, "sentence 1: 12 tokens + <eos> are more than the model's num_steps (10)")) << r.err;
  // 30 sentences with an unknown word: 10 warnings and a count, not 30 lines.
  std::string input;
  for (int i = 0; i < 30; ++i) input += "zzqx" + std::to_string(i) + " .\n";
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1"}, input);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(lines(r.out).size(), 30u);
  std::vector<std::string> err = lines(r.err);
  ASSERT_EQ(err.size(), 11u) << r.err;
  EXPECT_EQ(err.back(), "warning: 20 more warnings not shown (--quiet hides all)");
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--quiet"}, input);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(lines(r.out).size(), 30u);
  EXPECT_EQ(r.err, "");
  // Empty stdin: empty output, exit 0.
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1"}, "");
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, "");
  // --attention-png: sentence 1 empty -> error, nothing written; no input at all -> error.
  const std::string png = dir + "/att.png";
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--attention-png", png, "", "go ."});
  expect_error(r, "--attention-png plots sentence 1, which is empty");
  EXPECT_FALSE(fs::exists(png));
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--attention-png", png}, "\ngo .\n");
  expect_error(r, "--attention-png plots sentence 1, which is empty");
  r = tfm(dir, {"translate", "--model", s2s, "--threads", "1", "--attention-png", png}, "");
  expect_error(r, "--attention-png: no sentence to plot");
  EXPECT_FALSE(fs::exists(png));
}

// ------------------------------------------------------------------------------------------------ item 12

// encode --pair gives token_type_ids 1 to the second segment, as tokenize --pair (tested against Hugging Face),
// and the hidden states are the encoder's on those ids (the encoder is tested against PyTorch).
TEST(FirstHour, EncodePairGivesTokenTypeIds) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir);
  TfmRun t = tfm(dir, {"tokenize", "--model", bert, "the cat sat", "--pair", "a dog"});
  ASSERT_EQ(t.exit_code, 0) << describe(t);
  nlohmann::json tj = nlohmann::json::parse(t.out);
  TfmRun e = tfm(dir, {"encode", "--model", bert, "--threads", "1", "--text", "the cat sat", "--pair", "a dog", "-o",
                    dir + "/h.npy"});
  ASSERT_EQ(e.exit_code, 0) << describe(e);
  const auto ids = tj["input_ids"].get<std::vector<int64_t>>(), tt = tj["token_type_ids"].get<std::vector<int64_t>>();
  EXPECT_TRUE(has(e.out, "token_type_ids: [0, 0, 0, 0, 0, 1, 1, 1]")) << e.out;  // [CLS] the cat sat [SEP] a dog [SEP]
  Tensor h = load_npy(dir + "/h.npy");
  const int64_t L = (int64_t)ids.size();
  ASSERT_EQ(h.shape(), (std::vector<int64_t>{1, L, 32}));
  auto model = load_encoder(bert);
  Tensor in = Tensor::empty({1, L}, DType::I64), types = Tensor::empty({1, L}, DType::I64);
  Tensor zeros = Tensor::empty({1, L}, DType::I64), mask = Tensor::empty({1, L}, DType::I64);
  for (int64_t i = 0; i < L; ++i) {
    in.i64()[i] = ids[i];
    types.i64()[i] = tt[i];
    zeros.i64()[i] = 0;
    mask.i64()[i] = 1;
  }
  Tensor want = model->forward(in, types, mask, false).last_hidden_state;
  Tensor without = model->forward(in, zeros, mask, false).last_hidden_state;
  EXPECT_TRUE(all_close(h.f32(), want.f32(), (size_t)want.numel(), 1e-6f));
  EXPECT_FALSE(all_close(h.f32(), without.f32(), (size_t)want.numel(), 1e-4f)) << "token_type_ids were all 0";
}

// tokenize takes several texts: one JSON line each, equal to tokenizing each alone.
TEST(FirstHour, TokenizeSeveralTexts) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string bert = bert_dir(dir);
  TfmRun a = tfm(dir, {"tokenize", "--model", bert, "the cat"});
  TfmRun b = tfm(dir, {"tokenize", "--model", bert, "a red car", "--pair", "one"});
  TfmRun both = tfm(dir, {"tokenize", "--model", bert, "the cat", "a red car"});
  ASSERT_EQ(both.exit_code, 0) << describe(both);
  TfmRun alone_b = tfm(dir, {"tokenize", "--model", bert, "a red car"});
  EXPECT_EQ(both.out, a.out + alone_b.out);
  TfmRun pairs = tfm(dir, {"tokenize", "--model", bert, "the cat", "--pair", "two", "a red car", "--pair", "one"});
  ASSERT_EQ(pairs.exit_code, 0) << describe(pairs);
  TfmRun a_pair = tfm(dir, {"tokenize", "--model", bert, "the cat", "--pair", "two"});
  EXPECT_EQ(pairs.out, a_pair.out + b.out);
  TfmRun bad = tfm(dir, {"tokenize", "--model", bert, "the cat", "a red car", "--pair", "one"});
  expect_error(bad, "--pair: give one per TEXT");
}

// data download from a local folder or file:// mirror (checksum-verified), and a failed download leaves no empty
// --to folder behind.
TEST(FirstHour, DownloadFromLocalMirrorAndFailedDownloadLeavesNoFolder) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string mirror = data_dir() + "/multi30k";
  TfmRun r = tfm(dir, {"data", "download", "multi30k", "--base-url", "file://" + mirror, "--to", dir + "/a"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* f : {"train.en.gz", "val.fr.gz", "test_2016_flickr.de.gz"})
    EXPECT_EQ(slurp(dir + "/a/" + f), slurp(mirror + "/" + f)) << f;
  // A mirror file whose checksum differs is refused.
  fs::create_directories(dir + "/badmirror");
  for (const auto& e : fs::directory_iterator(mirror)) fs::copy_file(e.path(), dir + "/badmirror/" + e.path().filename().string());
  fs::permissions(dir + "/badmirror/val.en.gz", fs::perms::owner_write, fs::perm_options::add);
  spit(dir + "/badmirror/val.en.gz", "not the file");
  r = tfm(dir, {"data", "download", "multi30k", "--base-url", dir + "/badmirror", "--to", dir + "/b/c"});
  expect_last_error(r, "val.en.gz: SHA-256 mismatch");
  // A mirror folder without the files: error, and the new --to folders (b and b/c) removed again... except b/c
  // holds the files that did download before the failure, so try a mirror that has none.
  r = tfm(dir, {"data", "download", "multi30k", "--base-url", dir + "/empty_mirror", "--to", dir + "/d/e"});
  expect_last_error(r, "cannot read '" + dir + "/empty_mirror/train.en.gz' (local mirror)");
  EXPECT_FALSE(fs::exists(dir + "/d")) << "a failed download left an empty --to folder";
}

// ------------------------------------------------------------------------------------------------ item 13

// A pre-LN tutorial encoder folder needs "model_type": "transformer_encoder": the README says so and the error for
// a folder without it says so too.
TEST(FirstHour, TutorialEncoderWithoutModelTypeIsExplained) {
  TempDir tmp;
  const std::string& dir = tmp.path;
  EXPECT_TRUE(has(slurp(source_dir() + "/README.md"), "\"model_type\": \"transformer_encoder\""));
  const std::string m = dir + "/enc";
  fs::create_directories(m);
  nlohmann::json c = nlohmann::json::parse(slurp(fixture("transformer_encoder/config.json")));
  c.erase("model_type");
  spit(m + "/config.json", c.dump());
  fs::copy_file(fixture("transformer_encoder/model.safetensors"), m + "/model.safetensors");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 5; i < 50; ++i) vocab += "w" + std::to_string(i) + "\n";
  spit(m + "/vocab.txt", vocab);
  TfmRun r = tfm(dir, {"encode", "--model", m, "--text", "w5 w6"});
  expect_error(r, "\"model_type\": \"transformer_encoder\"");
  c["model_type"] = "transformer_encoder";
  spit(m + "/config.json", c.dump());
  // No segment embeddings: a --pair would be ignored, so it is refused (item 9's class).
  r = tfm(dir, {"encode", "--model", m, "--text", "w5", "--pair", "w6"});
  expect_error(r, "has no segment embeddings");
  r = tfm(dir, {"encode", "--model", m, "--threads", "1", "--text", "w5 w6"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

}  // namespace
}  // namespace tfm::test
