#include "transport/shm/engine.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>

namespace ringzip::shm {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiter that sleeps looks at its deadline and at its peers' pids.
constexpr std::chrono::milliseconds kWatchEvery{50};
// How long a wait stays idle before it buffers messages whose receives are not posted (drain).
// Only patterns that would deadlock on Gloo need that (a rank waits for its send before it
// posts the receive its peer waits for), so it may take long; on a loaded host, waits idle
// for milliseconds all the time, and buffering then would only add copies.
constexpr std::chrono::milliseconds kRescueAfter{50};
// How long the progress thread leaves posted work to this rank's own waits (see background()).
constexpr std::chrono::microseconds kGrace{500};

// CPUs this process may run on.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

// Spinning pays only when the peer runs on another core meanwhile: with as many ranks as
// CPUs it saves the futex round trip (tens of microseconds in a VM, where waking an idle vCPU
// is slow); with more ranks than CPUs a spinning waiter takes the core its peer needs, so it
// yields the CPU for a moment and sleeps.
std::chrono::nanoseconds spin_time(int ranks) {
  return ranks <= usable_cpus() ? std::chrono::microseconds(30) : std::chrono::microseconds(2);
}

inline void relax(bool yield) {
  if (yield) {
    sched_yield();
    return;
  }
  for (int i = 0; i < 32; ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

}  // namespace

struct Engine::Unexpected {
  uint32_t tag;
  uint64_t number;  // acknowledged when a receive takes it
  size_t bytes;
  size_t got = 0;
  std::unique_ptr<char[]> buf;
};

struct Engine::Peer {
  int rank;
  pid_t pid;
  uint64_t start_time;
  bool watch_pid;  // false when its pid means nothing here (another pid namespace)
  Mapping map;
  SegmentHeader* hdr;
  Producer out;                                        // this rank -> peer: a ring in the peer's segment
  Consumer in;                                         // peer -> this rank: a ring in our segment
  std::deque<std::shared_ptr<Op>> sends;               // posted, not all bytes written yet, in posting order
  std::deque<std::shared_ptr<Op>> unacked;             // all bytes written, not matched by the peer yet
  uint64_t next_number = 1;                            // of the next message posted to this peer
  std::deque<std::shared_ptr<Op>> recvs;               // posted, no message matched yet, in posting order
  std::deque<std::shared_ptr<Unexpected>> unexpected;  // arrived before their receive
  // The message arriving now, into a receive, into an unexpected buffer, or nowhere (a failed
  // size check): `into_op` / `into_buf` / neither; `arriving` false between messages.
  bool arriving = false;
  std::shared_ptr<Op> into_op;
  std::shared_ptr<Unexpected> into_buf;
  uint64_t total = 0, got = 0, number = 0;  // number: of the message arriving or last arrived
  std::string gone;  // why nothing more is exchanged with this peer; empty while it works
};

Engine::Engine(int rank, int size, size_t ring_bytes, Mapping own, std::vector<Mapping> peers, RankNames names)
    : rank_(rank),
      size_(size),
      names_(std::move(names)),
      ring_bytes_(ring_bytes),
      // Frames of a quarter ring (at most 1 MiB) let the consumer copy one out while the
      // producer copies the next in; never less than a quarter of that, so a nearly full ring
      // does not cut a large message into slivers.
      max_frame_(std::min<size_t>(ring_bytes / 4, size_t(1) << 20)),
      min_frame_(max_frame_ / 4),
      spin_(spin_time(size)),
      own_(std::move(own)),
      me_(own_.header()),
      peers_(size),
      last_watch_(Clock::now()) {
  const Layout layout{size_, ring_bytes_};
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto peer = std::make_unique<Peer>();
    peer->rank = p;
    peer->map = std::move(peers[p]);
    peer->hdr = peer->map.header();
    peer->pid = peer->hdr->pid;
    peer->start_time = peer->hdr->start_time;
    // Its pid names it here only if that process is alive and started when it says.
    peer->watch_pid = !process_gone(peer->pid, 0) && process_start_time(peer->pid) == peer->start_time;
    const int out_slot = Layout::slot(p, rank_), in_slot = Layout::slot(rank_, p);
    peer->out =
        Producer(peer->map.control(out_slot), peer->map.base() + layout.data() + out_slot * ring_bytes_, ring_bytes_);
    peer->in = Consumer(own_.control(in_slot), own_.base() + layout.data() + in_slot * ring_bytes_, ring_bytes_);
    peers_[p] = std::move(peer);
  }
  if (size_ > 1) thread_ = std::thread([this] { background(); });
}

Engine::~Engine() { close(); }

std::string Engine::who(int r) const {
  return std::to_string(r >= 0 && static_cast<size_t>(r) < names_.ranks.size() ? names_.ranks[r] : r);
}

void Engine::raise(const std::string& what) const {
  throw std::runtime_error("ringzip shm transport (rank " + who(rank_) + " of " +
                           std::to_string(names_.group_size > 0 ? names_.group_size : size_) + "): " + what);
}

void Engine::check_open() const {
  if (!shut_.empty()) raise(shut_);
}

Engine::Peer& Engine::peer_of(int peer, const char* what) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    raise(std::string(what) + ": bad peer " + std::to_string(peer) + " (ranks 0.." + std::to_string(size_ - 1) +
          ", not this rank)");
  return *peers_[peer];
}

