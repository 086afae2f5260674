// What a new user hit trying the product (issue 26, "Found by a new user"): each test runs the `tfm` binary or the
// library as such a user does and checks the behaviour that was wrong. Expected values come from a path that does
// not share the fault (a text read from stdin instead of the command line), from the Hugging Face behaviour being
// matched, or from the messages the commands are meant to give, never from the output under test.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "ops/gemm.h"
#include "run_tfm.h"
#include "tfm/tfm.h"
#include "text/bert_tokenizer.h"
#include "test_util.h"

using tfm::test::fixture;
using tfm::test::run_tfm_in;
using tfm::test::TfmRun;

namespace {

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

// CLI11 reads "[a, b]" as a list of values (its vector syntax), also after "--": "[MASK]" reached fill-mask as
// "MASK", "[1, 2, 3]" became three texts and "[CLS]" became "CLS". A text typed on the command line must give what
// the same text read from a file or stdin gives.
TEST(CliTextArguments, BracketedTextReachesTheCommandByteForByte) {
  tfm::test::TempFolder t;
  const std::string mlm = fixture("heads_mlm");
  for (const std::string text : {"[1, 2, 3]", "[CLS]", "[MASK]", "[]", "[a,b]", "\x1f[x]"}) {
    TfmRun arg = run_tfm_in(t.path, {"tokenize", "--model", mlm, text});
    TfmRun after_dashes = run_tfm_in(t.path, {"tokenize", "--model", mlm, "--", text});
    ASSERT_EQ(arg.exit_code, 0) << arg.describe();
    ASSERT_EQ(after_dashes.exit_code, 0) << after_dashes.describe();
    // One line per text, with the tokens the tokenizer gives the text itself.
    const std::vector<std::string> want = tfm::BertTokenizer::from_dir(mlm).encode(text).tokens;
    ASSERT_EQ(json_lines(arg.out).size(), 1u) << text << "\n" << arg.out;
    EXPECT_EQ(json_lines(arg.out)[0]["tokens"].get<std::vector<std::string>>(), want) << text;
    EXPECT_EQ(arg.out, after_dashes.out) << text;
  }
  // fill-mask on a bare "[MASK]": one list of candidates, not "input 1 has no [MASK] token: 'MASK'".
  TfmRun fm = run_tfm_in(t.path, {"fill-mask", "--model", mlm, "[MASK]"});
  ASSERT_EQ(fm.exit_code, 0) << fm.describe();
  ASSERT_EQ(json_lines(fm.out).size(), 1u);
  EXPECT_TRUE(json_lines(fm.out)[0].is_array());
  // translate: the sentence on the command line and the same sentence on stdin translate alike.
  const std::string d2l = fixture("d2l_trained");
  TfmRun on_line = run_tfm_in(t.path, {"translate", "--quiet", "--model", d2l, "[go] ."});
  TfmRun on_stdin = run_tfm_in(t.path, {"translate", "--quiet", "--model", d2l}, "[go] .\n");
  ASSERT_EQ(on_line.exit_code, 0) << on_line.describe();
  ASSERT_EQ(on_stdin.exit_code, 0) << on_stdin.describe();
  EXPECT_EQ(on_line.out, on_stdin.out);
  TfmRun plain = run_tfm_in(t.path, {"translate", "--quiet", "--model", d2l, "go ."});
  EXPECT_NE(on_line.out, plain.out) << "the brackets were dropped";
  // An option's value in the --name=VALUE form is left whole too.
  TfmRun eq = run_tfm_in(t.path, {"tokenize", "--model", mlm, "--pair=[SEP]", "a"});
  ASSERT_EQ(eq.exit_code, 0) << eq.describe();
  TfmRun sep = run_tfm_in(t.path, {"tokenize", "--model", mlm, "--pair", "[SEP]", "a"});
  EXPECT_EQ(eq.out, sep.out);
}

// The fill-mask pipeline returns one list per [MASK]; with several masks it decodes `sequence` with
// skip_special_tokens=False, so each sequence keeps the other masks (and [CLS] / [SEP]). tfm dropped them:
// "edmonton is the of france."
TEST(FillMask, SeveralMasksGiveOneListPerMaskKeepingTheOtherMasks) {
  tfm::test::TempFolder t;
  TfmRun r = run_tfm_in(t.path, {"fill-mask", "--model", fixture("heads_mlm"), "--top-k", "3",
                                 "paris is the [MASK] of [MASK].", "the cat sat on the [MASK]."});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<nlohmann::json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u);
  ASSERT_TRUE(lines[0].is_array() && lines[0].size() == 2) << lines[0].dump();
  for (size_t m = 0; m < 2; ++m) {
    ASSERT_EQ(lines[0][m].size(), 3u);
    for (const auto& c : lines[0][m]) {
      const std::string tok = c["token_str"].get<std::string>();
      if (tok.find_first_of(".,?!'") != std::string::npos) continue;  // clean_up_tokenization would move it
      // WordPiece decoding: a "##" piece joins the word before it.
      const std::string word = tok.rfind("##", 0) == 0 ? tok.substr(2) : " " + tok;
      const std::string want = m == 0 ? "[CLS] paris is the" + word + " of [MASK]. [SEP]"
                                      : "[CLS] paris is the [MASK] of" + word + ". [SEP]";
      EXPECT_EQ(c["sequence"].get<std::string>(), want);
    }
  }
  // One mask: a flat list, special tokens skipped.
  ASSERT_TRUE(lines[1].is_array() && lines[1].size() == 3 && lines[1][0].is_object()) << lines[1].dump();
  for (const auto& c : lines[1]) {
    const std::string tok = c["token_str"].get<std::string>();
    if (tok != "[MASK]" && tok != "[UNK]" && tok != "[CLS]" && tok != "[SEP]" && tok != "[PAD]") {
      EXPECT_EQ(c["sequence"].get<std::string>(), "the cat sat on the " + tok + ".");
    }
  }
}

