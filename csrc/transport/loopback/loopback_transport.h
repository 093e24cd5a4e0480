#pragma once
// In-process loopback transport: the ranks of a group are threads of one process sharing a
// LoopbackHub, so every schedule runs with many ranks in one test process.
//
// Two modes, one per kind of real transport:
//  - Eager (like Gloo): a receive may be posted at any time and is matched with a send of
//    the same (peer, tag), in posting order among those; receive from any source is allowed.
//    A send completes when it was copied into its receive. A receive smaller than the send
//    fails both with an error naming both sides (never a partial write).
//  - Grouped (like NCCL): LoopbackGroupedTransport posts with NcclTransport's own code
//    (transport/grouped.h: groups, posts outside a group held back until the next wait() or
//    group_start(), no lookahead); tags are ignored, the i-th send from a to b meets the i-th
//    receive at b from a. Each rank runs its groups in order, like kernels
//    on one stream: a group starts when the one before it has completed and transfers only
//    between started groups. So a receive whose send sits in a later group of the peer
//    deadlocks, as on NCCL. Sizes of matched operations must be equal; receive from any
//    source is refused.
//  - Gloo: eager, and a rank that posts its receive from a peer after its send to that peer
//    under the same tag fails at once. Gloo queues a pair's messages in posting order, the
//    receive's ready notice included, and sends a payload only once the peer's notice came:
//    such an exchange waits for one direction's payload before the other starts.
//  All modes: zero-byte posts complete at once and never reach the hub (as on Gloo and
//  NcclTransport). When every rank that has not closed waits for something that cannot
//  happen any more, the hub reports the deadlock at once to all of them, listing what each
//  rank waits for and what it has pending; a wait also fails when its timeout elapses.
//  abort() fails every pending and later operation of every rank; close() ends a rank.
//  Dropping an unfinished request (no wait) cancels it, and fails the hub unless it had
//  already failed: the real transports could still touch the buffer.
#include <memory>
#include <string>

#include "transport/grouped.h"
#include "transport/transport.h"

namespace ringzip {

enum class LoopbackMode { Eager, Grouped, Gloo };

LoopbackMode parse_loopback_mode(const std::string& s);  // "eager", "grouped" or "gloo"

class LoopbackHub {
 public:
  LoopbackHub(int size, LoopbackMode mode);
  ~LoopbackHub();
  LoopbackHub(const LoopbackHub&) = delete;
  LoopbackHub& operator=(const LoopbackHub&) = delete;
  int size() const;
  LoopbackMode mode() const;
  // Why the hub stopped (deadlock, abort, a dropped request); empty while it works.
  std::string failure() const;
  // What its transports report as Transport::round_trip (seconds; set before they run): a test
  // runs the schedules a long link gets (exact SRA's segments) with no delay at all.
  double round_trip = 0;

  struct State;  // loopback_transport.cc

 private:
  friend class LoopbackTransport;
  friend class LoopbackGroupedTransport;
  std::shared_ptr<State> s_;
};

// The transport of `rank` on the hub, of the hub's mode.
std::unique_ptr<Transport> make_loopback_transport(std::shared_ptr<LoopbackHub> hub, int rank);

// Eager and Gloo modes.
class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<LoopbackHub> hub, int rank);
  ~LoopbackTransport() override;  // close()
  int rank() const override { return rank_; }
  int size() const override;
  std::string name() const override;
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) override;
  void abort() override;
  void close() override;
  double round_trip() const override { return hub_->round_trip; }

 private:
  std::shared_ptr<LoopbackHub> hub_;
  int rank_;
};

// Grouped mode: a wait() completes everything issued, in issue order, as a stream would.
class LoopbackGroupedTransport final : public GroupedTransport {
 public:
  LoopbackGroupedTransport(std::shared_ptr<LoopbackHub> hub, int rank);
  ~LoopbackGroupedTransport() override;  // close()
  int rank() const override { return rank_; }
  int size() const override;
  std::string name() const override { return "loopback-grouped"; }
  // Posting on a closed or failed hub fails at once, as in eager mode (not at the next wait).
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override;
  void abort() override;
  void close() override;
  double round_trip() const override { return hub_->round_trip; }

 private:
  void issue(const std::vector<Op>& group) override;
  void complete(std::chrono::milliseconds timeout) override;
  void check_open() const;

  std::shared_ptr<LoopbackHub> hub_;
  int rank_;
  std::vector<std::unique_ptr<Request>> issued_;  // not yet waited for
};

}  // namespace ringzip
