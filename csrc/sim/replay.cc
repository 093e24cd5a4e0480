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

struct Item {  // something that happens at time t: a lane resumes, or a message may start
  double t;
  uint64_t tick;  // ties in the order they were scheduled
  int lane;       // -1: message `msg` is ready to move
  size_t msg;
  bool operator>(const Item& o) const { return t != o.t ? t > o.t : tick > o.tick; }
};

struct Message {
  int src, dst;
  uint64_t bytes;
  int64_t send_id, recv_id;
};

// A lane: the events one thread of a rank issued, in order.
struct Lane {
  int rank;
  std::vector<const Event*> events;
  size_t pc = 0;
  int64_t waiting = -1;  // request waited for
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
    net_out_.assign(machines, 0), net_in_.assign(machines, 0);
    intra_out_.assign(n_, 0), intra_in_.assign(n_, 0);
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
      if (it.lane < 0)
        transfer(it.t, messages_[it.msg]);
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
  void push(double t, int lane, size_t msg) { queue_.push({t, tick_++, lane, msg}); }

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
      double start = now;
      if (!cores_.empty()) {
        start = std::max(now, cores_.top());
        cores_.pop();
        cores_.push(start + dt);
      }
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
    auto& theirs = (send ? recvs_ : sends_)[key];
    if (theirs.empty()) {
      (send ? sends_ : recvs_)[key].push_back({e.id, bytes});
      return;
    }
    const Pending other = theirs.front();
    theirs.pop_front();
    messages_.push_back(send ? Message{r, e.peer, bytes, e.id, other.id} : Message{e.peer, r, other.bytes, other.id, e.id});
    push(now, -1, messages_.size() - 1);  // both posted: it moves (a receive's ready notice came)
  }

  void transfer(double now, const Message& msg) {
    const bool inside = m_.machine_of[msg.src] == m_.machine_of[msg.dst];
    double& out = inside ? intra_out_[msg.src] : net_out_[m_.machine_of[msg.src]];
    double& in = inside ? intra_in_[msg.dst] : net_in_[m_.machine_of[msg.dst]];
    const double rate = inside ? m_.intra_bytes_per_s : m_.net_bytes_per_s;
    const double latency = inside ? m_.intra_latency_s : m_.net_latency_s;
    if (!inside) wire_ += static_cast<double>(msg.bytes);
    // The sender's link serializes what it sends and the receiver's what arrives, each on its
    // own: a sender is never held up by a busy receiver of another message (a switch buffers),
    // so an all-to-all keeps every link busy, as fair sharing would.
    const double span = static_cast<double>(msg.bytes) / rate;
    const double start = std::max(now, out);
    out = start + span;
    in = std::max(start, in) + span;
    complete(msg.src, msg.send_id, out);
    complete(msg.dst, msg.recv_id, in + latency);
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
  std::vector<double> net_out_, net_in_, intra_out_, intra_in_;  // when each link is free
  std::priority_queue<double, std::vector<double>, std::greater<>> cores_;
  std::unordered_map<Key, std::deque<Pending>, KeyHash> sends_, recvs_;
  std::vector<Message> messages_;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue_;
  uint64_t tick_ = 0;
  double wire_ = 0;
};

}  // namespace

Result replay(const Trace& t, const Model& m) { return Replay(t, m).run(); }

}  // namespace ringzip::sim
