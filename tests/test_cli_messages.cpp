// What the commands say: errors that name the real cause (a folder of the wrong kind, a missing model_type, binary
// garbage as config.json, a checkpoint-only folder), unknown commands, --version, help texts and wording. Expected
// messages are those the commands are meant to give, and the README's hand-checked values.
#include "cli_util.h"
#include "tfm/tfm.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace tfm::test {
namespace {

namespace fs = std::filesystem;

// Messages name the real cause; every command takes --threads as the README says.
TEST(CliMessages, NameTheRealCause) {
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

// finetune on a translation folder said "config.json: missing required key 'vocab_size'".
TEST(CliMessages, EncoderCommandsOnATranslationFolderSayWhatItIs) {
  tfm::test::TempFolder t;
  tfm::test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe dog is bad,neg\n");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"finetune", "--model", fixture("d2l_trained"), "--train",
                                                       t.path + "/train.csv", "--out", t.path + "/o"}),
                                   "(a translation model), not an encoder");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"classify", "--model", fixture("marian"), "hello"}),
                                   "marian folder (a translation model), not an encoder");
}

// A translation folder given to `embed` / `convert`, or a folder that does not exist, is named as such instead of
// "has no modules.json" or "missing required key 'vocab_size'".
TEST(CliMessages, EmbedAndConvertNameTheWrongFolder) {
  const fs::path tmp = fresh_tmp("wrong");
  const std::string input = fixture("st_mean/sentences.txt"), out = (tmp / "v.npy").string();
  ShellRun a = tfm_run("embed --model " + fixture("d2l_trained") + " --input " + input + " -o " + out);
  EXPECT_NE(a.code, 0);
  EXPECT_NE(a.out.find("transformer_seq2seq"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("tfm translate"), std::string::npos) << a.out;
  ShellRun b = tfm_run("embed --model " + fixture("d2l_trained") + " --pooling mean --input " + input + " -o " + out);
  EXPECT_NE(b.code, 0);
  EXPECT_NE(b.out.find("transformer_seq2seq"), std::string::npos) << b.out;
  ShellRun c = tfm_run("embed --model " + (tmp / "nonexistent").string() + " --input " + input + " -o " + out);
  EXPECT_NE(c.code, 0);
  // the message of Python's tfm.Encoder (python/tests/test_encoder.py), not a CLI-only wording.
  EXPECT_NE(c.out.find("nonexistent: no such model folder"), std::string::npos) << c.out;
  ShellRun e = tfm_run("embed --model " + input + " --input " + input + " -o " + out);
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.out.find("sentences.txt: not a folder (expected a model folder)"), std::string::npos) << e.out;
  ShellRun d = tfm_run("convert --model " + fixture("d2l_trained") + " --dtype bf16 --out " + (tmp / "c").string());
  EXPECT_NE(d.code, 0);
  EXPECT_NE(d.out.find("transformer_seq2seq"), std::string::npos) << d.out;
  EXPECT_FALSE(fs::exists(tmp / "c"));
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(tmp);
}

// A pre-LN tutorial encoder folder needs "model_type": "transformer_encoder": the README says so and the error for
// a folder without it says so too.
TEST(CliMessages, TutorialEncoderWithoutModelTypeIsExplained) {
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
  // No segment embeddings: a --pair would be ignored, so it is refused (as options that would be ignored are).
  r = tfm(dir, {"encode", "--model", m, "--text", "w5", "--pair", "w6"});
  expect_error(r, "has no segment embeddings");
  r = tfm(dir, {"encode", "--model", m, "--threads", "1", "--text", "w5 w6"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

// Binary garbage as config.json: the error quotes the bytes escaped (\\xff), never raw, so the terminal shows text.
TEST(CliMessages, BinaryConfigErrorHasNoRawBytes) {
  TempFolder tmp;
  const std::string m = tmp.path + "/garbage";
  std::filesystem::create_directories(m);
  spit(m + "/config.json", std::string("\xff\xfe\x01\x1b[31mgarbage", 14));
  for (const char* cmd : {"encode", "embed", "translate", "serve", "classify"}) {
    std::vector<std::string> args = {cmd, "--model", m};
    if (std::string(cmd) == "encode") args.insert(args.end(), {"--text", "hi"});
    if (std::string(cmd) == "embed") args.insert(args.end(), {"-i", "-"});
    if (std::string(cmd) == "translate" || std::string(cmd) == "classify") args.push_back("hi");
    TfmRun r = run_tfm_in(tmp.path, args, "hi\n");
    expect_one_line_error(r, "config.json: invalid JSON at byte 1");
    EXPECT_NE(r.err.find("\\xff"), std::string::npos) << r.err;
    for (unsigned char c : r.err) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << cmd << ": byte " << (int)c;
  }
}

// translate on a recipe folder that holds only a checkpoint said "config.json: cannot open".
TEST(CliMessages, TranslateOnACheckpointOnlyFolderSaysToResume) {
  tfm::test::TempFolder t;
  std::filesystem::create_directory(t.path + "/run");
  tfm::test::spit(t.path + "/run/checkpoint.safetensors", "x");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"translate", "--model", t.path + "/run", "go ."}),
                                   "tfm train --resume " + t.path + "/run");
}

