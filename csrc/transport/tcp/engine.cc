#include "transport/tcp/engine.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "transport/stripes.h"
#include "transport/tcp/kept.h"
#include "transport/tcp/rtt.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

namespace ringzip::tcp {
namespace {

// Bytes one pass reads from a connection before it turns to the others (level-triggered epoll
// comes back for the rest), so one busy socket cannot starve the others.
constexpr size_t kReadSlice = 4 << 20;
// A header announcing more than this is not ours (a stray or corrupted stream).
constexpr uint64_t kMaxMessage = uint64_t{1} << 42;
// Warm-up bytes (Engine::warm) go out in frames of at most this, all read from one zero buffer.
constexpr size_t kWarmFrame = 1 << 20;
const std::vector<char>& zeros() {
  static const std::vector<char> z(kWarmFrame);
  return z;
}

bool again(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

// A socket call on the connection to `peer` failed with errno.
std::string io_error(int peer) {
  return "ringzip: the connection to rank " + std::to_string(peer) + " failed: " + std::strerror(errno);
}

std::string size_mismatch(int peer, uint64_t sent, uint32_t tag, size_t taken) {
  char t[16];
  std::snprintf(t, sizeof t, "0x%08x", tag);
  return "ringzip: rank " + std::to_string(peer) + " sends " + std::to_string(sent) + " bytes under tag " + t +
         " but this receive takes " + std::to_string(taken) + " bytes (the ranks' calls differ)";
}

}  // namespace

struct Engine::Part {
  std::shared_ptr<Op> op;
  char* data;
  size_t len;
  uint64_t seq = 0;       // sends: the message's number on its connection
  uint32_t kind = kData;  // sends: kData, or kWarm (Engine::warm)
};

// A message that arrived before its receive: buffered whole; a receive posted while it still
// streams in takes it when it is complete.
struct Engine::Unexpected {
  uint64_t order;  // arrival order among all peers (receives from any source take the oldest)
  std::vector<char> buf;
  bool complete = false;
  std::shared_ptr<Part> taker;
};

struct Engine::Conn {
  int fd;
  int peer, member;
  std::string closed;  // why nothing more moves on it; empty while open
  bool released = false;  // the peer's release frame came: the stream is clean, the socket keepable
  bool writing = false;  // EPOLLOUT asked for
  // Sending: messages in order, the front one partly written.
  std::deque<std::shared_ptr<Part>> out;
  size_t out_done = 0;  // bytes of the front message's frame (header and data) written
  uint64_t next_seq = 1;
  // Receiving: a header, then its message's data into a posted receive or an Unexpected.
  uint64_t in_seq = 1;  // the number the next message must carry
  Frame in{};
  size_t in_got = 0;  // header bytes, then data bytes
  bool in_body = false;
  std::shared_ptr<Part> in_part;
  std::shared_ptr<Unexpected> in_unexp;
  std::map<uint32_t, std::deque<std::shared_ptr<Part>>> posted;
  std::map<uint32_t, std::deque<std::shared_ptr<Unexpected>>> unexpected;
};

Engine::Engine(int rank, int size, std::vector<std::vector<int>> sockets, std::vector<uint64_t> processes)
    : rank_(rank), size_(size), processes_(std::move(processes)) {
  conns_.resize(size);
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  event_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_ < 0 || event_ < 0) {
    const std::string why = std::strerror(errno);
    if (epoll_ >= 0) ::close(epoll_);
    if (event_ >= 0) ::close(event_);
    for (auto& row : sockets)
      for (int fd : row) ::close(fd);
    throw std::runtime_error("ringzip: the tcp transport cannot create its event loop: " + why);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, event_, &ev);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    for (size_t m = 0; m < sockets[p].size(); ++m) {
      auto c = std::make_unique<Conn>();
      c->fd = sockets[p][m];
      c->peer = p;
      c->member = static_cast<int>(m);
      ev.events = EPOLLIN;
      ev.data.ptr = c.get();
      ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->fd, &ev);
      conns_[p].push_back(std::move(c));
    }
  }
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() { close(); }

void Engine::wake() noexcept {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(event_, &one, sizeof one);
}

void Engine::check_open() const {
  if (closed_) throw std::runtime_error("ringzip: the tcp transport was closed (process group shut down)");
  if (!shut_.empty()) throw std::runtime_error(shut_);
}

