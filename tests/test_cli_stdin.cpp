// The CLI's standard input as a co-process uses it: `tfm translate`, `tfm tokenize --input -` and `tfm embed
// --input -` answer each line written to a pipe while the writer waits for that answer (no deadlock on a chunk
// that is never filled), and still read a whole piped stream, gzip included.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "run_tfm.h"
#include "test_util.h"

extern char** environ;

namespace {

using tfm::test::fixture;

// tfm with a pipe on stdin and one on stdout (stderr into a file): write a line, read the answer, under a timeout.
class CoProcess {
 public:
  CoProcess(const std::string& dir, const std::vector<std::string>& args) : err_path_(dir + "/.coprocess.err") {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> argv_s = {TFM_BINARY};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s = {"OMP_NUM_THREADS=1"};
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env_s.push_back(*e);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (rc != 0) throw std::runtime_error("posix_spawn failed");
    signal(SIGPIPE, SIG_IGN);
  }
  ~CoProcess() {
    if (to_ >= 0) ::close(to_);
    if (from_ >= 0) ::close(from_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void write(const std::string& s) {
    ASSERT_EQ(::write(to_, s.data(), s.size()), (ssize_t)s.size());
  }
  // The next line of the answer, or nothing after `seconds` without one (the deadlock this file tests).
  std::optional<std::string> read_line(double seconds = 120) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, (int)left.count()) <= 0) continue;
      char tmp[65536];
      const ssize_t n = ::read(from_, tmp, sizeof tmp);
      if (n <= 0) return std::nullopt;  // closed: the process ended
      buf_.append(tmp, (size_t)n);
    }
  }
  // Closes stdin; the rest of stdout and the exit status.
  int finish(std::string* rest) {
    ::close(to_);
    to_ = -1;
    while (auto l = read_line()) *rest += *l + "\n";
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string err() const { return tfm::test::slurp(err_path_); }

 private:
  std::string err_path_, buf_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
};

TEST(CliStdin, TranslateAnswersEachLineWhileTheWriterWaits) {
  tfm::test::TempFolder t;
  CoProcess p(t.path, {"translate", "--model", fixture("d2l_trained"), "--threads", "1"});
  p.write("go .\n");
  const auto a = p.read_line();
  ASSERT_TRUE(a.has_value()) << "no answer to the first line: " << p.err();
  p.write("i lost .\n\n");
  const auto b = p.read_line(), c = p.read_line();
  ASSERT_TRUE(b && c) << p.err();
  EXPECT_EQ(*c, "") << "an empty line gives an empty line";
  std::string rest;
  EXPECT_EQ(p.finish(&rest), 0) << p.err();
  EXPECT_EQ(rest, "");
  // The same lines as one batch from a file: the same translations.
  tfm::test::TfmRun r = tfm::test::run_tfm_in(t.path, {"translate", "--model", fixture("d2l_trained"), "--threads", "1"},
                                              "go .\ni lost .\n");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, *a + "\n" + *b + "\n");
}

TEST(CliStdin, TokenizeAnswersEachLineWhileTheWriterWaits) {
  tfm::test::TempFolder t;
  CoProcess p(t.path, {"tokenize", "--model", fixture("st_mean"), "--input", "-"});
  for (const char* text : {"the cat sat", "a dog"}) {
    p.write(std::string(text) + "\n");
    const auto a = p.read_line();
    ASSERT_TRUE(a.has_value()) << "no answer to '" << text << "': " << p.err();
    tfm::test::TfmRun r = tfm::test::run_tfm_in(t.path, {"tokenize", "--model", fixture("st_mean"), text});
    EXPECT_EQ(*a + "\n", r.out);
  }
  std::string rest;
  EXPECT_EQ(p.finish(&rest), 0) << p.err();
}

TEST(CliStdin, EmbedAnswersEachLineWhileTheWriterWaits) {
  tfm::test::TempFolder t;
  CoProcess p(t.path, {"embed", "--model", fixture("st_mean"), "--input", "-", "-q", "--threads", "1"});
  std::string answers;
  for (const char* text : {"the cat sat on the mat", "a dog"}) {
    p.write(std::string(text) + "\n");
    const auto a = p.read_line();
    ASSERT_TRUE(a.has_value()) << "no answer to '" << text << "': " << p.err();
    EXPECT_EQ(nlohmann::json::parse(*a).at("embedding").size(), 32u);
    answers += *a + "\n";
  }
  std::string rest;
  EXPECT_EQ(p.finish(&rest), 0) << p.err();
  // Answered one line at a time: the vectors of batches of one.
  tfm::test::TfmRun r = tfm::test::run_tfm_in(
      t.path, {"embed", "--model", fixture("st_mean"), "--input", "-", "-q", "--threads", "1", "--batch-size", "1"},
      "the cat sat on the mat\na dog\n");
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(answers, r.out);
}

// A piped stream (not a file) is still read whole, gzip included, in chunks.
TEST(CliStdin, EmbedReadsAPipedGzipStream) {
  tfm::test::TempFolder t;
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the cat sat on the mat number " + std::to_string(i) + "\n";
  uLongf cap = compressBound((uLong)text.size()) + 64;
  std::string gz(cap, '\0');
  z_stream z{};
  ASSERT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  z.next_in = (Bytef*)text.data();
  z.avail_in = (uInt)text.size();
  z.next_out = (Bytef*)gz.data();
  z.avail_out = (uInt)gz.size();
  ASSERT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  gz.resize(z.total_out);  // the bytes deflate wrote
  deflateEnd(&z);
  CoProcess p(t.path, {"embed", "--model", fixture("st_mean"), "--input", "-", "-q", "--threads", "1"});
  p.write(gz);
  std::string rest;
  EXPECT_EQ(p.finish(&rest), 0) << p.err();
  tfm::test::TfmRun r =
      tfm::test::run_tfm_in(t.path, {"embed", "--model", fixture("st_mean"), "--input", "-", "-q", "--threads", "1"},
                            text);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  // The pauses of a pipe may cut other chunks (other batches) than a file: the same vectors up to rounding.
  std::stringstream a(rest), b(r.out);
  int rows = 0;
  for (std::string la, lb; std::getline(a, la) && std::getline(b, lb); ++rows) {
    const auto va = nlohmann::json::parse(la).at("embedding").get<std::vector<float>>();
    const auto vb = nlohmann::json::parse(lb).at("embedding").get<std::vector<float>>();
    EXPECT_TRUE(tfm::test::all_close(va, vb, 1e-6f)) << "row " << rows;
  }
  EXPECT_EQ(rows, 300);
}

}  // namespace
