#include "serve/connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <memory>

namespace tfm::serve {

namespace {

// Address and port of a socket name, as httplib writes them ("127.0.0.1", "::1").
bool name_of(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

// The descriptor of the connection, or -1.
int find_socket(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    std::string addr;
    int port = -1;
    if (getsockname((int)fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !name_of(ss, addr, port) ||
        port != local_port)
      continue;
    len = sizeof ss;
    if (getpeername((int)fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !name_of(ss, addr, port)) continue;
    if (port == remote_port && addr == remote_addr) {
      found = (int)fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

std::function<bool()> client_gone_check(const std::string& remote_addr, int remote_port, int local_port) {
  auto fd = std::make_shared<int>(-2);  // -2: not looked up yet
  return [=] {
    if (*fd == -2) *fd = remote_port > 0 ? find_socket(remote_addr, remote_port, local_port) : -1;
    if (*fd < 0) return false;
    pollfd p{*fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  };
}

}  // namespace tfm::serve
