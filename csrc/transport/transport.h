#pragma once
// What the collective algorithms need from a network: post a send or a receive of bytes
// to/from a peer under a tag, then wait for it. Algorithms never name a concrete transport.
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ringzip {

class NativeCollectives;  // transport/native.h

class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the transfer finished; throws on error or when `timeout` elapses.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // Rank the data came from (for receives from any source); -1 when not applicable.
  virtual int source() const { return -1; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  // The rank of the process group that index i of this transport is, and the group's size:
  // a view of some ranks (transport/subset.h) maps its indices back, so errors name group ranks.
  virtual int group_rank(int i) const { return i; }
  virtual int group_size() const { return size(); }
  // The buffer must stay valid and untouched until the request completed.
  virtual std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) = 0;
  virtual std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) = 0;
  virtual std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) = 0;
  // Brackets posts that must be issued together (NCCL groups concurrent sends and receives so
  // a ring step can't deadlock); host transports post each at once and ignore the brackets.
  // Algorithms never call these: the schedule executor does (collective/schedule.h).
  virtual void group_start() {}
  virtual void group_end() {}
  // True when a receive may be posted before the matching send's group exists (host
  // transports buffer by tag); stream-ordered transports say false.
  virtual bool eager_receives() const { return true; }
  // How many steps of a schedule ahead of the one being computed receives may be posted
  // (collective/schedule.h). 0: stream-ordered -- each step's sends and receives are posted as
  // one group (group_start/group_end), a receive never before its send's group. The default
  // follows eager_receives(): no limit for host transports, 0 for stream-ordered ones.
  virtual int lookahead() const { return eager_receives() ? INT_MAX : 0; }
  // Breaks every connection of this transport so that no pending or late transfer can touch
  // memory any more and peers blocked on this rank fail at once (docs/reliability.md). Called
  // after a failed collective; idempotent; the transport is unusable afterwards.
  virtual void abort() {}
  // Releases connections and threads (group shutdown); later posts throw.
  virtual void close() {}
  // The longest round trip to any peer (each peer's the least its connections have seen, as
  // the kernel measured it: TCP's minimum RTT), or 0 where the transport cannot tell: the cost
  // model's probe takes half of it as the delay of a message, which its own rounds cannot time
  // where sends are eager (a rank behind the others finds its messages already there). The
  // longest, not the least: every rank of a group spread over sites has a peer at another site,
  // so every rank sees the long link and its probe sends the same messages (the least put the
  // ranks of a site with a neighbour on the short side, and a site's lone rank on the long one:
  // their probes waited on each other until the timeout); and a call crosses that link.
  virtual double round_trip() const { return 0; }
  // The round trip from which a link counts as long: the cost model takes the part of a
  // message's time beyond half of it for the link's delay (plan/cost.h kMessageCost). A 4 MiB
  // send window carries 6.7 Gbit/s at it.
  static constexpr double kLongRoundTrip = 5e-3;
  // Whether this rank's messages cross a long link (the decisions every rank must take alike:
  // the probe's rounds, exact SRA's segments, the agreement at creation).
  bool long_link() const { return round_trip() >= kLongRoundTrip; }
  // How many connections carry this rank's messages to `peer` (a pool striped by stripes.h): 0
  // for this rank itself.
  virtual int connections(int peer) const { return peer == rank() ? 0 : 1; }
  // The bytes this rank's connections to one peer keep in flight at most (their buffers' share
  // for payload, times the pool), the least over its peers; 0 where no window bounds a
  // transfer the transport knows of. With round_trip() the cost model's Link::inv_window.
  virtual double window_bytes() const { return 0; }
  // Paces the connections so that this rank, streaming to all its peers at once, sends at most
  // `bits_per_s` in all (Options.link_gbit); 0 lifts it. A transport without such control
  // ignores it.
  virtual void pace(double bits_per_s) {}
  // Bytes per second one peer's connections may carry together under pace(); 0: no such bound.
  virtual double peer_rate() const { return 0; }
  // How many of this rank's connections opened their windows in the background when the group
  // was created (a long link whose rate was given: transport/tcp/engine.h, Engine::warm).
  virtual int warmed() const { return 0; }
  // The transport's own collectives (NCCL's), or null (host transports).
  virtual NativeCollectives* native() { return nullptr; }
  // A hand-off between threads of one rank inside a schedule (the node-aware pipeline): point
  // `point` reached, or (reached false) waited for. Only a recording transport cares
  // (transport/loopback/recording.h), so that a replay keeps the threads' order.
  virtual void mark(int64_t point, bool reached) {}
};

// A request that is already complete (zero-byte transfers never touch the network).
class DoneRequest final : public Request {
 public:
  explicit DoneRequest(int source = -1) : source_(source) {}
  void wait(std::chrono::milliseconds) override {}
  int source() const override { return source_; }

 private:
  int source_;
};

}  // namespace ringzip