std::string Engine::describe(const Op& op) const {
  return std::string(op.send ? "send of " : "receive of ") + std::to_string(op.bytes) + " bytes " +
         (op.send ? "to" : "from") + " rank " + who(op.peer) + " (tag " + hex(op.tag) + ", " + std::to_string(op.done) +
         " bytes moved)";
}

// ---- posting ----------------------------------------------------------------------------

std::shared_ptr<Op> Engine::post_send(const void* data, size_t bytes, int peer, uint32_t tag) {
  std::lock_guard<std::mutex> lk(mu_);
  check_open();
  Peer& p = peer_of(peer, "send");
  if (!p.gone.empty()) raise("cannot send to rank " + who(peer) + ": " + p.gone);
  auto op = std::make_shared<Op>(Op{true, peer, tag, static_cast<char*>(const_cast<void*>(data)), bytes});
  op->number = p.next_number++;
  p.sends.push_back(op);
  if (p.sends.size() == 1) push(p);  // small messages leave at once
  wake_thread();
  return op;
}

std::shared_ptr<Op> Engine::post_recv(void* data, size_t bytes, int peer, uint32_t tag) {
  std::lock_guard<std::mutex> lk(mu_);
  check_open();
  Peer& p = peer_of(peer, "receive");
  auto op = std::make_shared<Op>(Op{false, peer, tag, static_cast<char*>(data), bytes});
  for (auto it = p.unexpected.begin(); it != p.unexpected.end(); ++it) {
    if ((*it)->tag == tag) {
      auto u = *it;
      p.unexpected.erase(it);
      take(p, std::move(u), op);
      return op;
    }
  }
  if (!p.gone.empty()) raise("cannot receive from rank " + who(peer) + ": " + p.gone);
  p.recvs.push_back(op);
  wake_thread();
  return op;
}

// A receive meets a message that arrived (in part or whole) before it was posted.
void Engine::take(Peer& p, std::shared_ptr<Unexpected> u, const std::shared_ptr<Op>& op) {
  const bool still_arriving = p.arriving && p.into_buf == u;
  acknowledge(p, u->number);
  if (u->bytes != op->bytes) {
    fail(*op, "rank " + who(p.rank) + " sends " + std::to_string(u->bytes) + " bytes under tag " + hex(op->tag) +
                  " but this receive takes " + std::to_string(op->bytes) + " bytes");
    if (still_arriving) p.into_buf.reset();  // the rest is discarded
    return;
  }
  std::memcpy(op->data, u->buf.get(), u->got);
  op->done = u->got;
  if (!still_arriving) {
    complete(*op);
    return;
  }
  p.into_buf.reset();  // the rest lands in place
  p.into_op = op;
}

// ---- progress ---------------------------------------------------------------------------

void Engine::complete(Op& op) {
  op.state = Op::State::Done;
  completed_ = true;
}

void Engine::fail(Op& op, const std::string& why) {
  if (op.state != Op::State::Pending) return;
  op.state = Op::State::Failed;
  op.error = why;
  completed_ = true;
}

bool Engine::progress(bool rescue) {
  bool moved = false;
  parked_ = false;
  for (auto& pp : peers_) {
    if (!pp || !pp->gone.empty() || interrupt_.load(std::memory_order_relaxed)) continue;
    Peer& p = *pp;
    // Read the peer's state before its ring: what it wrote before closing is drained first.
    const uint32_t state = p.hdr->state.load(std::memory_order_acquire);
    moved |= drain(p, rescue);
    moved |= push(p);
    moved |= check_acks(p);
    if (state && p.gone.empty()) {
      peer_gone(p, "rank " + who(p.rank) +
                       (state & kStateAborted ? " aborted its shm transport" : " closed its shm transport"));
      moved = true;
    }
  }
  if (completed_ && local_sleepers_ > 0) ring_bell(me_);  // another thread may wait for what finished
  completed_ = false;
  return moved;
}

