#include "transport/tcp/kept.h"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>

namespace ringzip::tcp {
namespace {

// Enough for every group a process builds in a row to find its predecessor's connections;
// beyond it the oldest are closed.
constexpr size_t kMaxKept = 512;

std::mutex mu;
std::deque<Kept> kept_set;  // oldest first

uint64_t fresh_key() {
  uint64_t k = 0;
#ifdef SYS_getrandom
  if (::syscall(SYS_getrandom, &k, sizeof k, 0) == static_cast<long>(sizeof k) && k != 0) return k;
#endif
  const auto t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return (t * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(::getpid()) << 32) ^ 1;
}

// Closes and forgets the connections whose peer closed or broke them (a process that ended
// leaves its kept connections to no one). Reads only what arrived; under mu.
void sweep() {
  for (auto it = kept_set.begin(); it != kept_set.end();) {
    if (it->advance()) {
      ++it;
    } else {
      ::close(it->fd);
      it = kept_set.erase(it);
    }
  }
}

// Up to `n` of the connections `want` takes, oldest first, out of the set (after a sweep).
template <class Want>
std::vector<Kept> take_if(Want want, size_t n) {
  std::lock_guard<std::mutex> lk(mu);
  sweep();
  std::vector<Kept> out;
  for (auto it = kept_set.begin(); it != kept_set.end() && out.size() < n;) {
    if (want(*it)) {
      out.push_back(*it);
      it = kept_set.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

}  // namespace

uint64_t process_key() {
  static const uint64_t key = fresh_key();
  return key;
}

bool Kept::advance() {
  while (!greeted) {
    const size_t want = released ? sizeof(Hello) : sizeof(Frame);
    const ssize_t n = ::recv(fd, buf + got, want - got, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    got += static_cast<size_t>(n);
    if (got < want) continue;
    got = 0;
    if (!released) {
      Frame f;
      std::memcpy(&f, buf, sizeof f);
      if (f.kind != kRelease || f.bytes != 0) return false;
      released = true;
    } else {
      std::memcpy(&hello, buf, sizeof hello);
      if (hello.magic != kHello || hello.process != peer) return false;
      greeted = true;
    }
  }
  return true;
}

namespace kept {

void put(std::vector<Kept> connections) {
  std::vector<int> evicted;
  {
    std::lock_guard<std::mutex> lk(mu);
    sweep();
    for (auto& k : connections) kept_set.push_back(k);
    while (kept_set.size() > kMaxKept) {
      evicted.push_back(kept_set.front().fd);
      kept_set.pop_front();
    }
  }
  for (int fd : evicted) ::close(fd);
}

std::vector<Kept> take_to(uint64_t peer, size_t n) {
  return take_if([peer](const Kept& k) { return k.peer == peer && !k.greeted; }, n);
}

std::vector<Kept> take_for(uint64_t group) {
  return take_if([group](const Kept& k) { return !k.greeted || k.hello.group == group; }, SIZE_MAX);
}

size_t count() {
  std::lock_guard<std::mutex> lk(mu);
  return kept_set.size();
}

}  // namespace kept
}  // namespace ringzip::tcp