std::string Engine::describe(const Op& op) const {
  const std::string n = std::to_string(op.bytes) + " bytes";
  const std::string who = op.peer < 0 ? "any rank" : "rank " + std::to_string(op.peer);
  return (op.send ? "send of " + n + " to " : "receive of " + n + " from ") + who + " (tag " +
         std::to_string(op.tag) + ", tcp)";
}

std::shared_ptr<Op> Engine::post_send(const void* data, size_t bytes, int peer, uint32_t tag) {
  std::lock_guard<std::mutex> lk(mu_);
  check_open();
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw std::invalid_argument("ringzip: tcp transport: no connection to rank " + std::to_string(peer));
  const size_t stripes = stripe_count(bytes, tag, conns_[peer].size());
  auto op = std::make_shared<Op>(Op{true, peer, tag, bytes, static_cast<int>(stripes)});
  const char* base = static_cast<const char*>(data);
  for (size_t i = 0; i < stripes && !op->finished(); ++i) {
    Conn& c = *conns_[peer][i];
    if (!c.closed.empty()) {
      fail(*op, c.closed);
      break;
    }
    const Stripe s = stripe_of(bytes, stripes, i);
    c.out.push_back(std::make_shared<Part>(Part{op, const_cast<char*>(base) + s.begin, s.length, c.next_seq++}));
    if (c.out.size() == 1) write_some(c);
  }
  return op;
}

std::shared_ptr<Op> Engine::post_recv(void* data, size_t bytes, int peer, uint32_t tag) {
  std::lock_guard<std::mutex> lk(mu_);
  check_open();
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw std::invalid_argument("ringzip: tcp transport: no connection to rank " + std::to_string(peer));
  const size_t stripes = stripe_count(bytes, tag, conns_[peer].size());
  auto op = std::make_shared<Op>(Op{false, peer, tag, bytes, static_cast<int>(stripes)});
  for (size_t i = 0; i < stripes && !op->finished(); ++i) {
    Conn& c = *conns_[peer][i];
    const Stripe s = stripe_of(bytes, stripes, i);
    auto part = std::make_shared<Part>(Part{op, static_cast<char*>(data) + s.begin, s.length});
    auto it = c.unexpected.find(tag);
    if (it != c.unexpected.end() && !it->second.empty())
      take(c, it->second.front(), part);  // what arrived before the peer closed is still delivered
    else if (!c.closed.empty())
      fail(*op, c.closed);
    else
      c.posted[tag].push_back(part);
  }
  return op;
}

std::shared_ptr<Op> Engine::post_recv_any(void* data, size_t bytes, uint32_t tag) {
  std::lock_guard<std::mutex> lk(mu_);
  check_open();
  auto op = std::make_shared<Op>(Op{false, -1, tag, bytes, 1});
  auto part = std::make_shared<Part>(Part{op, static_cast<char*>(data), bytes});
  Conn* oldest = nullptr;
  bool open = false;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Conn& c = *conns_[p][0];
    open |= c.closed.empty();
    auto it = c.unexpected.find(tag);
    if (it != c.unexpected.end() && !it->second.empty() &&
        (!oldest || it->second.front()->order < oldest->unexpected[tag].front()->order))
      oldest = &c;
  }
  if (oldest) {
    op->peer = oldest->peer;
    take(*oldest, oldest->unexpected[tag].front(), part);
  } else if (!open) {
    fail(*op, "ringzip: every peer closed its connection");
  } else {
    any_[tag].push_back(part);
  }
  return op;
}

void Engine::wait(const Op& op, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!op.finished()) {
    if (done_cv_.wait_until(lk, deadline) == std::cv_status::timeout && !op.finished())
      throw std::runtime_error("ringzip: timed out after " + std::to_string(timeout.count()) +
                               " ms waiting for its " + describe(op));
  }
  if (op.failed) throw std::runtime_error(op.error + " [" + describe(op) + "]");
}

void Engine::drop(const Op& op) noexcept {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (op.finished()) return;
  }
  abort("a request was dropped before it finished: its buffer may be gone");
}

void Engine::abort(const std::string& why) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  shut("ringzip: the tcp transport was aborted (" + why + ")");
}

void Engine::pace(double bytes_per_s) {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& row : conns_)
    for (const auto& c : row) {
      // ~0: the kernel's "unpaced"; a kept connection may carry an earlier group's rate
      unsigned long rate = ~0UL;
      if (bytes_per_s > 0) rate = static_cast<unsigned long>(std::max(1.0, bytes_per_s / row.size()));
      if (c->closed.empty()) ::setsockopt(c->fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate);
    }
}