// tfm::MaskFiller::fill answered an input without a mask token with no candidates (Python: [[]]) where the CLI
// refuses it; it throws now, as the fill-mask pipeline raises, naming the input.
TEST(FillMask, AnInputWithoutAMaskIsRefusedByTheLibrary) {
  const tfm::MaskFiller m(fixture("heads_mlm"), tfm::ClassifierOptions{1, ""});
  const tfm::TextEncoding with = m.tokenizer().encode("the cat sat on the [MASK]");
  const tfm::TextEncoding without = m.tokenizer().encode("the cat");
  EXPECT_EQ(m.fill({with}).size(), 1u);
  try {
    m.fill({with, without});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "input 1 has no [MASK] token");
  }
}

// Ctrl-C or SIGTERM during recipe training killed it at once, losing up to a checkpoint interval. Now the step in
// progress finishes, a checkpoint is saved, stderr says how to resume, and tfm exits 128 + the signal number.
TEST(TrainSignals, CtrlCAndSigtermSaveACheckpointAndSayHowToResume) {
  tfm::test::TempFolder t;
  const std::string cfg = t.path + "/tiny.json";
  tfm::test::spit(cfg, std::string(R"({"train_limit": 300, "valid_limit": 8, "vocab_size": 500, "num_hiddens": 16,
    "num_layers": 1, "num_heads": 2, "ffn_num_hiddens": 32, "max_len": 40, "num_steps": 10, "max_tokens": 600,
    "epochs": 1000, "patience": 1000, "warmup_steps": 5, "checkpoint_every": 100000, "data_dir": ")") +
                           tfm::test::data_dir() + "\"}");
  for (const int sig : {SIGINT, SIGTERM}) {
    const std::string out = t.path + "/run" + std::to_string(sig);
    tfm::test::RunOptions opt;
    // Signal once training steps are running (a progress line is printed), not while SentencePiece trains.
    opt.while_running = [sig](pid_t pid, const std::string& err) {
      for (int i = 0; i < 6000 && tfm::test::slurp(err).find(" batch ") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      kill(pid, sig);
    };
    TfmRun r = tfm::test::run_tfm_with(t.path, {"train", "--config", cfg, "--out", out, "--threads", "1"}, "", opt);
    EXPECT_EQ(r.signal, 0) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + sig) << r.describe();
    EXPECT_NE(r.err.find(sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("checkpoint saved"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tfm train --resume " + out), std::string::npos) << r.err;
    // The checkpoint holds the last finished step (checkpoint_every is far away) and the run resumes from it.
    ASSERT_TRUE(std::filesystem::exists(out + "/checkpoint.safetensors")) << r.describe();
    auto state = [&] {
      tfm::SafeTensors ck = tfm::SafeTensors::open(out + "/checkpoint.safetensors");
      return nlohmann::json::parse(ck.metadata()["state"].get<std::string>());
    };
    const int64_t step = state()["step"].get<int64_t>();
    EXPECT_GE(step, 1);
    TfmRun more = run_tfm_in(t.path, {"train", "--resume", out, "--threads", "1", "--no-progress", "--set",
                                      "stop_after_steps=" + std::to_string(step + 1)});
    ASSERT_EQ(more.exit_code, 0) << more.describe();
    EXPECT_EQ(state()["step"].get<int64_t>(), step + 1);
  }
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

// --skip-empty left no record of which lines were dropped: JSON lines now carry "line", and a .npy output gets
// OUT.lines.txt with the input line of each row, so rows line up with the input.
TEST(EmbedSkipEmpty, RowsNameTheirInputLines) {
  tfm::test::TempFolder t;
  const std::string lines = t.path + "/lines.txt";
  tfm::test::spit(lines, "\nthe cat sat\n   \nthe dog ran\n\n");
  TfmRun j = run_tfm_in(t.path, {"embed", "-q", "--model", fixture("st_mean"), "--input", lines, "--skip-empty"});
  ASSERT_EQ(j.exit_code, 0) << j.describe();
  std::vector<nlohmann::json> rows = json_lines(j.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["line"], 2);
  EXPECT_EQ(rows[1]["line"], 4);
  TfmRun n = run_tfm_in(t.path, {"embed", "-q", "--model", fixture("st_mean"), "--input", lines, "--skip-empty", "-o",
                                 t.path + "/v.npy"});
  ASSERT_EQ(n.exit_code, 0) << n.describe();
  EXPECT_EQ(tfm::test::slurp(t.path + "/v.lines.txt"), "2\n4\n");
}

// Issue 26 item 6: a folder given as the input file, and an empty file, gave "X: is a folder" / no rows and exit 0
// in embed but "X: read error: Is a directory" / "X: empty file" in classify, rerank and fill-mask. Now one answer
// in all four: a folder is io/text_file's check_not_folder message; an empty file is an empty output and exit 0
// (embed's documented [0, dim] array, EmbedCli.EmptyLineIsAnErrorNamingItUnlessSkipped; no lines from classify and
// fill-mask, which print one line per input; rerank's empty ranking "[]").
TEST(CliInputFiles, AFolderAndAnEmptyFileGiveTheSameAnswerInEveryCommand) {
  tfm::test::TempFolder t;
  const std::string dir = t.path + "/texts", empty = t.path + "/empty.txt";
  std::filesystem::create_directory(dir);
  tfm::test::spit(empty, "");
  struct Command {
    std::vector<std::string> args;
    std::string empty_stdout;
  };
  const std::vector<Command> commands = {
      {{"embed", "-q", "--model", fixture("st_mean")}, ""},
      {{"classify", "--model", fixture("heads_seqcls")}, ""},
      {{"rerank", "--model", fixture("heads_cross"), "--query", "a cat"}, "[]\n"},
      {{"fill-mask", "--model", fixture("heads_mlm")}, ""}};
  for (const auto& c : commands) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--input", dir});
    tfm::test::expect_one_line_error(run_tfm_in(t.path, args), dir + ": is a folder, expected a file");
    args = c.args;
    args.insert(args.end(), {"--input", empty});
    TfmRun r = run_tfm_in(t.path, args);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out, c.empty_stdout) << c.args[0];
    EXPECT_EQ(r.err.find("error"), std::string::npos) << c.args[0] << ": " << r.err;
  }
  // Without texts or --input the commands still ask for them.
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls")}),
                                   "give texts to classify");
}

// Issue 26 item 6: bad UTF-8 was a 1-based column in files read whole (classify --input, the NMT corpus) and a
// 0-based byte offset elsewhere (arguments, embed --input, the library). One unit now: the 0-based byte offset in
// the line or text.
TEST(CliInputFiles, InvalidUtf8IsAByteOffsetInEveryCommand) {
  tfm::test::TempFolder t;
  const std::string bad = t.path + "/bad.txt";
  tfm::test::spit(bad, "the cat\nab\xff" "c\n");
  const std::vector<std::vector<std::string>> runs = {
      {"classify", "--model", fixture("heads_seqcls"), "--input", bad},
      {"classify", "--model", fixture("heads_seqcls"), "ab\xff" "c"},
      {"fill-mask", "--model", fixture("heads_mlm"), "--input", bad},
      {"embed", "-q", "--model", fixture("st_mean"), "--input", bad}};
  for (const auto& args : runs) {
    TfmRun r = run_tfm_in(t.path, args);
    tfm::test::expect_one_line_error(r, "byte offset 2");
    EXPECT_EQ(r.err.find("column"), std::string::npos) << r.err;
  }
}

// --quantize-output-projection without --dtype bf16 / int8 changed nothing and was accepted silently.
TEST(CliOptionChecks, QuantizedOutputProjectionNeedsAReducedDtype) {
  tfm::test::TempFolder t;
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--quantize-output-projection", "go ."}),
      "--quantize-output-projection");
  TfmRun ok = run_tfm_in(t.path, {"translate", "--quiet", "--model", fixture("d2l_trained"), "--dtype", "bf16",
                                  "--quantize-output-projection", "go ."});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

// Beam search (and greedy decoding) emitted <unk> with no way to suppress it (CTranslate2's disable_unk).
// Greedy: removing <unk> from each step's choice leaves every translation that had no <unk> unchanged (its argmax
// was never <unk>), and changes every one that had.
TEST(TranslateSuppressUnk, NoUnkIsGeneratedAndOtherwiseGreedyIsUnchanged) {
  tfm::test::TempFolder t;
  const std::string d2l = fixture("d2l_trained");
  const std::vector<std::string> sentences = {"go .", "i lost .", "who are you ?", "help !", "jump .", "i'm 19 ."};
  std::vector<std::string> args = {"translate", "--quiet", "--model", d2l};
  args.insert(args.end(), sentences.begin(), sentences.end());
  TfmRun plain = run_tfm_in(t.path, args);
  args.push_back("--suppress-unk");
  TfmRun sup = run_tfm_in(t.path, args);
  ASSERT_EQ(plain.exit_code, 0) << plain.describe();
  ASSERT_EQ(sup.exit_code, 0) << sup.describe();
  std::istringstream a(plain.out), b(sup.out);
  std::string x, y;
  int with_unk = 0;
  for (size_t i = 0; i < sentences.size(); ++i) {
    ASSERT_TRUE(std::getline(a, x) && std::getline(b, y));
    EXPECT_EQ(y.find("<unk>"), std::string::npos) << sentences[i] << " -> " << y;
    if (x.find("<unk>") == std::string::npos) {
      EXPECT_EQ(x, y) << sentences[i];
    } else {
      ++with_unk;
      EXPECT_NE(x, y) << sentences[i];
    }
  }
  EXPECT_GE(with_unk, 2) << "the fixture sentences include some translated with <unk>";
  args.insert(args.end() - 1, {"--beam", "4"});
  TfmRun beam = run_tfm_in(t.path, args);
  ASSERT_EQ(beam.exit_code, 0) << beam.describe();
  EXPECT_EQ(beam.out.find("<unk>"), std::string::npos) << beam.out;
}

// A folder from `tfm convert --dtype int8` computed in int8 whatever dtype was asked for, and Encoder::dtype()
// said fp32. Now fp32 / bf16 dequantise it (w = q * scale of the row): fp32 on the int8 folder equals, bit for bit,
// fp32 on a folder the test dequantises itself; the default is the stored type, and dtype() reports it.
TEST(Int8Folder, OtherDtypesDequantiseAndDtypeReportsTheTypeUsed) {
  namespace fs = std::filesystem;
  tfm::test::TempFolder t;
  const std::string q8 = t.path + "/int8", deq = t.path + "/dequantised";
  TfmRun c = run_tfm_in(t.path, {"convert", "--model", fixture("bert"), "--dtype", "int8", "--out", q8});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  {
    tfm::SafeTensors q = tfm::SafeTensors::open(q8 + "/model.safetensors");
    std::vector<std::pair<std::string, tfm::Tensor>> tensors;
    int64_t dequantised = 0;
    for (const std::string& name : q.names()) {
      if (name.size() > 6 && name.compare(name.size() - 6, 6, "_scale") == 0) continue;
      if (q.dtype_of(name) != "I8") {
        tensors.emplace_back(name, q.get(name));
        continue;
      }
      const tfm::Shape shape = q.shape_of(name);
      const int8_t* w = reinterpret_cast<const int8_t*>(q.raw_data(name));
      const tfm::Tensor scale = q.get(name + "_scale");
      tfm::Tensor f = tfm::Tensor::empty(shape);
      for (int64_t r = 0; r < shape[0]; ++r)
        for (int64_t k = 0; k < shape[1]; ++k) f.f32()[r * shape[1] + k] = (float)w[r * shape[1] + k] * scale.f32()[r];
      tensors.emplace_back(name, f);
      ++dequantised;
    }
    ASSERT_GT(dequantised, 0);
    fs::create_directories(deq);
    tfm::save_safetensors(deq + "/model.safetensors", tensors);
    fs::copy_file(q8 + "/config.json", deq + "/config.json");
  }
  tfm::SafeTensors io = tfm::SafeTensors::open(fixture("bert/io.safetensors"));
  auto ids_of = [](const tfm::Tensor& x) { return std::vector<int64_t>(x.i64(), x.i64() + x.numel()); };
  const std::vector<int64_t> ids = ids_of(io.get("input_ids")), mask = ids_of(io.get("attention_mask")),
                             types = ids_of(io.get("token_type_ids"));
  const tfm::EncoderInputs in{ids.data(), mask.data(), types.data(), 3, 6};
  auto run = [&](const std::string& dir, const std::string& dtype, const std::string& want_dtype) {
    tfm::EncoderOptions o;
    o.dtype = dtype;
    tfm::Encoder e(dir, o);
    EXPECT_EQ(e.dtype(), want_dtype) << dir << " dtype '" << dtype << "'";
    tfm::FloatArray out = e.forward(in);
    return std::vector<float>(out.data(), out.data() + out.numel());
  };
  const std::vector<float> as_stored = run(q8, "", "int8"), in_int8 = run(q8, "int8", "int8");
  const std::vector<float> fp32 = run(q8, "fp32", "fp32"), dequantised_fp32 = run(deq, "fp32", "fp32");
  EXPECT_EQ(as_stored, in_int8);
  EXPECT_EQ(fp32, dequantised_fp32) << "fp32 on the int8 folder must compute in fp32 on the dequantised weights";
  // int8 computes differently from fp32 where the CPU multiplies int8 natively; elsewhere (ops::gemm.h's fp32
  // fallback) it is the dequantised weights' fp32 product, which is the fp32 run's.
  const bool native_int8 = tfm::ops::has_native_product(tfm::ops::ComputeType::I8);
  if (native_int8) EXPECT_NE(fp32, in_int8);
  else EXPECT_EQ(fp32, in_int8);
  EXPECT_EQ(run(q8, "bf16", "bf16"), run(deq, "bf16", "bf16"));
  EXPECT_EQ(run(fixture("bert"), "", "fp32").size(), fp32.size());  // an fp32 folder stays fp32 by default
  // The head commands take --dtype as encode does: fp32 on an int8 folder computes in fp32 on the dequantised
  // weights (not silently in int8), the default is the stored int8.
  const std::string cls = t.path + "/cls8";
  ASSERT_EQ(run_tfm_in(t.path, {"convert", "--model", fixture("heads_seqcls"), "--dtype", "int8", "--out", cls}).exit_code, 0);
  TfmRun as_fp32 = run_tfm_in(t.path, {"classify", "--model", cls, "--dtype", "fp32", "a cat"});
  TfmRun as_int8 = run_tfm_in(t.path, {"classify", "--model", cls, "--dtype", "int8", "a cat"});
  TfmRun stored = run_tfm_in(t.path, {"classify", "--model", cls, "a cat"});
  ASSERT_EQ(as_fp32.exit_code, 0) << as_fp32.describe();
  EXPECT_EQ(stored.out, as_int8.out);
  if (native_int8) { EXPECT_NE(as_fp32.out, as_int8.out); }
}

// encode on a folder without model.safetensors names --init random; encode --pooled on a checkpoint without a
// pooler fails before running the model (nothing printed on stdout).
TEST(EncodeMessages, MissingWeightsAndMissingPoolerAreNamedBeforeRunning) {
  tfm::test::TempFolder t;
  const std::string dir = t.path + "/noweights";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture("heads_mlm/config.json"), dir + "/config.json");
  std::filesystem::copy_file(fixture("heads_mlm/vocab.txt"), dir + "/vocab.txt");
  TfmRun r = run_tfm_in(t.path, {"encode", "--model", dir, "the cat"});
  tfm::test::expect_one_line_error(r, "--init random");
  // heads_mlm has no pooler (BertForMaskedLM).
  TfmRun p = run_tfm_in(t.path, {"encode", "--model", fixture("heads_mlm"), "--pooled", t.path + "/p.npy", "the cat"});
  tfm::test::expect_one_line_error(p, "has no pooler");
  EXPECT_EQ(p.out, "") << "failed before the forward pass";
}

