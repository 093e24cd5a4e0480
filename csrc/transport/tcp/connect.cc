#include "transport/tcp/connect.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ringzip::tcp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHello = 0x31485a52;  // "RZH1"

struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t member;
  uint32_t size;
};

// Closes what it holds unless released: a failed set-up leaks no socket.
class Fds {
 public:
  ~Fds() {
    for (int fd : fds_) ::close(fd);
  }
  int add(int fd) {
    fds_.push_back(fd);
    return fd;
  }
  void release() { fds_.clear(); }

 private:
  std::vector<int> fds_;
};

[[noreturn]] void fail(int rank, const std::string& what) {
  throw std::runtime_error("ringzip: tcp transport, rank " + std::to_string(rank) + ": " + what);
}

long read_long(const char* path, int field) {
  std::ifstream f(path);
  long v = 0;
  for (int i = 0; i <= field && (f >> v); ++i) {
  }
  return f ? v : 0;
}

// A socket asks for the largest buffer the kernel grants one that asks (net.core.*mem_max,
// doubled by the kernel) where that is more than what autotuning would reach
// (net.ipv4.tcp_*mem's maximum): on a long link the send buffer bounds the bytes in flight.
void size_buffers(int fd) {
  const long wmax = read_long("/proc/sys/net/core/wmem_max", 0);
  const long rmax = read_long("/proc/sys/net/core/rmem_max", 0);
  if (2 * wmax > read_long("/proc/sys/net/ipv4/tcp_wmem", 2)) {
    int v = static_cast<int>(wmax);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
  }
  if (2 * rmax > read_long("/proc/sys/net/ipv4/tcp_rmem", 2)) {
    int v = static_cast<int>(rmax);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
  }
}

addrinfo* resolve(int rank, const std::string& host, const std::string& port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res) fail(rank, "cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return res;
}

// Listens on `address` (port chosen by the kernel); returns the socket and "host port".
std::pair<int, std::string> listen_on(int rank, const std::string& address, Fds& fds) {
  addrinfo* res = resolve(rank, address, "0", true);
  const int fd = fds.add(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const std::string why = std::strerror(errno);
    ::freeaddrinfo(res);
    fail(rank, "cannot listen on '" + address + "' (" + why +
                   "): set GLOO_SOCKET_IFNAME to the interface its peers reach it on");
  }
  ::freeaddrinfo(res);
  size_buffers(fd);  // accepted sockets inherit it, before their window scale is agreed
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  char host[NI_MAXHOST], port[NI_MAXSERV];
  ::getnameinfo(reinterpret_cast<sockaddr*>(&sa), len, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
  return {fd, std::string(host) + " " + port};
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<long long>(left, 0));
}

// Moves all of buf through fd (blocking socket) before the deadline, or says why not.
std::string exchange(int fd, void* buf, size_t len, bool send, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    pollfd pfd{fd, static_cast<short>(send ? POLLOUT : POLLIN), 0};
    const int r = ::poll(&pfd, 1, ms_left(deadline));
    if (r == 0) return "timed out";
    if (r < 0 && errno == EINTR) continue;
    const ssize_t n = send ? ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, p, len, MSG_DONTWAIT);
    if (n == 0) return "connection closed";
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return std::strerror(errno);
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return "";
}

void tune(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

std::vector<std::vector<int>> connect_all(int rank, int size, int connections, const std::string& address,
                                          const Meeting& meeting, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Fds fds;
  std::vector<std::vector<int>> sockets(size, std::vector<int>(connections, -1));
  auto [listener, me] = listen_on(rank, address, fds);
  meeting.publish(me);

  // Every connection to a lower rank at once (a long link's round trip is paid once): the
  // listener exists before its address is published, so the kernel completes them unaccepted.
  struct Pending {
    int fd, peer, member;
    std::string where;
  };
  std::vector<Pending> pending;
  for (int p = 0; p < rank; ++p) {
    const std::string where = meeting.lookup(p);
    std::istringstream in(where);
    std::string host, port;
    in >> host >> port;
    addrinfo* res = resolve(rank, host, port, false);
    for (int m = 0; m < connections; ++m) {
      const int fd = fds.add(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      size_buffers(fd);
      if (fd < 0 || (::connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS)) {
        const std::string why = std::strerror(errno);
        ::freeaddrinfo(res);
        fail(rank, "cannot connect to rank " + std::to_string(p) + " at " + where + ": " + why);
      }
      pending.push_back({fd, p, m, where});
    }
    ::freeaddrinfo(res);
  }
  for (auto& c : pending) {
    pollfd pfd{c.fd, POLLOUT, 0};
    int r;
    while ((r = ::poll(&pfd, 1, ms_left(deadline))) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (r == 0 || err != 0)
      fail(rank, "cannot connect to rank " + std::to_string(c.peer) + " at " + c.where + ": " +
                     (r == 0 ? "timed out after " + std::to_string(timeout.count()) + " ms" : std::strerror(err)));
    Hello hello{kHello, static_cast<uint32_t>(rank), static_cast<uint32_t>(c.member), static_cast<uint32_t>(size)};
    const std::string why = exchange(c.fd, &hello, sizeof hello, true, deadline);
    if (!why.empty()) fail(rank, "greeting rank " + std::to_string(c.peer) + " failed: " + why);
    tune(c.fd);
    sockets[c.peer][c.member] = c.fd;
  }

  // The higher ranks' connections, each greeted with who it is.
  for (int expected = (size - 1 - rank) * connections; expected > 0; --expected) {
    pollfd pfd{listener, POLLIN, 0};
    int r;
    while ((r = ::poll(&pfd, 1, ms_left(deadline))) < 0 && errno == EINTR) {
    }
    if (r == 0) {
      std::string missing;
      for (int p = rank + 1; p < size; ++p)
        for (int m = 0; m < connections; ++m)
          if (sockets[p][m] < 0) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(p);
            break;
          }
      fail(rank, "rank(s) " + missing + " did not connect within " + std::to_string(timeout.count()) + " ms");
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) fail(rank, std::string("accept failed: ") + std::strerror(errno));
    fds.add(fd);
    Hello hello{};
    const std::string why = exchange(fd, &hello, sizeof hello, false, deadline);
    if (!why.empty()) fail(rank, "a peer's greeting failed: " + why);
    if (hello.magic != kHello || static_cast<int>(hello.size) != size || static_cast<int>(hello.rank) <= rank ||
        static_cast<int>(hello.rank) >= size || static_cast<int>(hello.member) >= connections ||
        sockets[hello.rank][hello.member] >= 0)
      fail(rank, "a connection that is not a peer's of this group arrived (another program, or a group "
                 "of another size on the same store)");
    tune(fd);
    sockets[hello.rank][hello.member] = fd;
  }
  // The sockets stay non-blocking (the engine's mode); only the listener goes.
  fds.release();
  ::close(listener);
  return sockets;
}

}  // namespace ringzip::tcp
