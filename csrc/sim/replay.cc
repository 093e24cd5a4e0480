// Each thread of each rank (a lane) is its recorded program; a lane runs until it waits for a
// request that has not completed or for a point another lane has not reached, or starts a
// kernel, and is resumed at the time that ends. Events are handled in
// time order, so the links and cores serve transfers and kernels first come, first served.
#include "sim/replay.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace ringzip::sim {
namespace {

struct Pending {  // a post whose matching post has not come yet
  int64_t id;
  uint64_t bytes;
  double at;  // when it was posted
};

struct Key {  // messages pair up in posting order per (source, destination, tag)
  int src, dst;
  uint32_t tag;
  bool operator==(const Key& o) const { return src == o.src && dst == o.dst && tag == o.tag; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<uint64_t>()((uint64_t(uint32_t(k.src)) << 40) ^ (uint64_t(uint32_t(k.dst)) << 20) ^ k.tag);
  }
};

// Something that happens at time t: a lane resumes (lane >= 0), message `id` is ready to move
// (kReady), sending link `id` is free for its next chunk (kLinkFree; `span` holds the link's
// wake-up number, an older one is void), or a chunk of message `id` of `span` seconds reaches
// the receiver's link (kArrive).
constexpr int kReady = -1, kLinkFree = -2, kArrive = -3;
struct Item {
  double t;
  uint64_t tick;  // ties in the order they were scheduled
  int lane;
  size_t id;
  double span;
  bool operator>(const Item& o) const { return t != o.t ? t > o.t : tick > o.tick; }
};

// A message moves in up to kChunks chunks (none under kMinChunk bytes): a sending link takes its
// ready messages' chunks in turn, as the sockets of one sender share its NIC, and a receiving
// link takes chunks in the order they reach it. Whole messages one after another (first come,
// first served on the sender's link) let a receiver's link sit idle while the messages for it
// waited behind others: the direct exchange of n ranks took (2n-3) buffer times, not n-1.
constexpr uint64_t kChunks = 16, kMinChunk = 64 << 10;

struct Message {
  int src, dst;
  uint64_t bytes;
  int64_t send_id, recv_id;     // recv_id -1: an eager message whose receive is not posted yet
  uint64_t left = 0, chunk = 0;  // bytes not yet sent, bytes per chunk
  double seen = NAN;             // an eager message: when its receiver could have seen it
};

struct Link {  // a sending side: the messages taking turns on it
  std::deque<size_t> turns;
  bool busy = false;
  uint64_t wake = 0;  // the number of its latest kLinkFree
};

// A lane: the events one thread of a rank issued, in order.
struct Lane {
  int rank;
  std::vector<const Event*> events;
  size_t pc = 0;
  int64_t waiting = -1;  // request waited for
  bool paid = false;     // the send at pc has cost its overhead
  double finish = 0;
};

class Replay {
 public:
  Replay(const Trace& t, const Model& m) : m_(m), n_(static_cast<int>(t.ranks.size())) {
    if (static_cast<int>(m.machine_of.size()) != n_)
      throw std::invalid_argument("the model places " + std::to_string(m.machine_of.size()) + " ranks, the trace has " +
                                  std::to_string(n_));
    int machines = 0;
    for (int mach : m.machine_of) {
      if (mach < 0) throw std::invalid_argument("machine numbers must be >= 0");
      machines = std::max(machines, mach + 1);
    }
    machines_ = machines;
    out_.resize(machines + n_);
    net_in_.assign(machines, 0), intra_in_.assign(n_, 0);
    compute_.assign(n_, 0);
    done_.resize(n_), lane_of_.resize(n_), marks_.resize(n_), after_.resize(n_);
    for (int r = 0; r < n_; ++r) {
      int64_t posts = 0;
      for (const Event& e : t.ranks[r]) {
        if (e.kind == Kind::Send || e.kind == Kind::Recv) posts = std::max(posts, e.id + 1);
        auto& lanes = lane_of_[r];
        if (lanes.size() <= e.lane) lanes.resize(e.lane + 1, -1);
        if (lanes[e.lane] < 0) {
          lanes[e.lane] = static_cast<int>(lanes_.size());
          lanes_.push_back({r, {}});
        }
        lanes_[lanes[e.lane]].events.push_back(&e);
      }
      done_[r].assign(posts, NAN);
      if (lane_of_[r].empty()) {  // a rank that did nothing still finishes
        lane_of_[r].push_back(static_cast<int>(lanes_.size()));
        lanes_.push_back({r, {}});
      }
    }
    for (int c = 0; c < m.cores; ++c) cores_.push(0.0);
  }