// --resume could not extend a run (--set epochs=N refused) and train_config.json kept the old run controls.
// Now a finished 1-epoch run resumed with --set epochs=2 trains a second epoch, train_config.json records
// epochs 2 and the step limit of the invocation, and fewer epochs than trained is refused. --help lists the keys.
TEST(TrainResume, SetEpochsExtendsAFinishedRunAndTheConfigRecordsIt) {
  tfm::test::TempFolder t;
  const std::string cfg = t.path + "/tiny.json", out = t.path + "/run";
  tfm::test::spit(cfg, std::string(R"({"train_limit": 100, "valid_limit": 8, "vocab_size": 300, "num_hiddens": 16,
    "num_layers": 1, "num_heads": 2, "ffn_num_hiddens": 32, "max_len": 40, "num_steps": 10, "max_tokens": 600,
    "epochs": 1, "patience": 5, "warmup_steps": 5, "data_dir": ")") + tfm::test::data_dir() + "\"}");
  TfmRun first = run_tfm_in(t.path, {"train", "--config", cfg, "--out", out, "--no-progress", "--threads", "1"});
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  auto log_rows = [&] {
    std::istringstream in(tfm::test::slurp(out + "/train_log.csv"));
    std::string line;
    int n = -1;  // header
    while (std::getline(in, line)) n += !line.empty();
    return n;
  };
  ASSERT_EQ(log_rows(), 1);
  TfmRun more = run_tfm_in(t.path, {"train", "--resume", out, "--set", "epochs=2", "--no-progress", "--threads", "1"});
  ASSERT_EQ(more.exit_code, 0) << more.describe();
  EXPECT_EQ(log_rows(), 2);
  // The summary's time spans the whole run; a resumed invocation also says its own.
  EXPECT_EQ(first.out.find("this invocation"), std::string::npos) << first.out;
  EXPECT_NE(more.out.find("(times over the whole run; this invocation "), std::string::npos) << more.out;
  EXPECT_NE(more.out.find("trained 2 epochs"), std::string::npos) << more.out;
  nlohmann::json saved = nlohmann::json::parse(tfm::test::slurp(out + "/train_config.json"));
  EXPECT_EQ(saved["epochs"], 2);
  // A step limit given on resume counts the run's steps from its start and is recorded too.
  const int64_t steps = tfm::SafeTensors::open(out + "/checkpoint.safetensors").metadata().contains("state")
                            ? nlohmann::json::parse(tfm::SafeTensors::open(out + "/checkpoint.safetensors")
                                                        .metadata()["state"].get<std::string>())["step"].get<int64_t>()
                            : 0;
  TfmRun limited = run_tfm_in(t.path, {"train", "--resume", out, "--set", "epochs=3", "--set",
                                       "stop_after_steps=" + std::to_string(steps + 1), "--no-progress"});
  ASSERT_EQ(limited.exit_code, 0) << limited.describe();
  saved = nlohmann::json::parse(tfm::test::slurp(out + "/train_config.json"));
  EXPECT_EQ(saved["stop_after_steps"], steps + 1);
  EXPECT_EQ(saved["epochs"], 3);
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"train", "--resume", out, "--set", "epochs=1"}),
                                   "has already trained 2 epochs");
  TfmRun help = run_tfm_in(t.path, {"train", "--help"});
  for (const char* key : {"label_smoothing", "stop_after_steps", "max_tokens", "warmup_steps"})
    EXPECT_NE(help.out.find(key), std::string::npos) << key << "\n" << help.out;
}

