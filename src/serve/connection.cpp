#include "serve/connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

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

// Whether descriptor fd is the socket from remote_addr:remote_port to local_port.
bool is_connection(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  std::string addr;
  int port = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !name_of(ss, addr, port) || port != local_port)
    return false;
  len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !name_of(ss, addr, port)) return false;
  return port == remote_port && addr == remote_addr;
}

// The descriptor of the connection, or -1. A keep-alive connection sends many requests: the descriptor found for
// its addresses is remembered and, on the next request, checked with three system calls instead of a scan over
// every descriptor of the process (which at 64 clients cost ~200 calls a request). A remembered descriptor that
// was closed and reused for another connection fails the check and is looked up again.
int find_socket(const std::string& remote_addr, int remote_port, int local_port) {
  static std::mutex mu;
  static std::unordered_map<std::string, int> known;  // "addr port local_port" -> descriptor
  const std::string key = remote_addr + " " + std::to_string(remote_port) + " " + std::to_string(local_port);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(key);
    if (it != known.end()) {
      if (is_connection(it->second, remote_addr, remote_port, local_port)) return it->second;
      known.erase(it);
    }
  }
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (is_connection((int)fd, remote_addr, remote_port, local_port)) {
      found = (int)fd;
      break;
    }
  }
  closedir(dir);
  if (found >= 0) {
    std::lock_guard<std::mutex> lock(mu);
    if (known.size() >= 4096) known.clear();  // connections come and go; keep the table small
    known[key] = found;
  }
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
