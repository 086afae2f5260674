// `tfm serve` under many keep-alive clients, as fetch / undici, the openai client and axios connect: each keeps
// its connection open between requests. Idle connections must not hold the server's workers, and past
// --max-concurrent-requests a request is answered 429 at once, not left waiting.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "serve_client.h"

namespace tfm {
namespace {

using test::http;
using test::ServeProcess;
using Clock = std::chrono::steady_clock;

// A raw HTTP/1.1 keep-alive client connection.
struct Conn {
  int fd = -1;
  std::string in;  // bytes received and not yet consumed
  explicit Conn(int port) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (sockaddr*)&a, sizeof a) != 0) {
      close(fd);
      fd = -1;
    }
  }
  ~Conn() {
    if (fd >= 0) close(fd);
  }
  bool send_request(const std::string& method, const std::string& path, const std::string& body = "") {
    std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n";
    if (!body.empty())
      r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    r += "\r\n" + body;
    return ::send(fd, r.data(), r.size(), MSG_NOSIGNAL) == (ssize_t)r.size();
  }
  // The status of one whole response when it has arrived (0: not yet); reads what is there without blocking.
  int poll_response() {
    char buf[8192];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) break;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return -1;
      in.append(buf, n);
    }
    const size_t end = in.find("\r\n\r\n");
    if (end == std::string::npos) return 0;
    size_t length = 0;
    const size_t cl = in.find("Content-Length: ");
    if (cl != std::string::npos && cl < end) length = std::stoul(in.substr(cl + 16));
    if (in.size() < end + 4 + length) return 0;
    const int status = std::stoi(in.substr(9, 3));
    in.erase(0, end + 4 + length);
    return status;
  }
};

// Waits for one response on each connection (at most `limit`); the status and when each arrived.
std::vector<std::pair<int, double>> responses(std::vector<std::unique_ptr<Conn>>& conns, Clock::time_point t0,
                                              std::chrono::seconds limit) {
  std::vector<std::pair<int, double>> out(conns.size(), {0, 0.0});
  size_t done = 0;
  while (done < conns.size() && Clock::now() - t0 < limit) {
    for (size_t i = 0; i < conns.size(); ++i) {
      if (out[i].first != 0) continue;
      if (const int st = conns[i]->poll_response(); st != 0) {
        out[i] = {st, std::chrono::duration<double>(Clock::now() - t0).count()};
        ++done;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return out;
}

// 300 keep-alive clients on a server that takes 4 model requests at a time: each connects and makes one request,
// then stays connected and idle. A new client is then answered at once (the idle connections hold no worker),
// and when all 300 send a model request together, the requests over the limit get 429 at once while the others
// are answered.
TEST(ServeLoad, ThreeHundredKeepAliveClientsNeitherStallNorWait) {
  test::ScratchDir tmp;
  const std::string m = test::bert_serve_dir(tmp.path);
  ServeProcess s({"--model", m, "--max-concurrent-requests", "4", "--quiet"});
  ASSERT_GT(s.port(), 0) << s.log();
  ASSERT_TRUE(s.wait_ready()) << s.log();

  constexpr int kClients = 300;
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < kClients; ++i) {
    conns.push_back(std::make_unique<Conn>(s.port()));
    ASSERT_GE(conns.back()->fd, 0) << "connect " << i;
  }
  auto t0 = Clock::now();
  for (auto& c : conns) ASSERT_TRUE(c->send_request("GET", "/health"));
  auto first = responses(conns, t0, std::chrono::seconds(20));
  int ok = 0;
  double slowest = 0;
  for (auto& [st, at] : first) ok += st == 200, slowest = std::max(slowest, at);
  EXPECT_EQ(ok, kClients);
  EXPECT_LT(slowest, 2.0) << "the last of " << kClients << " keep-alive clients waited " << slowest << " s";

  // Every connection is now idle and open. A new client is answered at once.
  t0 = Clock::now();
  test::Reply r = http("POST", s.url("/embed"), R"({"inputs": "the cat sat on the mat"})");
  const double fresh = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_LT(fresh, 1.0) << "a new client behind " << kClients << " idle keep-alive connections waited " << fresh
                        << " s";

  // All of them at once: 4 in flight at most, the rest 429 at once; nothing waits long.
  const std::string body = R"({"inputs": ["the cat sat on the mat", "a dog", "red car", "one two three"]})";
  t0 = Clock::now();
  for (auto& c : conns) ASSERT_TRUE(c->send_request("POST", "/embed", body));
  auto second = responses(conns, t0, std::chrono::seconds(20));
  int answered = 0, refused = 0, other = 0;
  double slowest_refusal = 0;
  slowest = 0;
  for (auto& [st, at] : second) {
    if (st == 200) ++answered;
    else if (st == 429) ++refused, slowest_refusal = std::max(slowest_refusal, at);
    else ++other;
    slowest = std::max(slowest, at);
  }
  EXPECT_EQ(other, 0);
  EXPECT_EQ(answered + refused, kClients);
  EXPECT_GE(answered, 4);
  EXPECT_LT(slowest_refusal, 2.0) << "a 429 took " << slowest_refusal << " s";
  EXPECT_LT(slowest, 5.0) << "the slowest answer took " << slowest << " s";
  conns.clear();
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace tfm