// ------------------------------------------------------------------- session 13's new-user walkthrough

// --bad-words took every following word as another bad word: `--bad-words va "go ." "i lost ."` printed nothing,
// exited 0 and waited on stdin. One value per option, as --help says.
TEST(NewUserS13, BadWordsTakesOneValueAndTheSentencesStay) {
  tfm::test::TempFolder t;
  TfmRun r = run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--bad-words", "va", "go .", "i lost ."});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  TfmRun piped = run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--bad-words", "va", "--quiet"},
                            "go .\ni lost .\n");
  ASSERT_EQ(piped.exit_code, 0) << piped.describe();
  EXPECT_EQ(r.out, piped.out);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  EXPECT_EQ(r.out.find("va "), std::string::npos) << r.out;  // the bad word is banned
}

// Options with no effect are refused, as --length-penalty without --beam is.
TEST(NewUserS13, OptionsWithoutEffectAreRefused) {
  tfm::test::TempFolder t;
  for (const char* f : {"--sampling-topp", "--sampling-temperature"})
    tfm::test::expect_one_line_error(
        run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), f, "0.5", "go ."}), "--sampling-topk");
  TfmRun sampled = run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--sampling-topk", "0",
                                       "--sampling-topp", "0.5", "--seed", "1", "go ."});
  EXPECT_EQ(sampled.exit_code, 0) << sampled.describe();
  tfm::test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe dog is bad,neg\n");
  const std::vector<std::string> base = {"finetune", "--model", fixture("heads_seqcls"), "--train",
                                         t.path + "/train.csv", "--out", t.path + "/o", "--epochs", "1"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_tfm_in(t.path, a);
  };
  tfm::test::expect_one_line_error(with({"--mlm-probability", "0.5"}), "--mlm-probability is the masking rate");
  tfm::test::expect_one_line_error(with({"--labels", ""}), "--labels: no label names");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/o"));
}