  Result run() {
    for (size_t a = 0; a < lanes_.size(); ++a) push(0, static_cast<int>(a), 0);
    while (!queue_.empty()) {
      const Item it = queue_.top();
      queue_.pop();
      if (it.lane == kReady)
        ready(it.t, it.id);
      else if (it.lane == kLinkFree) {
        if (static_cast<uint64_t>(it.span) == out_[it.id].wake) next_chunk(it.t, static_cast<int>(it.id));
      } else if (it.lane == kArrive)
        arrive(it.t, messages_[it.id], it.span);
      else
        resume(it.lane, it.t);
    }
    std::string stuck;
    int last = -1;
    for (const Lane& l : lanes_)
      if (l.pc < l.events.size() && l.rank != last) stuck += (stuck.empty() ? "" : ", ") + std::to_string(last = l.rank);
    if (!stuck.empty()) throw std::runtime_error("replay stalled: ranks [" + stuck + "] wait for messages never sent");
    Result res;
    res.finish.assign(n_, 0);
    for (const Lane& l : lanes_) res.finish[l.rank] = std::max(res.finish[l.rank], l.finish);
    res.time = *std::max_element(res.finish.begin(), res.finish.end());
    res.wire_bytes = wire_;
    res.compute = *std::max_element(compute_.begin(), compute_.end());
    return res;
  }

 private:
  void push(double t, int lane, size_t id, double span = 0) { queue_.push({t, tick_++, lane, id, span}); }

  void resume(int a, double now) {
    Lane& lane = lanes_[a];
    const int r = lane.rank;
    while (lane.pc < lane.events.size()) {
      const Event& e = *lane.events[lane.pc];
      if (e.kind == Kind::Wait || e.kind == Kind::After) {
        const bool request = e.kind == Kind::Wait;
        double when = NAN;
        if (request) {
          when = done_[r].at(e.id);
        } else if (auto it = marks_[r].find(e.id); it != marks_[r].end()) {
          when = it->second;
        }
        if (std::isnan(when)) {
          if (request)
            lane.waiting = e.id;
          else
            after_[r][e.id].push_back(a);
          return;
        }
        ++lane.pc;
        if (when > now) {
          push(when, a, 0);
          return;
        }
        continue;
      }
      if (e.kind == Kind::Send && m_.send_overhead > 0 && !lane.paid) {
        lane.paid = true;  // CPU work: on a core, where the machine's cores are counted
        push(on_core(now, m_.send_overhead) + m_.send_overhead, a, 0);
        return;
      }
      lane.paid = false;
      ++lane.pc;
      if (e.kind == Kind::Send || e.kind == Kind::Recv) {
        post(r, e, now);
        continue;
      }
      if (e.kind == Kind::Mark) {
        marks_[r][e.id] = now;
        if (auto it = after_[r].find(e.id); it != after_[r].end()) {
          for (int w : it->second) push(now, w, 0);
          after_[r].erase(it);
        }
        continue;
      }
      const int k = static_cast<int>(e.kind);
      const double amount = static_cast<double>(e.amount) * m_.scale;
      const double dt = amount * (m_.per_unit[k] + std::max(0, e.peer) * m_.per_input[k]) + m_.launch;
      compute_[r] += dt;
      const double start = on_core(now, dt);
      push(start + dt, a, 0);
      return;
    }
    lane.finish = now;
  }