// `tfm <unknown-command> --help` printed the top-level help and exited 0; an unknown command is an error either way.
TEST(CliCommands, UnknownCommandIsAnErrorAlsoWithHelp) {
  tfm::test::TempFolder t;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"nosuch"}, {"nosuch", "--help"}, {"nosuch", "-h"}, {"nosuch", "--help-all"}}) {
    TfmRun r = run_tfm_in(t.path, args);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_NE(r.err.find("unknown command 'nosuch'"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "no help text on stdout";
  }
  TfmRun ok = run_tfm_in(t.path, {"bleu", "--help"});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

// `tfm --version` prints the library version (include/tfm/tfm.h) and exits 0.
TEST(CliCommands, VersionFlagPrintsTheVersion) {
  tfm::test::TempFolder t;
  TfmRun r = run_tfm_in(t.path, {"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string want = "tfm " + std::to_string(TFM_VERSION_MAJOR) + "." + std::to_string(TFM_VERSION_MINOR) +
                           "." + std::to_string(TFM_VERSION_PATCH) + "\n";
  EXPECT_EQ(r.out, want);
}

// Help and wording: one REQUIRED mark per required input, no "{false}" after a flag, -q means --quiet everywhere
// (rerank's query is --query only), and the one-thread commands say what --threads does there.
TEST(CliHelp, HelpTextsSayWhatTheOptionsDo) {
  tfm::test::TempFolder t;
  TfmRun enc = run_tfm_in(t.path, {"encode", "--help"});
  ASSERT_EQ(enc.exit_code, 0) << enc.describe();
  size_t required = 0;
  for (size_t p = 0; (p = enc.out.find("REQUIRED", p)) != std::string::npos; ++p) ++required;
  EXPECT_EQ(required, 1u) << "only --model is required; TEXT or --text is checked by the command\n" << enc.out;
  TfmRun none = run_tfm_in(t.path, {"encode", "--model", fixture("bert")});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("give TEXT or --text"), std::string::npos) << none.err;
  TfmRun train = run_tfm_in(t.path, {"train", "--help"});
  EXPECT_EQ(train.out.find("{false}"), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("--no-progress"), std::string::npos);
  TfmRun rr = run_tfm_in(t.path, {"rerank", "--model", fixture("heads_cross"), "-q", "a cat", "the cat sat"});
  EXPECT_NE(rr.exit_code, 0) << "-q is --quiet elsewhere, never --query";
  for (const std::vector<std::string>& help : {std::vector<std::string>{"bleu", "--help"}, {"data", "list", "--help"}}) {
    TfmRun h = run_tfm_in(t.path, help);
    EXPECT_EQ(h.out.find("Worker threads for kernels and GEMM"), std::string::npos) << h.out;
    EXPECT_NE(h.out.find("runs on one thread"), std::string::npos) << h.out;
  }
}

// "1 epochs": singular counts read as such; train_config.json keeps label_smoothing as written (0.1, not the
// float's 0.10000000149011612).
TEST(CliWording, CountsOfOneAreSingularAndConfigValuesKeepTheirDecimals) {
  tfm::test::TempFolder t;
  const std::string data = t.path + "/pairs.txt";
  tfm::test::spit(data, "go .\tva !\nhi .\tsalut !\n");
  TfmRun r = run_tfm_in(t.path, {"train", "--data", data, "--out", t.path + "/m", "--epochs", "1", "--num-hiddens",
                                 "8", "--ffn-num-hiddens", "8", "--num-heads", "2", "--num-layers", "1", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("trained 1 epoch in"), std::string::npos) << r.out;
  const std::string lines = t.path + "/lines.txt";
  tfm::test::spit(lines, "the cat sat\n\nthe dog ran\n");
  TfmRun e = run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "--input", lines, "--skip-empty", "-o",
                                 t.path + "/v.jsonl"});
  ASSERT_EQ(e.exit_code, 0) << e.describe();
  EXPECT_NE(e.err.find("skipped 1 empty line;"), std::string::npos) << e.err;
  EXPECT_EQ(e.err.find("1 empty lines"), std::string::npos) << e.err;

  const std::string cfg = t.path + "/tiny.json";
  tfm::test::spit(cfg, std::string(R"({"train_limit": 100, "valid_limit": 8, "vocab_size": 300, "num_hiddens": 16,
    "num_layers": 1, "num_heads": 2, "ffn_num_hiddens": 32, "max_len": 40, "num_steps": 10, "max_tokens": 600,
    "epochs": 1, "warmup_steps": 5, "label_smoothing": 0.1, "stop_after_steps": 2, "data_dir": ")") +
                           tfm::test::data_dir() + "\"}");
  TfmRun tr = run_tfm_in(t.path, {"train", "--config", cfg, "--out", t.path + "/run", "--no-progress", "--threads", "1"});
  ASSERT_EQ(tr.exit_code, 0) << tr.describe();
  const std::string saved = tfm::test::slurp(t.path + "/run/train_config.json");
  EXPECT_NE(saved.find("\"label_smoothing\": 0.1,"), std::string::npos) << saved;
}

}  // namespace
}  // namespace tfm::test
