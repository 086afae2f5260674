// Downloads against a local HTTP server thread (no network needed), the zip member reader and the dataset
// registry. Expected digests are the FIPS 180 test vectors or were computed with sha256sum/sha1sum, never with
// this code.
#include "test_paths.h"
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "io/download.h"
#include "test_util.h"
#include "io/datasets.h"

namespace fs = std::filesystem;
using namespace tfm;

namespace {

// FIPS 180-2 test vectors.
const char* kAbcSha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
const char* kAbcSha1 = "a9993e364706816aba3e25717850c26c9cd0d89d";
const char* kMillionASha256 = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
const char* kMillionASha1 = "34aa973cd4c4daa4f61eeb2bdbad27316534016f";
// printf abd | sha256sum
const char* kAbdSha256 = "a52d159f262b2c6ddb724a61840befc36eb30c88877a4030b65cbe86298449c9";

// A minimal HTTP/1.1 server on 127.0.0.1 (ephemeral port) serving one request per connection from a route table;
// unknown paths get 404.
class TestServer {
 public:
  struct Route {
    int status;
    std::string body;
    long long content_length;  // header value; -1: body.size(). Larger than body: close early (truncation)
    std::string location;      // for 3xx
    bool stall;                // send headers and 1 byte of the body, then hang until the client gives up
    Route(int status = 200, std::string body = "", long long content_length = -1, std::string location = "",
          bool stall = false)
        : status(status), body(std::move(body)), content_length(content_length), location(std::move(location)),
          stall(stall) {}
  };

  TestServer() {
    // A proxy from the environment (http_proxy) must not be asked for 127.0.0.1; tfm children inherit this too.
    ::setenv("no_proxy", "127.0.0.1,localhost", 1);
    ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error("socket failed");
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(fd_, (sockaddr*)&a, sizeof a) != 0 || ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, (sockaddr*)&a, &len) != 0)
      throw std::runtime_error("bind/listen on 127.0.0.1:0 failed");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~TestServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void set(const std::string& path, Route r) {
    std::lock_guard<std::mutex> lock(mu_);
    routes_[path] = std::move(r);
  }
  int hits(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return hits_[path];
  }

 private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      serve(c);
      ::close(c);
    }
  }
  void send_all(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += size_t(n);
    }
  }
  void serve(int c) {
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) return;
      ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, size_t(n));
    }
    std::istringstream line(req.substr(0, req.find("\r\n")));
    std::string method, path;
    line >> method >> path;
    Route r;
    bool found;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hits_[path]++;
      auto it = routes_.find(path);
      found = it != routes_.end();
      if (found) r = it->second;
    }
    if (!found) r = Route{404, "not found\n"};
    long long cl = r.content_length >= 0 ? r.content_length : (long long)r.body.size();
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " X\r\nContent-Length: " + std::to_string(cl) +
                       "\r\nConnection: close\r\n";
    if (!r.location.empty()) head += "Location: " + r.location + "\r\n";
    send_all(c, head + "\r\n");
    if (!r.stall) {
      send_all(c, r.body);
      return;
    }
    // One byte only: libcurl averages the speed over ~5 s, so more bytes would delay the low-speed abort.
    send_all(c, r.body.substr(0, 1));
    // Hang until the client closes the connection (or 20 s, or the server stops).
    for (int i = 0; i < 400 && !stop_; ++i) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0 && ::recv(c, buf, sizeof buf, 0) <= 0) return;
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, Route> routes_;
  std::map<std::string, int> hits_;
};

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/tfm_download_XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (!p) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_all(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }

// Sorted names of the entries of `dir` (shows any stray *.part).
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

