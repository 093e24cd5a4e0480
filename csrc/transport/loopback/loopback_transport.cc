#include "transport/loopback/loopback_transport.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace ringzip {
namespace {

struct Op {
  enum class St { Queued, Done, Failed, Cancelled };
  int owner;  // posting rank
  int peer;   // -1: a receive from any source
  bool send;
  void* data;
  size_t bytes;
  uint32_t tag;
  St st = St::Queued;
  std::string error;
  int source = -1;
  uint64_t group = 0;  // grouped: the number of its group on its rank
};
using OpPtr = std::shared_ptr<Op>;

std::string hex(uint32_t v) {
  std::ostringstream o;
  o << "0x" << std::hex << v;
  return o.str();
}

}  // namespace

LoopbackMode parse_loopback_mode(const std::string& s) {
  if (s == "eager") return LoopbackMode::Eager;
  if (s == "grouped") return LoopbackMode::Grouped;
  if (s == "gloo") return LoopbackMode::Gloo;
  throw std::invalid_argument("ringzip loopback: unknown mode '" + s + "' (expected eager, grouped or gloo)");
}

// Everything below runs under `mu`; transfers are copies made by the thread whose post (or
// group end) made them possible, so no state exists in which a transfer could run but has not.
struct LoopbackHub::State {
  struct Group {
    uint64_t id;
    size_t left;  // operations not yet finished
  };
  struct Rank {
    bool closed = false;
    std::vector<OpPtr> open;   // grouped: the group being issued (filled and closed under one lock)
    std::deque<Group> groups;  // grouped: closed, unfinished, in stream order; front runs
    uint64_t next_group = 0;
    OpPtr waiting;  // what its thread blocks on
    // Gloo mode: sends and receives posted so far per (peer, tag)
    std::map<std::pair<int, uint32_t>, std::pair<uint64_t, uint64_t>> exchanges;
  };

  State(int n_, LoopbackMode m)
      : n(n_), mode(m), ranks(n_), pending_sends(n_), pending_recvs(n_), sendq(n_ * n_), recvq(n_ * n_) {}

  const int n;
  const LoopbackMode mode;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t posts = 0;  // posts and group ends so far: what a deadlock must not see move
  std::string failure;
  std::vector<Rank> ranks;
  // eager: unmatched sends by destination and unmatched receives by owner, in posting order
  std::vector<std::list<OpPtr>> pending_sends, pending_recvs;
  // grouped: per ordered pair, sends a -> b at [a * n + b] and receives at b from a at [b * n + a]
  std::vector<std::deque<OpPtr>> sendq, recvq;

  bool grouped() const { return mode == LoopbackMode::Grouped; }

  std::string describe(const Op& op) const {
    std::ostringstream o;
    if (op.send)
      o << "send of " << op.bytes << " bytes to rank " << op.peer;
    else if (op.peer < 0)
      o << "receive of " << op.bytes << " bytes from any rank";
    else
      o << "receive of " << op.bytes << " bytes from rank " << op.peer;
    if (!grouped()) o << " (tag " << hex(op.tag) << ")";  // grouped: not used
    if (grouped()) o << " [group " << op.group << "]";
    return o.str();
  }

  [[noreturn]] void fail_now(const std::string& why) const {
    const char* name = grouped() ? "grouped" : mode == LoopbackMode::Gloo ? "gloo" : "eager";
    throw std::runtime_error("ringzip loopback (" + std::string(name) + "): " + why);
  }

  void check_post(int rank) const {
    if (!failure.empty()) fail_now(failure);
    if (ranks[rank].closed) fail_now("rank " + std::to_string(rank) + "'s transport is closed");
  }

  void fail_op(Op& op, const std::string& why) {
    op.st = Op::St::Failed;
    op.error = why;
  }

  // ---- grouped: stream order -------------------------------------------------------------
  bool running(const Op& op) const {
    const auto& g = ranks[op.owner].groups;
    return !g.empty() && g.front().id == op.group;
  }

  void finish_grouped(const Op& op) {
    auto& gs = ranks[op.owner].groups;
    for (auto& g : gs)
      if (g.id == op.group) --g.left;
    while (!gs.empty() && gs.front().left == 0) gs.pop_front();
  }

  void progress() {
    for (bool moved = true; moved;) {
      moved = false;
      for (int a = 0; a < n; ++a) {
        for (int b = 0; b < n; ++b) {
          auto& sq = sendq[a * n + b];
          auto& rq = recvq[b * n + a];
          while (!sq.empty() && !rq.empty() && running(*sq.front()) && running(*rq.front())) {
            OpPtr s = sq.front(), r = rq.front();
            sq.pop_front();
            rq.pop_front();
            transfer(*s, *r);
            finish_grouped(*s);
            finish_grouped(*r);
            moved = true;
          }
        }
      }
    }
  }

