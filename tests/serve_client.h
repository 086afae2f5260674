// `tfm serve` from tests (test_serve.cpp, test_family_matrix.cpp): the real binary on a free loopback port as a
// child process, called with libcurl. Every wait is bounded.
#pragma once
#include "test_paths.h"
#include <curl/curl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tfm::test {

struct Reply {
  long status = 0;
  std::string body;
  std::string headers;  // the response's header lines, as received
  // The value of header `name` (case-insensitive), "" when absent.
  std::string header(const std::string& name) const {
    std::stringstream ss(headers);
    for (std::string line; std::getline(ss, line);) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string k = line.substr(0, colon);
      std::transform(k.begin(), k.end(), k.begin(), ::tolower);
      std::string want = name;
      std::transform(want.begin(), want.end(), want.begin(), ::tolower);
      if (k != want) continue;
      std::string v = line.substr(colon + 1);
      while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
      while (!v.empty() && v.front() == ' ') v.erase(v.begin());
      return v;
    }
    return "";
  }
  nlohmann::json j() const { return nlohmann::json::parse(body, nullptr, false); }
};

inline size_t collect(char* p, size_t s, size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(p, s * n);
  return s * n;
}

inline Reply http(const std::string& method, const std::string& url, const std::string& body = "",
           std::vector<std::string> headers = {"Content-Type: application/json"}) {
  Reply r;
  CURL* c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r.headers);
  if (method == "POST") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body.size());
  }
  curl_slist* h = nullptr;
  for (const auto& s : headers) h = curl_slist_append(h, s.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return r;
}

// `tfm serve --port 0 ...` as a child process; stderr is drained into log() by a thread.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> args, std::vector<std::string> env = {}) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 2);
      int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      close(fds[0]);
      close(fds[1]);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<std::string> full = {TFM_BINARY, "serve", "--port", "0", "--threads", "1"};
      full.insert(full.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& s : full) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv(TFM_BINARY, argv.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    reader_ = std::thread([this] {
      char buf[4096];
      for (ssize_t n; (n = read(fd_, buf, sizeof buf)) > 0;) {
        std::lock_guard<std::mutex> lock(mu_);
        log_.append(buf, n);
      }
    });
    // The port from "bound to http://127.0.0.1:PORT" (printed before the model loads; at most 30 s).
    const std::regex re("bound to http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 3000 && port_ == 0; ++i) {
      std::smatch m;
      std::string l = log();
      if (std::regex_search(l, m, re)) port_ = std::stoi(m[1]);
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  std::string log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  // Polls /health until 200 (at most 30 s).
  bool wait_ready() {
    for (int i = 0; i < 300; ++i) {
      if (http("GET", url("/health")).status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // The exit status once the process ends by itself (at most 30 s; -1 if it does not).
  int terminate_or_wait() { return wait_exit(false); }
  // SIGTERM, then the exit status (at most 30 s; -1 if it had to be killed).
  int terminate() { return wait_exit(true); }

 private:
  int wait_exit(bool term) {
    if (term) kill(pid_, SIGTERM);
    for (int i = 0; i < 3000; ++i) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  int port_ = 0;
  bool exited_ = false;
  std::mutex mu_;
  std::string log_;
  std::thread reader_;
};

// A scratch folder removed with everything in it when the test ends.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    path = (std::filesystem::temp_directory_path() /
            ("tfm_serve_" + std::to_string(::getpid()) + "_" +
             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())))
               .string();
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// A small encoder folder for server tests: tests/fixtures/bert (vocab 60, hidden 32, max_position_embeddings 20)
// plus its 60-line WordPiece vocab.txt, in dir/bert.
inline std::string bert_serve_dir(const std::string& dir) {
  const std::string m = dir + "/bert";
  std::filesystem::create_directories(m);
  std::filesystem::copy_file(std::string(TFM_SOURCE_DIR) + "/tests/fixtures/bert/config.json", m + "/config.json");
  std::filesystem::copy_file(std::string(TFM_SOURCE_DIR) + "/tests/fixtures/bert/model.safetensors",
                             m + "/model.safetensors");
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  const char* words[] = {"the",   "a",     "an",    "time",  "flies", "like",  "arrow", "fruit", "banana", "i",
                         "have",  "dream", "cat",   "dog",   "sat",   "on",    "mat",   "is",    "was",    "and",
                         "or",    "to",    "of",    "in",    "it",    "he",    "she",   "we",    "they",   "you",
                         "red",   "blue",  "green", "big",   "small", "run",   "walk",  "eat",   "drink",  "sleep",
                         "house", "car",   "tree",  "bird",  "fish",  "sun",   "moon",  "star",  "water",  "fire",
                         "one",   "two",   "three", "four",  "five"};
  for (const char* w : words) vocab += std::string(w) + "\n";
  std::ofstream(m + "/vocab.txt") << vocab;
  return m;
}

}  // namespace tfm::test