// finetune's default --max-length 128 on a model of 64 positions failed ("sequence of 128 tokens is longer than
// max_position_embeddings (64)"); it is capped at the model's longest input, as run_glue.py caps max_seq_length.
TEST(NewUserS13, FinetuneCapsMaxLengthAtTheModelsPositions) {
  tfm::test::TempFolder t;
  std::string long_text;
  for (int i = 0; i < 150; ++i) long_text += "the cat ";
  tfm::test::spit(t.path + "/train.csv", "text,label\n" + long_text + ",pos\nthe dog is bad,neg\n");
  for (const char* len : {"", "512"}) {
    std::vector<std::string> a = {"finetune", "--model", fixture("heads_seqcls"), "--train", t.path + "/train.csv",
                                  "--out", t.path + "/o" + len, "--epochs", "1", "--no-progress"};
    if (*len) a.insert(a.end(), {"--max-length", len});
    TfmRun r = run_tfm_in(t.path, a);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
  }
  TfmRun c = run_tfm_in(t.path, {"classify", "--model", t.path + "/o", "--max-length", "64", long_text});
  EXPECT_EQ(c.exit_code, 0) << c.describe();
}

// finetune on a translation folder said "config.json: missing required key 'vocab_size'".
TEST(NewUserS13, EncoderCommandsOnATranslationFolderSayWhatItIs) {
  tfm::test::TempFolder t;
  tfm::test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe dog is bad,neg\n");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"finetune", "--model", fixture("d2l_trained"), "--train",
                                                       t.path + "/train.csv", "--out", t.path + "/o"}),
                                   "(a translation model), not an encoder");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"classify", "--model", fixture("marian"), "hello"}),
                                   "marian folder (a translation model), not an encoder");
}