double Engine::round_trip() const {
  std::lock_guard<std::mutex> lk(mu_);
  uint32_t longest = 0;
  for (const auto& row : conns_) {
    uint32_t least = 0;  // the peer's: the least over its pool
    for (const auto& c : row) {
      const uint32_t rtt = c->closed.empty() ? min_rtt_us(c->fd) : 0;
      if (rtt > 0 && (least == 0 || rtt < least)) least = rtt;
    }
    longest = std::max(longest, least);
  }
  return longest * 1e-6;
}

int Engine::warm(double pair_rate, double window) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!(pair_rate > 0) || !(window > 0) || !shut_.empty() || closed_) return 0;
  int warmed = 0;
  for (const auto& row : conns_)
    for (const auto& c : row) {
      const double rtt = c->closed.empty() ? min_rtt_us(c->fd) * 1e-6 : 0;
      // A rate given far above the link's must not send gigabytes: no more than a window is in flight.
      const auto bytes = static_cast<size_t>(std::min(pair_rate * rtt / static_cast<double>(row.size()), window));
      if (rtt < Transport::kLongRoundTrip || window_now(c->fd) >= bytes) continue;
      const bool idle = c->out.empty();
      auto op = std::make_shared<Op>(Op{true, c->peer, 0, bytes, 0});
      for (size_t done = 0; done < bytes; done += kWarmFrame) {
        ++op->pending;
        c->out.push_back(std::make_shared<Part>(
            Part{op, const_cast<char*>(zeros().data()), std::min(kWarmFrame, bytes - done), c->next_seq++, kWarm}));
      }
      if (idle) write_some(*c);
      ++warmed;
    }
  return warmed;
}

void Engine::close() noexcept {
  std::vector<Kept> kept;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return;
    closed_ = true;
    if (shut_.empty())
      for (auto& row : conns_)
        for (auto& c : row)
          if (keep(*c)) {
            kept.push_back(Kept{c->fd, processes_[c->peer], c->released});
            c->fd = -1;
          }
    shut("ringzip: the tcp transport was closed (process group shut down)");
  }
  if (thread_.joinable()) thread_.join();
  for (auto& row : conns_)
    for (auto& c : row)
      if (c->fd >= 0) ::close(c->fd);
  ::close(epoll_);
  ::close(event_);
  try {
    kept::put(std::move(kept));
  } catch (...) {  // no memory: they close with the process
  }
}

// ------------------------------------------------------------------------- under mu_

void Engine::want_writes(Conn& c, bool on) {
  if (c.writing == on || !c.closed.empty()) return;
  epoll_event ev{};
  ev.events = EPOLLIN | (on ? EPOLLOUT : 0);
  ev.data.ptr = &c;
  ::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &ev);
  c.writing = on;
}

void Engine::write_some(Conn& c) {
  while (c.closed.empty() && !c.out.empty()) {
    Part& part = *c.out.front();
    if (part.op->failed) {  // its buffer may be gone: never read it again
      if (c.out_done == 0) {
        c.out.pop_front();
        continue;
      }
      return close_conn(c, "ringzip: a send to rank " + std::to_string(c.peer) + " failed half-way");
    }
    const Frame f{part.kind, part.op->tag, part.len, part.seq};
    iovec iov[2];
    int k = 0;
    if (c.out_done < sizeof f) iov[k++] = {const_cast<char*>(reinterpret_cast<const char*>(&f)) + c.out_done, sizeof f - c.out_done};
    const size_t data_done = c.out_done > sizeof f ? c.out_done - sizeof f : 0;
    iov[k++] = {part.data + data_done, part.len - data_done};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = k;
    const ssize_t n = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (again(errno)) break;
      return close_conn(c, io_error(c.peer));
    }
    c.out_done += static_cast<size_t>(n);
    if (c.out_done == sizeof f + part.len) {
      auto done = std::move(c.out.front());
      c.out.pop_front();
      c.out_done = 0;
      finish(*done);
    }
  }
  want_writes(c, c.closed.empty() && !c.out.empty());
}