  void close_group(int rank) {
    auto& me = ranks[rank];
    Group g{me.next_group++, 0};
    for (auto& op : me.open) {
      op->group = g.id;
      if (op->st == Op::St::Queued) ++g.left;
    }
    me.open.clear();
    if (g.left) me.groups.push_back(g);
    progress();
    ++posts;
    cv.notify_all();
  }

  // ---- both modes ------------------------------------------------------------------------
  void transfer(Op& s, Op& r) {
    const bool fits = grouped() ? r.bytes == s.bytes : r.bytes >= s.bytes;
    if (!fits) {
      std::ostringstream o;
      o << "rank " << s.owner << " sends " << s.bytes << " bytes (tag " << hex(s.tag) << ") to rank " << r.owner
        << ", whose matching receive (tag " << hex(r.tag) << ") takes " << r.bytes << " bytes"
        << (grouped() ? ": sizes matched by posting order must be equal (NCCL would corrupt or hang)"
                      : ": a receive must hold the whole message");
      fail_op(s, o.str());
      fail_op(r, o.str());
      return;
    }
    std::memcpy(r.data, s.data, s.bytes);
    r.source = s.owner;
    s.st = r.st = Op::St::Done;
  }

  template <typename Match>
  OpPtr take(std::list<OpPtr>& q, Match match) {
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (match(**it)) {
        OpPtr op = *it;
        q.erase(it);
        return op;
      }
    }
    return nullptr;
  }

  void check_exchange_order(int rank, bool send, int peer, uint32_t tag) {
    auto& [sends, recvs] = ranks[rank].exchanges[{peer, tag}];
    if (!send && sends > recvs)
      fail_now("rank " + std::to_string(rank) + " posted its receive from rank " + std::to_string(peer) + " (tag " +
               hex(tag) +
               ") after its send to that rank under the same tag: over Gloo the receive's ready notice "
               "then waits behind the payload, and the exchange runs one direction at a time");
    ++(send ? sends : recvs);
  }

  OpPtr post(int rank, bool send, void* data, size_t bytes, int peer, uint32_t tag) {
    check_post(rank);
    auto op = std::make_shared<Op>(Op{rank, peer, send, data, bytes, tag});
    if (grouped()) {
      if (peer < 0) fail_now("receive from any source is not supported in grouped mode (nor on NCCL)");
      ranks[rank].open.push_back(op);
      (send ? sendq[rank * n + peer] : recvq[rank * n + peer]).push_back(op);
      return op;
    }
    if (mode == LoopbackMode::Gloo && peer >= 0) check_exchange_order(rank, send, peer, tag);
    if (send) {
      OpPtr r = take(pending_recvs[peer], [&](const Op& o) { return (o.peer == rank || o.peer < 0) && o.tag == tag; });
      if (!r) {
        pending_sends[peer].push_back(op);
        return op;
      }
      transfer(*op, *r);
    } else {
      OpPtr s = take(pending_sends[rank], [&](const Op& o) { return (peer < 0 || o.owner == peer) && o.tag == tag; });
      if (!s) {
        pending_recvs[rank].push_back(op);
        return op;
      }
      transfer(*s, *op);
    }
    ++posts;
    cv.notify_all();
    return op;
  }

  // Takes a queued operation out of every queue: no transfer touches its buffer afterwards.
  void cancel(const OpPtr& op) {
    if (op->st != Op::St::Queued) return;
    auto drop = [&](auto& q) {
      auto it = std::find(q.begin(), q.end(), op);
      if (it != q.end()) q.erase(it);
    };
    if (grouped())
      drop(op->send ? sendq[op->owner * n + op->peer] : recvq[op->owner * n + op->peer]);
    else
      drop(op->send ? pending_sends[op->peer] : pending_recvs[op->owner]);
    op->st = Op::St::Cancelled;
    if (grouped()) {
      finish_grouped(*op);
      progress();
    }
  }

  // True when every rank that has not closed waits for an operation that is still queued (and
  // one at least waits): nothing can move any more.
  bool deadlocked() const {
    bool waits = false;
    for (const auto& r : ranks) {
      if (r.closed) continue;
      if (!r.waiting || r.waiting->st != Op::St::Queued) return false;
      waits = true;
    }
    return waits;
  }

  // Grouped: where the operation matching `op` stands (posting order between the pair).
  std::string counterpart(const Op& op) const {
    if (!grouped() || op.peer < 0) return "";
    const auto& mine = op.send ? sendq[op.owner * n + op.peer] : recvq[op.owner * n + op.peer];
    const auto& theirs = op.send ? recvq[op.peer * n + op.owner] : sendq[op.peer * n + op.owner];
    size_t pos = 0;
    for (; pos < mine.size() && mine[pos].get() != &op; ++pos) {}
    std::ostringstream o;
    if (pos >= theirs.size()) {
      o << "; rank " << op.peer << " has not posted the matching " << (op.send ? "receive" : "send") << " yet";
    } else {
      const Op& m = *theirs[pos];
      const auto& pg = ranks[op.peer].groups;
      o << "; its match is rank " << op.peer << "'s " << describe(m);
      if (!pg.empty() && pg.front().id != m.group)
        o << ", which cannot start before rank " << op.peer << "'s group " << pg.front().id << " completes";
    }
    if (pos > 0) o << " (" << pos << " earlier operations of this pair still pending)";
    return o.str();
  }

  std::string report(const std::string& headline) const {
    std::ostringstream o;
    o << headline;
    for (int r = 0; r < n; ++r) {
      const auto& rk = ranks[r];
      o << "\n    rank " << r << ": ";
      if (rk.closed) {
        o << "finished (closed)";
        continue;
      }
      if (rk.waiting)
        o << "waits for its " << describe(*rk.waiting) << counterpart(*rk.waiting);
      else
        o << "running (not waiting)";
      if (grouped() && !rk.groups.empty())
        o << "; running group " << rk.groups.front().id << " (" << rk.groups.front().left << " unfinished)";
    }
    return o.str();
  }

  void declare(const std::string& why) {
    if (failure.empty()) failure = why;
    cv.notify_all();
  }

  void wait(const OpPtr& op, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    auto& me = ranks[op->owner];
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    me.waiting = op;
    struct Clear {
      OpPtr& w;
      ~Clear() { w.reset(); }
    } clear{me.waiting};
    for (;;) {
      switch (op->st) {
        case Op::St::Done: return;
        case Op::St::Failed: fail_now(op->error);
        case Op::St::Cancelled: fail_now("the " + describe(*op) + " was cancelled");
        case Op::St::Queued: break;
      }
      if (!failure.empty()) fail_now(failure);
      if (deadlocked()) {
        // A rank may run a second thread (the node-aware pipeline) that computes while this one
        // waits: a deadlock is declared only when nothing is posted for a while.
        const uint64_t seen = posts;
        cv.wait_for(lock, std::chrono::milliseconds(300));
        if (deadlocked() && posts == seen) {
          declare(report("deadlock: every rank waits for a transfer that no rank can start any more"));
          fail_now(failure);
        }
        continue;
      }
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && op->st == Op::St::Queued) {
        fail_now("rank " + std::to_string(op->owner) + " timed out after " + std::to_string(timeout.count()) +
                 " ms waiting for its " + describe(*op) + counterpart(*op) + report("; state:"));
      }
    }
  }

  void abort(int rank) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failure.empty()) return;
    failure = "rank " + std::to_string(rank) + " aborted the transport";
    for (auto& q : pending_sends) q.clear();
    for (auto& q : pending_recvs) q.clear();
    for (auto& q : sendq) q.clear();
    for (auto& q : recvq) q.clear();
    for (auto& r : ranks) r.groups.clear();
    cv.notify_all();
  }

  void close(int rank) {
    std::lock_guard<std::mutex> lock(mu);
    auto& me = ranks[rank];
    if (me.closed) return;
    std::vector<OpPtr> mine;
    auto collect = [&](const auto& q) {
      for (const auto& op : q)
        if (op->owner == rank) mine.push_back(op);
    };
    for (const auto& q : pending_sends) collect(q);
    for (const auto& q : pending_recvs) collect(q);
    for (const auto& q : sendq) collect(q);
    for (const auto& q : recvq) collect(q);
    for (const auto& op : mine) cancel(op);
    me.closed = true;
    if (deadlocked())
      declare(report("deadlock: rank " + std::to_string(rank) +
                     " finished while the others wait for transfers no rank can start"));
    cv.notify_all();
  }

  void drop(const OpPtr& op) {
    std::lock_guard<std::mutex> lock(mu);
    if (op->st != Op::St::Queued) return;
    const std::string what = describe(*op);
    cancel(op);
    declare("rank " + std::to_string(op->owner) + " dropped its unfinished " + what +
            " without waiting for it (its collective failed, or the schedule misses a wait)");
  }
};