// id2label given as a list was ignored (labels LABEL_0, ...), and an unknown problem_type accepted; transformers
// refuses both.
TEST(NewUserS13, MalformedId2labelAndProblemTypeAreRefused) {
  tfm::test::TempFolder t;
  const nlohmann::json cfg = nlohmann::json::parse(tfm::test::slurp(fixture("heads_seqcls/config.json")));
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"id2label", nlohmann::json::array({"a", "b", "c"})}, {"problem_type", "foo"}}) {
    SCOPED_TRACE(key);
    nlohmann::json c = cfg;
    c[key] = value;
    const std::string m = t.path + "/m_" + key;
    tfm::test::link_folder(fixture("heads_seqcls"), m, {{"config.json", ""}});
    tfm::test::spit(m + "/config.json", c.dump());
    tfm::test::expect_one_line_error(run_tfm_in(t.path, {"classify", "--model", m, "the cat"}), key);
    tfm::test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe dog is bad,neg\n");
    tfm::test::expect_one_line_error(run_tfm_in(t.path, {"finetune", "--model", m, "--train", t.path + "/train.csv",
                                                         "--out", t.path + "/o"}),
                                     key);
  }
}

// Reading a folder gave "basic_filebuf::underflow error reading the file: Is a directory" (score) and
// "adir: read error" (tokenize); every other command says "is a folder, expected a file".
TEST(NewUserS13, ScoreAndTokenizeNameAFolderGivenAsAFile) {
  tfm::test::TempFolder t;
  std::filesystem::create_directory(t.path + "/adir");
  const std::string d = t.path + "/adir";
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"score", "--model", fixture("d2l_trained"), "--source", d, "--target", d}),
      d + ": is a folder, expected a file");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"tokenize", "--model", fixture("heads_seqcls"), "--input", d}),
                                   d + ": is a folder, expected a file");
}