void Engine::read_some(Conn& c) {
  size_t budget = kReadSlice;
  while (c.closed.empty() && budget > 0) {
    char* dst;
    size_t want;
    if (!c.in_body) {
      dst = reinterpret_cast<char*>(&c.in) + c.in_got;
      want = sizeof(Frame) - c.in_got;
    } else {
      if (c.in_part && c.in_part->op->failed) c.in_part.reset();  // its buffer may be gone
      want = std::min<size_t>(c.in.bytes - c.in_got, budget);
      if (c.in_part) {
        dst = c.in_part->data + c.in_got;
      } else if (c.in_unexp) {
        dst = c.in_unexp->buf.data() + c.in_got;
      } else {  // a message nobody will take: through the sink
        dst = sink_.data();
        want = std::min(want, sink_.size());
      }
    }
    const ssize_t n = ::recv(c.fd, dst, want, MSG_DONTWAIT);
    if (n == 0)
      return close_conn(c, "ringzip: rank " + std::to_string(c.peer) +
                               " closed its connection (it exited, crashed or aborted the group)");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (again(errno)) return;
      return close_conn(c, io_error(c.peer));
    }
    c.in_got += static_cast<size_t>(n);
    if (!c.in_body) {
      if (c.in_got == sizeof(Frame)) {
        c.in_got = 0;
        on_frame(c);
      }
    } else {
      budget -= static_cast<size_t>(n);
      if (c.in_got == c.in.bytes) end_message(c);
    }
  }
}

void Engine::on_frame(Conn& c) {
  const Frame& f = c.in;
  if (f.kind == kRelease && f.bytes == 0 && f.seq == c.in_seq) return on_release(c);
  if ((f.kind != kData && f.kind != kWarm) || f.bytes == 0 || f.bytes > kMaxMessage || f.seq != c.in_seq++)
    return close_conn(c, "ringzip: the stream from rank " + std::to_string(c.peer) +
                             " holds a frame this build does not know (a corrupted stream, or another program)");
  if (f.kind == kWarm) {  // nobody's: through the sink
    c.in_body = true;
    c.in_got = 0;
    return;
  }
  begin_message(c);
}

void Engine::begin_message(Conn& c) {
  const Frame& f = c.in;
  std::shared_ptr<Part> part;
  auto posted = c.posted.find(f.tag);
  if (posted != c.posted.end() && !posted->second.empty()) {
    part = std::move(posted->second.front());
    posted->second.pop_front();
  } else if (c.member == 0) {
    auto any = any_.find(f.tag);
    if (any != any_.end() && !any->second.empty()) {
      part = std::move(any->second.front());
      any->second.pop_front();
      part->op->peer = c.peer;
    }
  }
  c.in_body = true;
  c.in_got = 0;
  if (part) {  // the message is this receive's, whether it can take it or not
    if (part->len != f.bytes) fail(*part->op, size_mismatch(c.peer, f.bytes, f.tag, part->len));
    if (!part->op->failed) c.in_part = std::move(part);  // else it goes through the sink
    return;
  }
  auto u = std::make_shared<Unexpected>(Unexpected{++arrivals_});
  try {
    u->buf.resize(f.bytes);
  } catch (const std::bad_alloc&) {
    return close_conn(c, "ringzip: no memory to hold a message of " + std::to_string(f.bytes) +
                             " bytes from rank " + std::to_string(c.peer) + " until its receive is posted");
  }
  c.unexpected[f.tag].push_back(u);
  c.in_unexp = std::move(u);
}

void Engine::end_message(Conn& c) {
  c.in_body = false;
  c.in_got = 0;
  if (c.in_part) {
    finish(*c.in_part);
    c.in_part.reset();
    return;
  }
  auto u = std::move(c.in_unexp);
  if (!u) return;  // through the sink
  u->complete = true;
  if (u->taker && !u->taker->op->failed) {
    std::memcpy(u->taker->data, u->buf.data(), u->buf.size());
    finish(*u->taker);
  }
}

// A receive takes the oldest message of its (connection, tag), which may still stream in.
void Engine::take(Conn& c, const std::shared_ptr<Unexpected>& u_ref, const std::shared_ptr<Part>& p) {
  auto u = u_ref;  // the reference points into the deque popped next
  auto& queue = c.unexpected[p->op->tag];
  queue.pop_front();
  if (queue.empty()) c.unexpected.erase(p->op->tag);
  if (u->buf.size() != p->len) return fail(*p->op, size_mismatch(c.peer, u->buf.size(), p->op->tag, p->len));
  if (u->complete) {
    std::memcpy(p->data, u->buf.data(), p->len);
    finish(*p);
  } else {
    u->taker = p;
  }
}