bool Engine::drain(Peer& p, bool rescue) {
  bool moved = false;
  FrameHeader h;
  const char* payload = nullptr;
  bool corrupt = false;
  // At most a ring's worth per pass: a peer that streams without pause must not keep this
  // rank from its other peers.
  size_t budget = ring_bytes_;
  while (budget && !interrupt_.load(std::memory_order_relaxed) && p.in.next(h, payload, corrupt)) {
    if (!corrupt) corrupt = (h.kind == FrameKind::Message) == p.arriving;
    // A Data frame of another message, or of this one but not where it continues: a stale frame
    // of an earlier lap (the consumer was led past the published head), never a frame in order.
    if (!corrupt && h.kind == FrameKind::Data) corrupt = h.number != p.number || h.total != p.got;
    // Messages come in the order they were numbered: a stale Message frame has an older number.
    if (!corrupt && h.kind == FrameKind::Message) corrupt = h.number != p.number + 1;
    if (!corrupt && h.kind == FrameKind::Message && !rescue && p.recvs.empty()) {
      // Nothing from this peer is posted, so nothing can wait behind this message: leave it
      // in the ring until its receive is posted (then it lands in place, no copy, no heap).
      // Only a wait that stays idle buffers it (`rescue`), so that ranks that send to each
      // other before receiving cannot deadlock once a message exceeds the ring.
      parked_ = true;
      break;
    }
    if (!corrupt && h.kind == FrameKind::Message && !begin_message(p, h)) return true;  // p is gone
    if (corrupt || h.payload > p.total - p.got) {
      peer_gone(p, "corrupt frame from rank " + who(p.rank) + " (a bug, or memory overwritten)");
      return true;
    }
    if (p.into_op) {
      std::memcpy(p.into_op->data + p.got, payload, h.payload);
      p.into_op->done += h.payload;
    } else if (p.into_buf) {
      std::memcpy(p.into_buf->buf.get() + p.got, payload, h.payload);
      p.into_buf->got += h.payload;
    }
    p.got += h.payload;
    budget -= std::min(budget, frame_bytes(h.payload));
    if (!p.in.release(h)) {
      peer_gone(p, "the ring from rank " + who(p.rank) + " was overwritten: its tail is not the one this rank stored");
      return true;
    }
    moved = true;
    if (p.got == p.total) {
      if (p.into_op) complete(*p.into_op);
      p.into_op.reset();
      p.into_buf.reset();
      p.arriving = false;
    }
    // A producer that sleeps waits for this space, maybe: wake it now, not after the pass.
    if (p.hdr->sleepers.load(std::memory_order_relaxed) > 0) ring_bell(p.hdr);
  }
  if (moved) ring_bell(p.hdr);
  return moved;
}

// Routes the message that starts with `h`; false when the peer had to be given up.
bool Engine::begin_message(Peer& p, const FrameHeader& h) {
  p.arriving = true;
  p.total = h.total;
  p.got = 0;
  p.number = h.number;
  for (auto it = p.recvs.begin(); it != p.recvs.end(); ++it) {
    if ((*it)->tag != h.tag) continue;
    auto op = *it;
    p.recvs.erase(it);
    acknowledge(p, h.number);
    if (op->bytes == h.total) {
      p.into_op = std::move(op);
    } else {
      fail(*op, "rank " + who(p.rank) + " sends " + std::to_string(h.total) + " bytes under tag " + hex(h.tag) +
                    " but this receive takes " + std::to_string(op->bytes) + " bytes");
    }
    return true;
  }
  auto u = std::make_shared<Unexpected>();
  u->tag = h.tag;
  u->number = h.number;
  u->bytes = h.total;
  u->buf.reset(new (std::nothrow) char[h.total]);
  if (!u->buf) {
    peer_gone(p, "cannot buffer a message of " + std::to_string(h.total) + " bytes under tag " + hex(h.tag) +
                     " that rank " + who(p.rank) + " sent before its receive was posted (out of memory)");
    return false;
  }
  p.into_buf = u;
  p.unexpected.push_back(std::move(u));
  return true;
}