// A file named .gz that is not gzip was read as plain text (zlib passes it through).
TEST(NewUserS13, AGzNameThatIsNotGzipIsRefused) {
  tfm::test::TempFolder t;
  tfm::test::spit(t.path + "/fake.gz", "bad gz\n");
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "-i", t.path + "/fake.gz", "-o", t.path + "/v.npy"}),
      "fake.gz: not a gzip file");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/v.npy"));
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"classify", "--model", fixture("heads_seqcls"), "--input", t.path + "/fake.gz"}),
      "fake.gz: not a gzip file");
}

// score folded a third TAB field into the target; invalid UTF-8 did not name where it came from.
TEST(NewUserS13, ScoreAndTranslateInputErrorsNameTheirSource) {
  tfm::test::TempFolder t;
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"score", "--model", fixture("d2l_trained")}, "go .\tva !\textra\n"),
      "stdin line 1: expected 'source<TAB>target' (more than one TAB)");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"score", "--model", fixture("d2l_trained")}, "go .\tva \xff\n"),
                                   "stdin line 1: target");
  tfm::test::spit(t.path + "/mixed.en", "go .\ncaf\xc3 .\n");
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--input", t.path + "/mixed.en", "-q"}),
      t.path + "/mixed.en: sentence 2: invalid UTF-8");
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"rerank", "--model", fixture("heads_cross"), "--query", "\xff\xfe", "a"}), "--query: invalid UTF-8");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "--prompt", "\xff",
                                                       "-i", "-", "-o", t.path + "/v.npy"},
                                              "hello\n"),
                                   "--prompt: invalid UTF-8");
}