void Engine::finish(Part& p) {
  if (p.op->finished()) return;
  if (--p.op->pending == 0) done_cv_.notify_all();
}

void Engine::fail(Op& op, const std::string& why) {
  if (op.finished()) return;
  op.failed = true;
  op.error = why;
  done_cv_.notify_all();
}

// The peer's group closed cleanly: it sends nothing more in this group and reads nothing more.
// The connection ends for this group like a closed one, but its socket stays open, to be kept
// (unless a message of ours is on its way: the peer would never read it).
void Engine::on_release(Conn& c) {
  const std::string why = "ringzip: rank " + std::to_string(c.peer) + " shut down its process group";
  if (!c.out.empty()) return close_conn(c, why);
  c.released = true;
  end_conn(c, why);
}

// A connection the group may leave to the next one: nothing of this group's in flight on it,
// either way, and our release frame sent whole.
bool Engine::keep(Conn& c) {
  if ((!c.closed.empty() && !c.released) || !c.out.empty() || c.in_body || c.in_got != 0 || !c.unexpected.empty())
    return false;
  for (auto& [tag, q] : c.posted)
    if (!q.empty()) return false;
  const Frame f{kRelease, 0, 0, c.next_seq};
  const ssize_t n = ::send(c.fd, &f, sizeof f, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(sizeof f)) {
    if (c.closed.empty()) end_conn(c, "ringzip: the tcp transport was closed (process group shut down)");
    return true;
  }
  return false;  // the socket did not take it whole (or failed): the stream is not clean
}

// Nothing more moves on the connection: every operation on it that is not complete fails with
// `why`, and so does every later one (a receive still takes a message that arrived whole before).
// Its socket leaves the event loop and is shut, so the peer learns it at once (closed with the
// engine). Receives from any source fail once no peer can send any more.
void Engine::close_conn(Conn& c, const std::string& why) {
  if (!c.closed.empty()) return;
  end_conn(c, why);
  ::shutdown(c.fd, SHUT_RDWR);
}

// close_conn() without touching the socket.
void Engine::end_conn(Conn& c, const std::string& why) {
  if (!c.closed.empty()) return;
  c.closed = why;
  for (auto& p : c.out) fail(*p->op, why);
  for (auto& [tag, q] : c.posted)
    for (auto& p : q) fail(*p->op, why);
  if (c.in_part) fail(*c.in_part->op, why);
  if (c.in_unexp && c.in_unexp->taker) fail(*c.in_unexp->taker->op, why);
  if (c.in_unexp) {  // cut short: no receive may take it
    auto& q = c.unexpected[c.in.tag];
    q.erase(std::remove(q.begin(), q.end(), c.in_unexp), q.end());
  }
  c.out.clear();
  c.posted.clear();
  c.in_part.reset();
  c.in_unexp.reset();
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
  if (c.member != 0) return;
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && conns_[p][0]->closed.empty()) return;
  for (auto& [tag, q] : any_)
    for (auto& p : q) fail(*p->op, "ringzip: every peer closed its connection");
  any_.clear();
}

// The engine becomes unusable: everything pending fails, every socket is shut (peers blocked on
// this rank fail at once), and the thread leaves.
void Engine::shut(const std::string& why) {
  if (!shut_.empty()) return;
  shut_ = why;
  for (auto& row : conns_)
    for (auto& c : row) {
      close_conn(*c, why);
      c->unexpected.clear();
    }
  stop_ = true;
  wake();
  done_cv_.notify_all();
}

void Engine::run() {
  epoll_event events[64];
  while (!stop_) {
    const int n = ::epoll_wait(epoll_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::lock_guard<std::mutex> lk(mu_);
      shut(std::string("ringzip: the tcp transport's event loop failed: ") + std::strerror(errno));
      return;
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (!shut_.empty()) return;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t drained;
        [[maybe_unused]] ssize_t r = ::read(event_, &drained, sizeof drained);
        continue;
      }
      Conn& c = *static_cast<Conn*>(events[i].data.ptr);
      if (!c.closed.empty()) continue;
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_some(c);
      if (c.closed.empty() && (events[i].events & EPOLLOUT)) write_some(c);
    }
  }
}

}  // namespace ringzip::tcp