namespace {

class LoopbackRequest final : public Request {
 public:
  LoopbackRequest(std::shared_ptr<LoopbackHub::State> s, OpPtr op) : s_(std::move(s)), op_(std::move(op)) {}
  ~LoopbackRequest() override { s_->drop(op_); }
  void wait(std::chrono::milliseconds timeout) override { s_->wait(op_, timeout); }
  int source() const override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return op_->source;
  }

 private:
  std::shared_ptr<LoopbackHub::State> s_;
  OpPtr op_;
};

}  // namespace

LoopbackHub::LoopbackHub(int size, LoopbackMode mode) {
  if (size < 1) throw std::invalid_argument("ringzip loopback: size must be >= 1, got " + std::to_string(size));
  s_ = std::make_shared<State>(size, mode);
}
LoopbackHub::~LoopbackHub() = default;
int LoopbackHub::size() const { return s_->n; }
LoopbackMode LoopbackHub::mode() const { return s_->mode; }
std::string LoopbackHub::failure() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->failure;
}

namespace {

void check_rank(const LoopbackHub& hub, int rank, bool grouped) {
  if (rank < 0 || rank >= hub.size())
    throw std::invalid_argument("ringzip loopback: rank " + std::to_string(rank) + " out of range");
  if ((hub.mode() == LoopbackMode::Grouped) != grouped)
    throw std::invalid_argument("ringzip loopback: the hub runs the other mode");
}

}  // namespace

