// serve/connection.h: the client-gone check on real loopback sockets, including the remembered descriptor of a
// keep-alive connection and a descriptor number that a later connection reuses.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/connection.h"

namespace {

struct Listener {
  int fd = -1, port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd, 8), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(fd); }
};

// A client socket connected to `l` and the server's accepted end; *client_port gets the client's port.
std::pair<int, int> connect_pair(const Listener& l, int* client_port) {
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)l.port);
  EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const int s = accept(l.fd, nullptr, nullptr);
  socklen_t len = sizeof a;
  getsockname(c, reinterpret_cast<sockaddr*>(&a), &len);
  *client_port = ntohs(a.sin_port);
  return {c, s};
}

TEST(ServeConnection, AClientThatClosesIsGoneOnEveryRequestOfItsConnection) {
  Listener l;
  int cport = 0;
  auto [c, s] = connect_pair(l, &cport);
  // Two requests on one keep-alive connection: each gets its own check; the second finds the remembered socket.
  auto first = tfm::serve::client_gone_check("127.0.0.1", cport, l.port);
  auto second = tfm::serve::client_gone_check("127.0.0.1", cport, l.port);
  EXPECT_FALSE(first());
  EXPECT_FALSE(second());
  close(c);
  auto third = tfm::serve::client_gone_check("127.0.0.1", cport, l.port);
  EXPECT_TRUE(first());
  EXPECT_TRUE(third());
  close(s);
}

TEST(ServeConnection, ARememberedDescriptorReusedByAnotherConnectionIsNotTrusted) {
  Listener l;
  int cport1 = 0, cport2 = 0;
  auto [c1, s1] = connect_pair(l, &cport1);
  EXPECT_FALSE(tfm::serve::client_gone_check("127.0.0.1", cport1, l.port)());  // remembers s1's descriptor
  close(c1);
  close(s1);
  // The next accepted socket takes the lowest free descriptor, which is s1's number.
  auto [c2, s2] = connect_pair(l, &cport2);
  ASSERT_NE(cport1, cport2);
  // The old connection's check must not poll the new connection: it finds no socket (false, as documented).
  EXPECT_FALSE(tfm::serve::client_gone_check("127.0.0.1", cport1, l.port)());
  // The new connection is found and reported gone once its client closes.
  auto check2 = tfm::serve::client_gone_check("127.0.0.1", cport2, l.port);
  EXPECT_FALSE(check2());
  close(c2);
  EXPECT_TRUE(check2());
  close(s2);
}

TEST(ServeConnection, AnUnknownConnectionIsNotGone) {
  Listener l;
  EXPECT_FALSE(tfm::serve::client_gone_check("127.0.0.1", 1, l.port)());
  EXPECT_FALSE(tfm::serve::client_gone_check("127.0.0.1", 0, l.port)());
}

}  // namespace