bool Engine::push(Peer& p) {
  bool moved = false, rang = false;
  while (!p.sends.empty() && !interrupt_.load(std::memory_order_relaxed)) {
    Op& op = *p.sends.front();
    if (op.done == 0 && !p.unacked.empty() && op.number - p.unacked.front()->number >= RingControl::kAckSlots)
      break;  // its acknowledgement slot is still taken
    const size_t left = op.bytes - op.done;
    bool corrupt = false;
    const size_t n = p.out.room(std::min(left, max_frame_), std::min(left, min_frame_), corrupt);
    if (corrupt) {
      peer_gone(p, "the ring to rank " + who(p.rank) + " was overwritten: its tail is not one rank " + who(p.rank) +
                       " can have stored");
      return true;
    }
    if (n == 0) break;
    p.out.write(op.done ? FrameKind::Data : FrameKind::Message, op.tag, op.done ? op.done : op.bytes, op.number,
                op.data + op.done, n);
    op.done += n;
    moved = true;
    if (op.done == op.bytes) {  // complete once the peer matched it (check_acks)
      p.unacked.push_back(std::move(p.sends.front()));
      p.sends.pop_front();
    }
    rang = p.hdr->sleepers.load(std::memory_order_relaxed) > 0;  // wake a sleeping consumer now
    if (rang) ring_bell(p.hdr);
  }
  if (moved && !rang) ring_bell(p.hdr);
  return moved;
}

// ---- waiting ----------------------------------------------------------------------------

void Engine::wait(Op& op, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));  // no overflow
  const auto deadline = start + timeout;
  const bool yield = spin_ < std::chrono::microseconds(10);
  std::unique_lock<std::mutex> lk(mu_);
  ++in_wait_;
  struct Leave {  // the last waiter out releases what close() could not
    Engine& e;
    ~Leave() {
      if (--e.in_wait_ > 0) return;
      if (e.closed_) e.release_memory();
      if (e.pending()) e.wake_thread();  // the progress thread takes over what is still pending
    }
  } leave{*this};
  auto spin_until = start + spin_;
  auto idle_since = start;  // the last pass that moved something
  for (;;) {
    if (op.state == Op::State::Done) return;
    if (op.state == Op::State::Failed) raise(op.error + " [" + describe(op) + "]");
    // Pending ops exist only while the transport is open, so the segments are mapped here.
    const uint32_t seq = me_->bell.load(std::memory_order_seq_cst);
    auto now = Clock::now();
    const bool moved = progress(now - idle_since >= kRescueAfter);
    if (op.state != Op::State::Pending) continue;
    now = Clock::now();
    if (moved) {
      spin_until = now + spin_;
      idle_since = now;
      continue;
    }
    if (now >= deadline)
      raise("timed out after " + std::to_string(timeout.count()) + " ms waiting for its " + describe(op));
    if (now - last_watch_ >= kWatchEvery) {
      last_watch_ = now;
      watch_peers();
      continue;
    }
    if (now < spin_until) {
      lk.unlock();
      relax(yield);
      lk.lock();
      continue;
    }
    auto nap = std::min<Clock::duration>(deadline - now, kWatchEvery);
    if (parked_) nap = std::min<Clock::duration>(nap, idle_since + kRescueAfter - now);
    sleep_on_bell(lk, seq, nap);
  }
}

