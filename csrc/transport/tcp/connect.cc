#include "transport/tcp/connect.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "transport/tcp/kept.h"
#include "transport/tcp/rtt.h"
#include "transport/transport.h"

namespace ringzip::tcp {
namespace {

using Clock = std::chrono::steady_clock;

// How long a rank that connects waits for a kept connection's release from its peer (the peer's
// group closes about when this one's did; past this, it connects anew).
constexpr auto kReleaseGrace = std::chrono::seconds(2);
// How often the rank that accepts looks again for kept connections its peers may greet.
constexpr int kRescanMs = 50;
// The most connections a greeting may announce (Options.connections' bound).
constexpr uint32_t kMaxPool = 64;

// A pair's pool when it is chosen for them (connections 0): where the round trip is long and
// the pair's rate known (bytes/s), as many send windows as that rate keeps in flight over the
// round trip, so that the pair's share of the link is not held to one send buffer per round
// trip; one otherwise (without pacing a second connection made the default command no faster
// over 100 ms and 1 MiB calls slower: docs/performance.md).
uint32_t pool_for(uint32_t min_rtt_us, double pair_rate, double window) {
  const double rtt = min_rtt_us * 1e-6;
  if (rtt < Transport::kLongRoundTrip || pair_rate <= 0 || window <= 0) return 1;
  return static_cast<uint32_t>(std::clamp(std::ceil(pair_rate * rtt / window), 1.0, static_cast<double>(kMaxPool)));
}

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
struct BufferLimits {
  long asked, autotuned;  // what a socket asks for (the kernel doubles it), autotuning's maximum
  long ceiling() const { return std::max(2 * asked, autotuned); }
  bool ask() const { return 2 * asked > autotuned; }
};
BufferLimits send_limits() {
  return {read_long("/proc/sys/net/core/wmem_max", 0), read_long("/proc/sys/net/ipv4/tcp_wmem", 2)};
}
BufferLimits receive_limits() {
  return {read_long("/proc/sys/net/core/rmem_max", 0), read_long("/proc/sys/net/ipv4/tcp_rmem", 2)};
}
// TCP's payload in the bytes its buffers account for (Connected::window_bytes).
constexpr double kPayloadShare = 0.7;

double window_bytes() {
  return kPayloadShare * static_cast<double>(std::min(send_limits().ceiling(), receive_limits().ceiling()));
}

void size_buffers(int fd) {
  for (const auto& [limits, option] : {std::pair{send_limits(), SO_SNDBUF}, std::pair{receive_limits(), SO_RCVBUF}}) {
    if (!limits.ask()) continue;
    int v = static_cast<int>(limits.asked);
    ::setsockopt(fd, SOL_SOCKET, option, &v, sizeof v);
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

// A kept connection's release from its peer, waited for until `until`: 1 released, 0 not yet
// (the connection may still serve later), -1 unusable.
int await_release(Kept& k, Clock::time_point until) {
  while (true) {
    if (!k.advance()) return -1;
    if (k.released) break;
    pollfd pfd{k.fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, ms_left(until));
    if (r == 0) return 0;
    if (r < 0 && errno != EINTR) return -1;
  }
  return k.greeted ? 0 : 1;  // greeted toward this end: another group's, which may still take it
}

// Kept connections a set-up holds: back to the process's set when it ends, however it ends.
class Holding {
 public:
  ~Holding() {
    try {
      kept::put(std::move(held));
    } catch (...) {
      for (auto& k : held) ::close(k.fd);
    }
  }
  std::vector<Kept> held;
};

struct Peer {
  std::string host, port;
  uint64_t process = 0, group = 0;
};

Peer parse(int rank, int p, const std::string& where) {
  Peer peer;
  std::istringstream in(where);
  in >> peer.host >> peer.port >> std::hex >> peer.process >> peer.group;
  if (!in) fail(rank, "rank " + std::to_string(p) + " published '" + where + "', not an address of this build's");
  return peer;
}

std::string hex(uint64_t v) {
  std::ostringstream out;
  out << std::hex << v;
  return out.str();
}

// A group's token, unique per process and group: a greeting names the group it is for.
uint64_t new_group_token() {
  static std::atomic<uint64_t> groups{0};
  return process_key() ^ ((++groups) * 0x9E3779B97F4A7C15ull);
}

}  // namespace

Connected connect_all(int rank, int size, int connections, double pair_rate, const std::string& address,
                      const Meeting& meeting, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Fds fds;
  Holding kept_here;
  Connected out{std::vector<std::vector<int>>(size), std::vector<uint64_t>(size, 0)};
  auto& sockets = out.sockets;
  out.processes[rank] = process_key();
  auto [listener, me] = listen_on(rank, address, fds);
  uint64_t group = rank == 0 ? new_group_token() : 0;
  meeting.publish(me + " " + hex(process_key()) + " " + hex(group));

  // To every lower rank: the connections kept from a group before between the two processes
  // first, once the peer's release says its end is free; new ones for the rest, all at once (a
  // long link's round trip is paid once): the listener exists before its address is published,
  // so the kernel completes them unaccepted. With the pool chosen per pair (connections 0), the
  // pair's first connection -- kept, or new and connected -- measures the round trip first.
  struct Pending {
    int fd;
    bool fresh;
  };
  std::vector<std::vector<Pending>> to(rank);
  std::vector<std::vector<Kept>> reusable(rank);
  std::vector<std::string> wheres(rank);
  std::vector<Peer> peers(rank);
  auto open = [&](int p, size_t n) {
    if (to[p].size() >= n) return;
    addrinfo* res = resolve(rank, peers[p].host, peers[p].port, false);
    while (to[p].size() < n) {
      const int fd = fds.add(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      size_buffers(fd);
      if (fd < 0 || (::connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS)) {
        const std::string why = std::strerror(errno);
        ::freeaddrinfo(res);
        fail(rank, "cannot connect to rank " + std::to_string(p) + " at " + wheres[p] + ": " + why);
      }
      to[p].push_back({fd, true});
    }
    ::freeaddrinfo(res);
  };
  auto await_connected = [&] {
    for (int p = 0; p < rank; ++p)
      for (auto& c : to[p]) {
        if (!c.fresh) continue;
        pollfd pfd{c.fd, POLLOUT, 0};
        int r;
        while ((r = ::poll(&pfd, 1, ms_left(deadline))) < 0 && errno == EINTR) {
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (r == 0 || err != 0)
          fail(rank, "cannot connect to rank " + std::to_string(p) + " at " + wheres[p] + ": " +
                         (r == 0 ? "timed out after " + std::to_string(timeout.count()) + " ms" : std::strerror(err)));
        c.fresh = false;
      }
  };
  const size_t most = connections > 0 ? static_cast<size_t>(connections) : kMaxPool;
  out.window_bytes = window_bytes();
  for (int p = 0; p < rank; ++p) {
    wheres[p] = meeting.lookup(p);
    peers[p] = parse(rank, p, wheres[p]);
    out.processes[p] = peers[p].process;
    if (p == 0) group = peers[p].group;
    const auto grace = std::min(deadline, Clock::now() + kReleaseGrace);
    for (Kept& k : kept::take_to(peers[p].process, most)) {
      const int ready = await_release(k, grace);
      if (ready > 0) {
        reusable[p].push_back(k);
      } else if (ready == 0) {
        kept_here.held.push_back(k);
      } else {
        ::close(k.fd);
      }
    }
    open(p, connections > 0 ? connections - reusable[p].size() : (reusable[p].empty() ? 1 : 0));
  }
  await_connected();
  std::vector<uint32_t> pool(rank);
  for (int p = 0; p < rank; ++p) {
    const int first = reusable[p].empty() ? to[p][0].fd : reusable[p][0].fd;
    pool[p] = connections > 0 ? connections : pool_for(min_rtt_us(first), pair_rate, out.window_bytes);
    for (Kept& k : reusable[p]) {
      if (to[p].size() < pool[p]) {
        to[p].push_back({fds.add(k.fd), false});
      } else {
        kept_here.held.push_back(k);  // more than the pair needs now: left for a later group
      }
    }
    open(p, pool[p]);
  }
  await_connected();
  for (int p = 0; p < rank; ++p) {
    sockets[p].assign(pool[p], -1);
    for (size_t m = 0; m < pool[p]; ++m) {
      const int fd = to[p][m].fd;
      Hello hello{kHello, static_cast<uint32_t>(rank), static_cast<uint32_t>(m), static_cast<uint32_t>(size),
                  process_key(), group, pool[p]};
      const std::string why = exchange(fd, &hello, sizeof hello, true, deadline);
      if (!why.empty()) fail(rank, "greeting rank " + std::to_string(p) + " failed: " + why);
      tune(fd);
      sockets[p][m] = fd;
    }
  }

  // The higher ranks' connections, new (through the listener) or kept (their greeting arrives
  // on a socket of the process's kept set), each greeted with who it is.
  // Each peer's greeting says how many connections it opens (its pool); until its first
  // arrives, at least one is awaited.
  auto place = [&](const Hello& hello, int fd) {
    const int p = static_cast<int>(hello.rank);
    if (hello.magic != kHello || static_cast<int>(hello.size) != size || hello.group != group || p <= rank ||
        p >= size || hello.pool < 1 || hello.pool > kMaxPool || (connections > 0 && hello.pool != static_cast<uint32_t>(connections)) ||
        (!sockets[p].empty() && sockets[p].size() != hello.pool) || hello.member >= hello.pool ||
        (!sockets[p].empty() && sockets[p][hello.member] >= 0))
      fail(rank, "a connection that is not a peer's of this group arrived (another program, or another "
                 "group's rank on this address)");
    tune(fd);
    if (sockets[p].empty()) sockets[p].assign(hello.pool, -1);
    sockets[p][hello.member] = fd;
    out.processes[p] = hello.process;
  };
  auto missing = [&] {
    std::string ranks;
    for (int p = rank + 1; p < size; ++p)
      if (sockets[p].empty() || std::count(sockets[p].begin(), sockets[p].end(), -1) > 0)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(p);
    return ranks;
  };
  while (!missing().empty()) {
    for (Kept& k : kept::take_for(group)) kept_here.held.push_back(k);
    std::vector<pollfd> pfds{{listener, POLLIN, 0}};
    for (const Kept& k : kept_here.held) pfds.push_back({k.fd, static_cast<short>(k.greeted ? 0 : POLLIN), 0});
    int r;
    while ((r = ::poll(pfds.data(), pfds.size(), std::min(ms_left(deadline), kRescanMs))) < 0 && errno == EINTR) {
    }
    if (r == 0 && ms_left(deadline) == 0)
      fail(rank, "rank(s) " + missing() + " did not connect within " + std::to_string(timeout.count()) + " ms");
    // Kept sockets: what arrived (a release, a greeting); a greeting for this group takes it.
    auto& held = kept_here.held;
    for (size_t i = held.size(); i-- > 0;) {
      Kept& k = held[i];
      const bool usable = k.greeted || !(pfds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) || k.advance();
      if (!usable) ::close(k.fd);
      const bool ours = usable && k.greeted && k.hello.group == group;
      if (ours) place(k.hello, fds.add(k.fd));
      if (!usable || ours) held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (!(pfds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) fail(rank, std::string("accept failed: ") + std::strerror(errno));
    fds.add(fd);
    Hello hello{};
    const std::string why = exchange(fd, &hello, sizeof hello, false, deadline);
    if (!why.empty()) fail(rank, "a peer's greeting failed: " + why);
    place(hello, fd);
  }
  // The sockets stay non-blocking (the engine's mode); only the listener goes.
  fds.release();
  ::close(listener);
  return out;
}

}  // namespace ringzip::tcp