DownloadOptions quiet(const std::string& base_url = "") {
  DownloadOptions o;
  o.base_url = base_url;
  o.progress = false;
  o.connect_timeout_s = 5;
  return o;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

// python3: zipfile.ZipFile('t.zip', 'w') with ZipInfo(..., date_time=(2020,1,1,0,0,0)) members
//   'fra-eng/_about.txt' = 'Tatoeba pairs\n' (ZIP_STORED) and 'fra-eng/fra.txt' = kFraTxt (ZIP_DEFLATED); xxd -i.
// sha256sum t.zip = 1a7bcbf80b0f023b37d4988d07c306e6f8335705e7a1582bc78bb8eb92ec99b2
const unsigned char kZip[] = {
  0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
  0x21, 0x50, 0xe0, 0x8d, 0x52, 0x14, 0x0e, 0x00, 0x00, 0x00, 0x0e, 0x00,
  0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x66, 0x72, 0x61, 0x2d, 0x65, 0x6e,
  0x67, 0x2f, 0x5f, 0x61, 0x62, 0x6f, 0x75, 0x74, 0x2e, 0x74, 0x78, 0x74,
  0x54, 0x61, 0x74, 0x6f, 0x65, 0x62, 0x61, 0x20, 0x70, 0x61, 0x69, 0x72,
  0x73, 0x0a, 0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00,
  0x00, 0x00, 0x21, 0x50, 0x39, 0xc0, 0x56, 0xb0, 0x2a, 0x00, 0x00, 0x00,
  0x42, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x66, 0x72, 0x61, 0x2d,
  0x65, 0x6e, 0x67, 0x2f, 0x66, 0x72, 0x61, 0x2e, 0x74, 0x78, 0x74, 0x73,
  0xcf, 0xd7, 0xe3, 0x0c, 0x4b, 0x54, 0x50, 0xe4, 0xf2, 0xc8, 0xd4, 0xe3,
  0x0c, 0x4e, 0xcc, 0x29, 0x2d, 0x01, 0xb2, 0x83, 0x4a, 0xf3, 0x14, 0x39,
  0x9d, 0xf3, 0x4b, 0x8b, 0x8a, 0x91, 0x39, 0xa9, 0x55, 0x40, 0x9e, 0x3b,
  0x4c, 0x3d, 0x9c, 0x01, 0x00, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03, 0x14,
  0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x21, 0x50, 0xe0, 0x8d, 0x52,
  0x14, 0x0e, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00,
  0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x00,
  0x00, 0x00, 0x00, 0x66, 0x72, 0x61, 0x2d, 0x65, 0x6e, 0x67, 0x2f, 0x5f,
  0x61, 0x62, 0x6f, 0x75, 0x74, 0x2e, 0x74, 0x78, 0x74, 0x50, 0x4b, 0x01,
  0x02, 0x14, 0x03, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21,
  0x50, 0x39, 0xc0, 0x56, 0xb0, 0x2a, 0x00, 0x00, 0x00, 0x42, 0x00, 0x00,
  0x00, 0x0f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
  0x00, 0x80, 0x01, 0x3e, 0x00, 0x00, 0x00, 0x66, 0x72, 0x61, 0x2d, 0x65,
  0x6e, 0x67, 0x2f, 0x66, 0x72, 0x61, 0x2e, 0x74, 0x78, 0x74, 0x50, 0x4b,
  0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x7d, 0x00,
  0x00, 0x00, 0x95, 0x00, 0x00, 0x00, 0x00, 0x00
};
const char* kZipSha256 = "1a7bcbf80b0f023b37d4988d07c306e6f8335705e7a1582bc78bb8eb92ec99b2";
const char* kFraTxt = "Go.\tVa !\nHi.\tSalut !\nRun!\tCours !\nRun!\tCourez !\nGo.\tVa !\nGo.\tVa !\n";
const size_t kFraDataOffset = 62 + 30 + 15;  // local header of member 2 at 62, + 30 + len("fra-eng/fra.txt")
std::string zip_bytes() { return std::string(reinterpret_cast<const char*>(kZip), sizeof kZip); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// download_file

TEST(Download, Sha256AndSha1OfFilesMatchFipsVectors) {
  TempDir d;
  write_all(d.path + "/abc", "abc");
  write_all(d.path + "/a", std::string(1000000, 'a'));
  EXPECT_EQ(sha256_file(d.path + "/abc"), kAbcSha256);
  EXPECT_EQ(sha1_file(d.path + "/abc"), kAbcSha1);
  EXPECT_EQ(sha256_file(d.path + "/a"), kMillionASha256);
  EXPECT_EQ(sha1_file(d.path + "/a"), kMillionASha1);
  EXPECT_NE(error_of([&] { sha256_file(d.path + "/missing"); }).find("missing"), std::string::npos);
}

TEST(Download, BaseUrlReplacesSchemeHostAndPath) {
  RemoteFile f{"https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/train.en.gz", "train.en.gz",
               kAbcSha256, ""};
  EXPECT_EQ(resolve_url(f, {}), f.url);
  DownloadOptions o;
  o.base_url = "http://mirror.local:8000/m30k/";
  EXPECT_EQ(resolve_url(f, o), "http://mirror.local:8000/m30k/train.en.gz");
}

TEST(Download, DownloadsAndVerifiesChecksums) {
  TestServer server;
  server.set("/abc.txt", {200, "abc"});
  server.set("/big.bin", {200, std::string(1000000, 'a')});
  TempDir d;
  std::string dir = d.path + "/sub/dir";  // created on demand
  // Upstream-looking URLs, served through the base URL override.
  RemoteFile abc{"https://example.invalid/x/abc.txt", "abc.txt", kAbcSha256, ""};
  RemoteFile big{"https://example.invalid/y/big.bin", "big.bin", kMillionASha256, kMillionASha1};
  EXPECT_EQ(download_file(abc, dir, quiet(server.url())), DownloadStatus::downloaded);
  EXPECT_EQ(download_file(big, dir, quiet(server.url())), DownloadStatus::downloaded);
  EXPECT_EQ(read_all(dir + "/abc.txt"), "abc");
  EXPECT_EQ(read_all(dir + "/big.bin"), std::string(1000000, 'a'));
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"abc.txt", "big.bin"}));
  EXPECT_EQ(server.hits("/abc.txt"), 1);
}