  void post(int r, const Event& e, double now) {
    const uint64_t bytes = static_cast<uint64_t>(std::llround(static_cast<double>(e.amount) * m_.scale));
    if (bytes == 0) {  // zero-byte posts complete at once on every transport
      done_[r].at(e.id) = now;
      return;
    }
    const bool send = e.kind == Kind::Send;
    const Key key = send ? Key{r, e.peer, e.tag} : Key{e.peer, r, e.tag};
    if (m_.eager && !send) {
      if (auto& sent = unclaimed_[key]; !sent.empty()) {
        Message& msg = messages_[sent.front()];
        sent.pop_front();
        msg.recv_id = e.id;
        if (!std::isnan(msg.seen)) complete(r, e.id, std::max(now, msg.seen));
        return;
      }
    }
    auto& theirs = (send ? recvs_ : sends_)[key];
    if (theirs.empty()) {
      if (m_.eager && send) {  // it leaves now; a receive posted later claims it
        messages_.push_back(Message{r, e.peer, bytes, e.id, -1});
        unclaimed_[key].push_back(messages_.size() - 1);
        push(now, kReady, messages_.size() - 1);
        return;
      }
      (send ? sends_ : recvs_)[key].push_back({e.id, bytes, now});
      return;
    }
    const Pending other = theirs.front();
    theirs.pop_front();
    messages_.push_back(send ? Message{r, e.peer, bytes, e.id, other.id} : Message{e.peer, r, other.bytes, other.id, e.id});
    // Both posted: it moves once the receive's ready notice reached the sender.
    const double notice = m_.eager || inside(messages_.back()) ? 0 : m_.delay_s;
    push(send ? std::max(now, other.at + notice) : now + notice, kReady, messages_.size() - 1);
  }

  bool inside(const Message& msg) const { return m_.machine_of[msg.src] == m_.machine_of[msg.dst]; }

  // Sending links: each machine's NIC, then each rank's link inside its machine.
  int out_link(const Message& msg) const { return inside(msg) ? machines_ + msg.src : m_.machine_of[msg.src]; }

  void ready(double now, size_t i) {
    Message& msg = messages_[i];
    if (!inside(msg)) wire_ += static_cast<double>(msg.bytes);
    msg.left = msg.bytes;
    msg.chunk = std::max(kMinChunk, (msg.bytes + kChunks - 1) / kChunks);
    // Chunks of a quarter window at most, so that a window refills as its acknowledgements come.
    if (windowed(msg)) msg.chunk = std::min(msg.chunk, std::max(kMinChunk, static_cast<uint64_t>(window_cap() / 4)));
    Link& l = out_[out_link(msg)];
    l.turns.push_back(i);
    if (!l.busy) next_chunk(now, out_link(msg));  // also when it only waited for a window
  }

  // A connection's window: at most window_bytes (times the pool) sent and not yet acknowledged,
  // an acknowledgement coming back a round trip after its bytes left. Per pair of ranks: the
  // messages between them share their connections.
  struct Window {
    std::deque<std::pair<double, double>> sent;  // (when, bytes) of the chunks of the last round trip
    double bytes = 0;
  };
  bool windowed(const Message& msg) const { return m_.window_bytes > 0 && !inside(msg); }
  double round_trip() const { return 2 * (m_.delay_s + m_.net_latency_s); }
  double window_cap() const { return m_.window_bytes * std::max(1, m_.pool); }
  int64_t pair(const Message& msg) const { return static_cast<int64_t>(msg.src) * n_ + msg.dst; }
  Window& window_of(const Message& msg) { return windows_[pair(msg)]; }
  bool paced(const Message& msg) const { return m_.pair_bytes_per_s > 0 && !inside(msg); }

  // The earliest time from `now` that `bytes` more fit the window (a chunk above it: alone).
  double window_free(Window& w, double now, double bytes) {
    while (!w.sent.empty() && w.sent.front().first + round_trip() <= now) {
      w.bytes -= w.sent.front().second;
      w.sent.pop_front();
    }
    double need = w.bytes + bytes - window_cap(), at = now;
    for (const auto& [when, b] : w.sent) {
      if (need <= 0) break;
      need -= b;
      at = when + round_trip();
    }
    return at;
  }