// encode -o x.txt wrote .npy data into x.txt, --attention-png a.jpg PNG data into a .jpg.
TEST(NewUserS13, OutputNamesMatchTheFormatWritten) {
  tfm::test::TempFolder t;
  tfm::test::expect_one_line_error(
      run_tfm_in(t.path, {"encode", "--model", fixture("heads_seqcls"), "--text", "a", "-o", t.path + "/x.txt"}),
      "must end in .npy");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"),
                                                       "--attention-png", t.path + "/a.jpg", "go ."}),
                                   "must end in .png or .svg");
  EXPECT_FALSE(std::filesystem::exists(t.path + "/x.txt"));
  EXPECT_FALSE(std::filesystem::exists(t.path + "/a.jpg"));
  TfmRun ok = run_tfm_in(t.path, {"encode", "--model", fixture("heads_seqcls"), "--text", "a", "-o", "/dev/null"});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();  // a device is taken as it is
}

// download refused --threads, which the README says every command takes.
TEST(NewUserS13, DownloadTakesThreadsLikeEveryCommand) {
  tfm::test::TempFolder t;
  TfmRun r = run_tfm_in(t.path, {"download", "--threads", "1", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("--threads"), std::string::npos) << r.out;
}

// A completed fine-tuning run removes its training state; --resume on it now says so.
TEST(NewUserS13, ResumeOfAFinishedFinetuneSaysItFinished) {
  tfm::test::TempFolder t;
  tfm::test::spit(t.path + "/train.csv", "text,label\nthe cat is good,pos\nthe dog is bad,neg\n");
  const std::vector<std::string> a = {"finetune", "--model", fixture("heads_seqcls"), "--train", t.path + "/train.csv",
                                      "--out", t.path + "/o", "--epochs", "1", "--no-progress"};
  TfmRun r = run_tfm_in(t.path, a);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::vector<std::string> again = a;
  again.push_back("--resume");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, again), "finished");
}

// translate on a recipe folder that holds only a checkpoint said "config.json: cannot open".
TEST(NewUserS13, TranslateOnACheckpointOnlyFolderSaysToResume) {
  tfm::test::TempFolder t;
  std::filesystem::create_directory(t.path + "/run");
  tfm::test::spit(t.path + "/run/checkpoint.safetensors", "x");
  tfm::test::expect_one_line_error(run_tfm_in(t.path, {"translate", "--model", t.path + "/run", "go ."}),
                                   "tfm train --resume " + t.path + "/run");
}

}  // namespace
