// Whether the client of a request in flight is still connected, so that the batching queue can skip the inference
// of a request nobody waits for any more.
//
// cpp-httplib 0.11 (Debian bookworm's libcpp-httplib-dev) gives a handler neither the socket nor a
// connection-closed check (upstream added Request::is_connection_closed only in later versions), but it gives the
// connection's addresses. The socket is found once among this process's descriptors (/proc/self/fd) by its local
// port and remote address and port; the handler is still running, so httplib has not closed it. A client counts
// as gone once the peer has shut its side down or the socket has failed (poll: POLLRDHUP, POLLHUP, POLLERR).
#pragma once
#include <functional>
#include <string>

namespace tfm::serve {

// A check for the TCP connection from remote_addr:remote_port to local_port. The returned function is not
// thread-safe (call it from one thread at a time); it answers false when the socket cannot be found.
std::function<bool()> client_gone_check(const std::string& remote_addr, int remote_port, int local_port);

}  // namespace tfm::serve