  void next_chunk(double now, int link) {
    Link& l = out_[link];
    // The first message in turn whose window lets it send; none: wake when the first one may.
    double wake = INFINITY;
    size_t turn = 0;
    for (; turn < l.turns.size(); ++turn) {
      const Message& m = messages_[l.turns[turn]];
      double free = paced(m) ? paced_[pair(m)] : now;
      if (windowed(m)) free = std::max(free, window_free(window_of(m), now, static_cast<double>(std::min(m.left, m.chunk))));
      if (free <= now) break;
      wake = std::min(wake, free);
    }
    l.busy = turn < l.turns.size();
    if (!l.busy) {
      if (wake < INFINITY) push(wake, kLinkFree, static_cast<size_t>(link), static_cast<double>(++l.wake));
      return;
    }
    const size_t i = l.turns[turn];
    l.turns.erase(l.turns.begin() + static_cast<std::ptrdiff_t>(turn));
    Message& msg = messages_[i];
    const uint64_t bytes = std::min(msg.left, msg.chunk);
    msg.left -= bytes;
    const double amount = static_cast<double>(bytes);
    const double span = amount / (inside(msg) ? m_.intra_bytes_per_s : m_.net_bytes_per_s);
    // Inside a machine the sender's copy into shared memory takes a core, where cores are few;
    // between machines, where cores are counted, the host's network stack does (from where a
    // core starts on it, the chunk is on the wire).
    const double start = inside(msg)              ? on_core(now, span)
                         : m_.net_cpu_per_byte > 0 ? on_core(now, amount * m_.net_cpu_per_byte)
                                                   : now;
    if (windowed(msg)) {
      Window& w = window_of(msg);
      w.sent.emplace_back(start, amount);
      w.bytes += amount;
    }
    if (paced(msg)) {  // the pair's next chunk may leave once this one's bytes are paced out
      double& next = paced_[pair(msg)];
      next = std::max(next, start) + amount / m_.pair_bytes_per_s;
    }
    if (msg.left > 0)
      l.turns.push_back(i);
    else
      complete(msg.src, msg.send_id, start + span);
    push(start, kArrive, i, span);  // its first bytes reach the receiver's link as they leave
    push(start + span, kLinkFree, static_cast<size_t>(link), static_cast<double>(++l.wake));
  }

  // When a piece of work of `dt` seconds starts: at once, or where the machine's cores are
  // counted (Model::cores), on the first core free from now.
  double on_core(double now, double dt) {
    if (cores_.empty()) return now;
    const double start = std::max(now, cores_.top());
    cores_.pop();
    cores_.push(start + dt);
    return start;
  }

  void arrive(double now, Message& msg, double span) {
    const bool in_machine = inside(msg);
    double& in = in_machine ? intra_in_[msg.dst] : net_in_[m_.machine_of[msg.dst]];
    // The receiver's copy out of shared memory likewise.
    in = (in_machine ? on_core(std::max(now, in), span) : std::max(now, in)) + span;
    // The last chunk leaves after the others reached this link (their events came first).
    if (msg.left == 0) {
      double seen = in + (in_machine ? m_.intra_latency_s : m_.net_latency_s + m_.delay_s);
      if (m_.recv_overhead > 0) seen = on_core(seen, m_.recv_overhead) + m_.recv_overhead;
      if (msg.recv_id < 0)
        msg.seen = seen;  // an eager message before its receive: the receive completes at once
      else
        complete(msg.dst, msg.recv_id, seen);
    }
  }

  void complete(int r, int64_t id, double when) {
    done_[r].at(id) = when;
    for (int a : lane_of_[r]) {
      if (a >= 0 && lanes_[a].waiting == id) {
        lanes_[a].waiting = -1;
        push(when, a, 0);
      }
    }
  }

  const Model& m_;
  const int n_;
  std::vector<Lane> lanes_;
  std::vector<std::vector<int>> lane_of_;  // per rank: lane number -> index in lanes_ (-1: none)
  std::vector<std::vector<double>> done_;  // per rank, per request: completion time (NaN: not yet known)
  std::vector<std::unordered_map<int64_t, double>> marks_;            // per rank: point -> when reached
  std::vector<std::unordered_map<int64_t, std::vector<int>>> after_;  // per rank: point -> lanes waiting
  std::vector<double> compute_;
  int machines_ = 0;
  std::vector<Link> out_;                   // sending links (out_link)
  std::vector<double> net_in_, intra_in_;  // when each receiving link is free
  std::priority_queue<double, std::vector<double>, std::greater<>> cores_;
  std::unordered_map<Key, std::deque<Pending>, KeyHash> sends_, recvs_;
  std::unordered_map<Key, std::deque<size_t>, KeyHash> unclaimed_;  // eager messages sent before their receive
  std::unordered_map<int64_t, Window> windows_;                      // per pair of ranks (window_of)
  std::unordered_map<int64_t, double> paced_;  // per pair of ranks: when its next chunk may leave (paced)
  std::vector<Message> messages_;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue_;
  uint64_t tick_ = 0;
  double wire_ = 0;
};

}  // namespace

Result replay(const Trace& t, const Model& m) { return Replay(t, m).run(); }

}  // namespace ringzip::sim