TEST(Download, Sha1OnlyAndUppercaseHexAccepted) {
  TestServer server;
  server.set("/abc.txt", {200, "abc"});
  TempDir d;
  std::string upper = kAbcSha1;
  for (char& c : upper) c = char(std::toupper((unsigned char)c));
  RemoteFile f{server.url() + "/abc.txt", "abc.txt", "", upper};
  EXPECT_EQ(download_file(f, d.path, quiet()), DownloadStatus::downloaded);
  EXPECT_EQ(read_all(d.path + "/abc.txt"), "abc");
}

TEST(Download, FollowsRedirects) {
  TestServer server;
  server.set("/old/abc.txt", {302, "", -1, "/new/abc.txt"});
  server.set("/new/abc.txt", {200, "abc"});
  TempDir d;
  RemoteFile f{server.url() + "/old/abc.txt", "abc.txt", kAbcSha256, ""};
  EXPECT_EQ(download_file(f, d.path, quiet()), DownloadStatus::downloaded);
  EXPECT_EQ(read_all(d.path + "/abc.txt"), "abc");
  EXPECT_EQ(server.hits("/new/abc.txt"), 1);
}

TEST(Download, ChecksumMismatchThrowsAndLeavesNoFile) {
  TestServer server;
  server.set("/abc.txt", {200, "abd"});
  TempDir d;
  RemoteFile f{server.url() + "/abc.txt", "abc.txt", kAbcSha256, ""};
  std::string msg = error_of([&] { download_file(f, d.path, quiet()); });
  EXPECT_NE(msg.find("abc.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string("expected ") + kAbcSha256), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string("got ") + kAbdSha256), std::string::npos) << msg;
  EXPECT_TRUE(listing(d.path).empty());

  // A previous file at the target (wrong checksum) is re-fetched; a failing re-fetch leaves it as it was.
  write_all(d.path + "/abc.txt", "old");
  EXPECT_NE(error_of([&] { download_file(f, d.path, quiet()); }).find("SHA-256 mismatch"), std::string::npos);
  EXPECT_EQ(read_all(d.path + "/abc.txt"), "old");
  EXPECT_EQ(listing(d.path), std::vector<std::string>{"abc.txt"});

  RemoteFile f1{server.url() + "/abc.txt", "abc.txt", "", kAbcSha1};
  std::string msg1 = error_of([&] { download_file(f1, d.path, quiet()); });
  EXPECT_NE(msg1.find("SHA-1 mismatch: expected a9993e364706816aba3e25717850c26c9cd0d89d, got "
                      "cb4cc28df0fdbe0ecf9d9662e294b118092a5735"),  // printf abd | sha1sum
            std::string::npos)
      << msg1;
}

TEST(Download, Http404NamesStatusAndUrl) {
  TestServer server;
  TempDir d;
  RemoteFile f{server.url() + "/nope.gz", "nope.gz", kAbcSha256, ""};
  std::string msg = error_of([&] { download_file(f, d.path, quiet()); });
  EXPECT_NE(msg.find("HTTP status 404"), std::string::npos) << msg;
  EXPECT_NE(msg.find(server.url() + "/nope.gz"), std::string::npos) << msg;
  EXPECT_TRUE(listing(d.path).empty());

  server.set("/err.gz", {500, "boom"});
  RemoteFile g{server.url() + "/err.gz", "err.gz", kAbcSha256, ""};
  EXPECT_NE(error_of([&] { download_file(g, d.path, quiet()); }).find("HTTP status 500"), std::string::npos);
}

TEST(Download, AlreadyPresentIsSkippedWrongContentIsReplaced) {
  TestServer server;
  server.set("/abc.txt", {200, "abc"});
  TempDir d;
  RemoteFile f{server.url() + "/abc.txt", "abc.txt", kAbcSha256, kAbcSha1};
  write_all(d.path + "/abc.txt", "abc");
  EXPECT_EQ(download_file(f, d.path, quiet()), DownloadStatus::already_present);
  EXPECT_EQ(server.hits("/abc.txt"), 0);

  write_all(d.path + "/abc.txt", "stale");
  EXPECT_EQ(download_file(f, d.path, quiet()), DownloadStatus::downloaded);
  EXPECT_EQ(server.hits("/abc.txt"), 1);
  EXPECT_EQ(read_all(d.path + "/abc.txt"), "abc");
}

TEST(Download, ConnectionClosedMidFileLeavesNoPartialFile) {
  TestServer server;
  std::string body(4000, 'x');
  server.set("/cut.bin", {200, body.substr(0, 1500), 4000});  // Content-Length 4000, 1500 bytes, then close
  TempDir d;
  RemoteFile f{server.url() + "/cut.bin", "cut.bin", kAbcSha256, ""};
  std::string msg = error_of([&] { download_file(f, d.path, quiet()); });
  EXPECT_NE(msg.find("cut off after 1500 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find(server.url() + "/cut.bin"), std::string::npos) << msg;
  EXPECT_TRUE(listing(d.path).empty());
}

TEST(Download, StalledServerTimesOut) {
  TestServer server;
  server.set("/slow.bin", {200, std::string(1000, 'x'), -1, "", true});
  TempDir d;
  RemoteFile f{server.url() + "/slow.bin", "slow.bin", kAbcSha256, ""};
  DownloadOptions o = quiet();
  o.low_speed_limit_bps = 1;
  o.low_speed_time_s = 1;
  std::string msg = error_of([&] { download_file(f, d.path, o); });
  EXPECT_NE(msg.find("download of " + server.url() + "/slow.bin timed out"), std::string::npos) << msg;
  EXPECT_TRUE(listing(d.path).empty());
}

TEST(Download, ConnectionRefusedAndUnresolvableHost) {
  int port;
  {
    TestServer closed;  // take a free port, then release it
    port = std::stoi(closed.url().substr(closed.url().rfind(':') + 1));
  }
  TempDir d;
  RemoteFile f{"http://127.0.0.1:" + std::to_string(port) + "/a", "a", kAbcSha256, ""};
  std::string msg = error_of([&] { download_file(f, d.path, quiet()); });
  EXPECT_NE(msg.find("could not connect to http://127.0.0.1:" + std::to_string(port) + "/a"), std::string::npos)
      << msg;

  // .invalid never resolves (RFC 6761).
  RemoteFile g{"http://tfm-download-test.invalid/a", "a", kAbcSha256, ""};
  msg = error_of([&] { download_file(g, d.path, quiet()); });
  EXPECT_NE(msg.find("could not resolve host 'tfm-download-test.invalid'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the network may be unreachable"), std::string::npos) << msg;
  EXPECT_TRUE(listing(d.path).empty());
}

TEST(Download, RejectsMissingOrMalformedChecksumAndBadFilename) {
  TempDir d;
  EXPECT_THROW(download_file({"http://127.0.0.1:1/a", "a", "", ""}, d.path, quiet()), std::invalid_argument);
  std::string msg = error_of([&] { download_file({"http://127.0.0.1:1/a", "a", "12ab", ""}, d.path, quiet()); });
  EXPECT_NE(msg.find("64 hex digits, got '12ab'"), std::string::npos) << msg;
  msg = error_of([&] { download_file({"http://127.0.0.1:1/a", "../a", kAbcSha256, ""}, d.path, quiet()); });
  EXPECT_NE(msg.find("invalid target filename '../a'"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------------------------
// zip

TEST(DownloadZip, ExtractsDeflatedAndStoredMembers) {
  TempDir d;
  write_all(d.path + "/t.zip", zip_bytes());
  extract_zip_member(d.path + "/t.zip", "fra-eng/fra.txt", d.path + "/fra.txt");
  EXPECT_EQ(read_all(d.path + "/fra.txt"), kFraTxt);
  extract_zip_member(d.path + "/t.zip", "fra-eng/_about.txt", d.path + "/about.txt");
  EXPECT_EQ(read_all(d.path + "/about.txt"), "Tatoeba pairs\n");
}

TEST(DownloadZip, MissingMemberListsMembers) {
  TempDir d;
  write_all(d.path + "/t.zip", zip_bytes());
  std::string msg = error_of([&] { extract_zip_member(d.path + "/t.zip", "fra.txt", d.path + "/out"); });
  EXPECT_NE(msg.find("no member 'fra.txt' (members: fra-eng/_about.txt, fra-eng/fra.txt)"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d.path + "/out"));
}

TEST(DownloadZip, CorruptOrTruncatedArchiveThrows) {
  TempDir d;
  std::string z = zip_bytes();
  z[kFraDataOffset + 5] = char(z[kFraDataOffset + 5] ^ 0x55);
  write_all(d.path + "/bad.zip", z);
  std::string msg = error_of([&] { extract_zip_member(d.path + "/bad.zip", "fra-eng/fra.txt", d.path + "/out"); });
  EXPECT_NE(msg.find("member 'fra-eng/fra.txt'"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d.path + "/out"));

  write_all(d.path + "/cut.zip", zip_bytes().substr(0, 120));
  msg = error_of([&] { extract_zip_member(d.path + "/cut.zip", "fra-eng/fra.txt", d.path + "/out"); });
  EXPECT_NE(msg.find("not a zip file"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------------------------
// dataset registry

TEST(DownloadDatasets, Multi30kHasNineUpstreamFiles) {
  auto files = dataset_files("multi30k");
  ASSERT_EQ(files.size(), 9u);
  std::vector<std::string> names;
  for (const auto& f : files) {
    names.push_back(f.filename);
    EXPECT_EQ(f.url, "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/" + f.filename);
    EXPECT_EQ(f.sha256.size(), 64u) << f.filename;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"test_2016_flickr.de.gz", "test_2016_flickr.en.gz",
                                             "test_2016_flickr.fr.gz", "train.de.gz", "train.en.gz", "train.fr.gz",
                                             "val.de.gz", "val.en.gz", "val.fr.gz"}));
  auto fra = dataset_files("fra-eng");
  ASSERT_EQ(fra.size(), 1u);
  EXPECT_EQ(fra[0].sha1, "94646ad1522d915e7b0f9296181140edcf86a4f5");  // d2l DATA_HUB['fra-eng']
  EXPECT_EQ(find_dataset("fra-eng").extracts.at(0).member, "fra-eng/fra.txt");
}

TEST(DownloadDatasets, UnknownNameListsKnownOnes) {
  std::string msg = error_of([] { dataset_files("wmt14"); });
  EXPECT_EQ(msg, "unknown dataset 'wmt14' (known: fra-eng, multi30k)");
}

// End to end with the registry's own checksums: the shared copies of the upstream files, served locally.
TEST(DownloadDatasets, Multi30kRegistryChecksumsMatchSharedCopies) {
  std::string src = tfm::test::data_dir() + "/multi30k";
  if (!fs::exists(src + "/train.en.gz")) GTEST_SKIP() << "no shared Multi30k copy at " << src;
  TestServer server;
  for (const auto& f : dataset_files("multi30k")) server.set("/m/" + f.filename, {200, read_all(src + "/" + f.filename)});
  TempDir d;
  download_dataset(find_dataset("multi30k"), d.path, quiet(server.url() + "/m"));
  EXPECT_EQ(listing(d.path).size(), 9u);
  EXPECT_EQ(read_all(d.path + "/val.de.gz"), read_all(src + "/val.de.gz"));
  download_dataset(find_dataset("multi30k"), d.path, quiet(server.url() + "/m"));  // all already present
  EXPECT_EQ(server.hits("/m/train.en.gz"), 1);
}

TEST(DownloadDatasets, DownloadsZipAndExtractsMember) {
  TestServer server;
  server.set("/fra-eng.zip", {200, zip_bytes()});
  Dataset ds{"fra-eng-test", "", {{"https://d2l.invalid/fra-eng.zip", "fra-eng.zip", kZipSha256, ""}},
             {{"fra-eng.zip", "fra-eng/fra.txt", "fra.txt"}}};
  TempDir d;
  download_dataset(ds, d.path, quiet(server.url()));
  EXPECT_EQ(read_all(d.path + "/fra.txt"), kFraTxt);
  EXPECT_EQ(listing(d.path), (std::vector<std::string>{"fra-eng.zip", "fra.txt"}));
  fs::remove(d.path + "/fra.txt");  // archive present, output missing: extracted again without a download
  download_dataset(ds, d.path, quiet(server.url()));
  EXPECT_EQ(read_all(d.path + "/fra.txt"), kFraTxt);
  EXPECT_EQ(server.hits("/fra-eng.zip"), 1);
}

// ---------------------------------------------------------------------------------------------------------------
// CLI

namespace {
// Runs the tfm binary with `args`; returns exit status, fills `out` with stdout + stderr.
// `env`: "VAR=value ..." set for the child only.
int run_tfm(const std::string& args, std::string& out, const std::string& env = "") {
  std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(TFM_BINARY) + " " + args + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + cmd);
  char buf[4096];
  size_t n;
  out.clear();
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
}  // namespace

TEST(DownloadCli, ListUnknownAndOfflineErrors) {
  std::string out;
  ASSERT_EQ(run_tfm("data list", out), 0) << out;
  EXPECT_NE(out.find("multi30k: "), std::string::npos) << out;
  EXPECT_NE(out.find("fra-eng: "), std::string::npos) << out;

  TempDir d;
  EXPECT_EQ(run_tfm("data download wmt14 --to " + d.path, out), 1);
  EXPECT_EQ(out, "tfm: error: unknown dataset 'wmt14' (known: fra-eng, multi30k)\n");

  int port;
  {
    TestServer closed;
    port = std::stoi(closed.url().substr(closed.url().rfind(':') + 1));
  }
  std::string base = "http://127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(run_tfm("data download multi30k --to " + d.path + "/m --base-url " + base, out), 1);
  // stderr: the progress line naming the first file, then one error line.
  EXPECT_NE(out.find("tfm: error: could not connect to " + base + "/train.en.gz"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(d.path + "/m/train.en.gz.part"));

  // The base URL also comes from TFM_DOWNLOAD_BASE_URL.
  TestServer server;
  server.set("/fra-eng.zip", {404, "no"});
  EXPECT_EQ(run_tfm("data download fra-eng --to " + d.path + "/f", out, "TFM_DOWNLOAD_BASE_URL=" + server.url()), 1);
  EXPECT_NE(out.find("tfm: error: download of " + server.url() + "/fra-eng.zip failed: HTTP status 404"),
            std::string::npos)
      << out;
  EXPECT_EQ(server.hits("/fra-eng.zip"), 1);
}