// Sleeps (mu_ released) until the doorbell moves past `seq` or `nap` passed; registered as a
// sleeper first, so a peer that bumps the bell after our last look also wakes us.
void Engine::sleep_on_bell(std::unique_lock<std::mutex>& lk, uint32_t seq, std::chrono::steady_clock::duration nap) {
  me_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  ++local_sleepers_;
  if (me_->bell.load(std::memory_order_seq_cst) == seq) {
    lk.unlock();
    futex_wait(&me_->bell, seq, nap);
    lk.lock();
  }
  --local_sleepers_;
  me_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void Engine::acknowledge(Peer& p, uint64_t number) {
  if (number == 0) return;
  p.in.control()->acks[number % RingControl::kAckSlots].store(number, std::memory_order_release);
  ring_bell(p.hdr);  // its sender may sleep waiting for this
}

bool Engine::check_acks(Peer& p) {
  bool moved = false;
  for (auto it = p.unacked.begin(); it != p.unacked.end();) {
    Op& op = **it;
    if (p.out.control()->acks[op.number % RingControl::kAckSlots].load(std::memory_order_acquire) != op.number) {
      ++it;
      continue;
    }
    complete(op);
    it = p.unacked.erase(it);
    moved = true;
  }
  return moved;
}

bool Engine::pending() const {
  for (const auto& p : peers_)
    if (p && p->gone.empty() && (!p->sends.empty() || !p->unacked.empty() || !p->recvs.empty() || p->arriving))
      return true;
  return parked_;
}

void Engine::wake_thread() {
  if (!thread_parked_ || in_wait_ > 0) return;
  thread_parked_ = false;
  idle_cv_.notify_one();
}

// The progress thread: passes while something is pending and no thread waits (wait() drives
// progress itself then), sleeping on the doorbell between passes that moved nothing. Woken
// by a post or by the last waiter leaving, it first gives this rank's threads kGrace to wait
// themselves: in the common post-then-wait pattern it then never touches the rings.
void Engine::background() {
  std::unique_lock<std::mutex> lk(mu_);
  auto idle_since = Clock::now();
  bool graced = false;
  while (!stop_thread_) {
    if (in_wait_ > 0 || !shut_.empty() || !pending()) {
      thread_parked_ = true;
      idle_cv_.wait(lk, [this] { return stop_thread_ || !thread_parked_; });
      graced = false;
      continue;
    }
    if (!graced) {
      graced = true;
      idle_cv_.wait_for(lk, kGrace, [this] { return stop_thread_; });
      idle_since = Clock::now();
      continue;
    }
    const uint32_t seq = me_->bell.load(std::memory_order_seq_cst);
    auto now = Clock::now();
    if (progress(now - idle_since >= kRescueAfter)) {
      idle_since = Clock::now();
      continue;
    }
    if (now - last_watch_ >= kWatchEvery) {
      last_watch_ = now;
      watch_peers();
    }
    Clock::duration nap = kWatchEvery;
    if (parked_) nap = std::max<Clock::duration>(std::chrono::microseconds(100), idle_since + kRescueAfter - now);
    sleep_on_bell(lk, seq, nap);
  }
}

void Engine::watch_peers() {
  for (auto& pp : peers_) {
    if (!pp || !pp->gone.empty() || !pp->watch_pid) continue;
    if (!process_gone(pp->pid, pp->start_time)) continue;
    drain(*pp, true);  // what it wrote before it died still counts
    if (pp->gone.empty()) peer_gone(*pp, "rank " + who(pp->rank) + " (pid " + std::to_string(pp->pid) + ") died");
  }
}

void Engine::peer_gone(Peer& p, const std::string& why) {
  p.gone = why;
  for (auto& op : p.sends) fail(*op, why);
  for (auto& op : p.unacked) fail(*op, why);
  p.unacked.clear();
  for (auto& op : p.recvs) fail(*op, why);
  if (p.into_op) fail(*p.into_op, why);
  if (p.into_buf) p.unexpected.erase(std::find(p.unexpected.begin(), p.unexpected.end(), p.into_buf));
  p.sends.clear();
  p.recvs.clear();
  p.into_op.reset();
  p.into_buf.reset();
  p.arriving = false;
}

// ---- the end ----------------------------------------------------------------------------

void Engine::shut(uint32_t state_bit, const std::string& why) {
  if (!shut_.empty()) return;
  shut_ = why;
  if (!me_) return;  // a group of one rank has no segment
  me_->state.fetch_or(state_bit, std::memory_order_seq_cst);
  for (auto& pp : peers_) {
    if (!pp) continue;
    ring_bell(pp->hdr);  // a peer blocked on this rank finds the state bit in its next pass
    peer_gone(*pp, why);
  }
  ring_bell(me_);  // and this rank's own sleepers find their ops failed
}

void Engine::drop(Op& op) noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  if (op.state != Op::State::Pending || !shut_.empty()) return;
  interrupt_.store(true);
  shut(kStateAborted,
       "rank " + who(rank_) + " dropped its unfinished " + describe(op) + ", which aborted the transport");
}

void Engine::abort() noexcept {
  interrupt_.store(true);  // a pass in another thread stops after its current frame
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return;
  shut(kStateAborted, "the transport was aborted");
}

void Engine::close() noexcept {
  interrupt_.store(true);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return;
    shut(kStateClosed, "the transport was closed");
    closed_ = true;
    stop_thread_ = true;
    thread_parked_ = false;
    idle_cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();  // the thread never owns the engine: never this thread
  std::lock_guard<std::mutex> lk(mu_);
  if (in_wait_ == 0) release_memory();
}

void Engine::release_memory() {
  for (auto& pp : peers_) {
    if (!pp) continue;
    pp->unexpected.clear();
    pp->map.reset();
  }
  own_.reset();
  me_ = nullptr;
}

}  // namespace ringzip::shm