std::unique_ptr<Transport> make_loopback_transport(std::shared_ptr<LoopbackHub> hub, int rank) {
  if (hub->mode() == LoopbackMode::Grouped) return std::make_unique<LoopbackGroupedTransport>(std::move(hub), rank);
  return std::make_unique<LoopbackTransport>(std::move(hub), rank);
}

LoopbackTransport::LoopbackTransport(std::shared_ptr<LoopbackHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {
  check_rank(*hub_, rank, false);
}
LoopbackTransport::~LoopbackTransport() { close(); }
int LoopbackTransport::size() const { return hub_->size(); }
std::string LoopbackTransport::name() const { return "loopback-eager"; }

namespace {

void check_peer(int peer, int rank, int size) {
  if (peer < 0 || peer >= size || peer == rank)
    throw std::invalid_argument("ringzip loopback: bad peer " + std::to_string(peer) + " for rank " +
                                std::to_string(rank) + " of " + std::to_string(size));
}

}  // namespace

std::unique_ptr<Request> LoopbackTransport::isend(const void* data, size_t bytes, int peer, uint32_t tag) {
  check_peer(peer, rank_, size());
  if (bytes == 0) return std::make_unique<DoneRequest>(peer);
  auto& s = *hub_->s_;
  std::lock_guard<std::mutex> lock(s.mu);
  return std::make_unique<LoopbackRequest>(hub_->s_, s.post(rank_, true, const_cast<void*>(data), bytes, peer, tag));
}

std::unique_ptr<Request> LoopbackTransport::irecv(void* data, size_t bytes, int peer, uint32_t tag) {
  check_peer(peer, rank_, size());
  if (bytes == 0) return std::make_unique<DoneRequest>(peer);
  auto& s = *hub_->s_;
  std::lock_guard<std::mutex> lock(s.mu);
  return std::make_unique<LoopbackRequest>(hub_->s_, s.post(rank_, false, data, bytes, peer, tag));
}

std::unique_ptr<Request> LoopbackTransport::irecv_any(void* data, size_t bytes, uint32_t tag) {
  auto& s = *hub_->s_;
  std::lock_guard<std::mutex> lock(s.mu);
  return std::make_unique<LoopbackRequest>(hub_->s_, s.post(rank_, false, data, bytes, -1, tag));
}

void LoopbackTransport::abort() { hub_->s_->abort(rank_); }
void LoopbackTransport::close() { hub_->s_->close(rank_); }

LoopbackGroupedTransport::LoopbackGroupedTransport(std::shared_ptr<LoopbackHub> hub, int rank)
    : hub_(std::move(hub)), rank_(rank) {
  check_rank(*hub_, rank, true);
}
LoopbackGroupedTransport::~LoopbackGroupedTransport() { close(); }
int LoopbackGroupedTransport::size() const { return hub_->size(); }
void LoopbackGroupedTransport::abort() { hub_->s_->abort(rank_); }
void LoopbackGroupedTransport::close() { hub_->s_->close(rank_); }

void LoopbackGroupedTransport::check_open() const {
  auto& s = *hub_->s_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.check_post(rank_);
}

std::unique_ptr<Request> LoopbackGroupedTransport::isend(const void* data, size_t bytes, int peer, uint32_t tag) {
  check_open();
  return GroupedTransport::isend(data, bytes, peer, tag);
}

std::unique_ptr<Request> LoopbackGroupedTransport::irecv(void* data, size_t bytes, int peer, uint32_t tag) {
  check_open();
  return GroupedTransport::irecv(data, bytes, peer, tag);
}

void LoopbackGroupedTransport::issue(const std::vector<Op>& group) {
  auto& s = *hub_->s_;
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& op : group)
    issued_.push_back(
        std::make_unique<LoopbackRequest>(hub_->s_, s.post(rank_, op.send, op.data, op.bytes, op.peer, 0)));
  s.close_group(rank_);
}

void LoopbackGroupedTransport::complete(std::chrono::milliseconds timeout) {
  for (auto& q : issued_) q->wait(timeout);
  issued_.clear();
}

}  // namespace ringzip
