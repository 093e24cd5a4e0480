#pragma once
// In-process loopback transport: the ranks of a group are threads of one process sharing a
// LoopbackHub, so every schedule runs with many ranks in one test process (DESIGN.md §7).
//
// Two modes, one per kind of real transport:
//  - Eager (like Gloo): a receive may be posted at any time and is matched with a send of
//    the same (peer, tag), in posting order among those; receive from any source is allowed.
//    A send completes when it was copied into its receive. A receive smaller than the send
//    fails both with an error naming both sides (never a partial write).
//  - Grouped (like NCCL behind NcclTransport): tags are ignored, the i-th send from a to b
//    meets the i-th receive at b from a. Posts inside group_start()/group_end() form one
//    group; posts outside a group are held back and form one group at the next wait() or
//    group_start() (NcclTransport's rule). Each rank runs its groups in order, like kernels
//    on one stream: a group starts when the one before it has completed and transfers only
//    between started groups. So a receive whose send sits in a later group of the peer
//    deadlocks, as on NCCL. Sizes of matched operations must be equal; receive from any
//    source is refused.
//  Both modes: zero-byte posts complete at once and never reach the hub (as on Gloo and
//  NcclTransport). When every rank that has not closed waits for something that cannot
//  happen any more, the hub reports the deadlock at once to all of them, listing what each
//  rank waits for and what it has pending; a wait also fails when its timeout elapses.
//  abort() fails every pending and later operation of every rank; close() ends a rank.
//  Dropping an unfinished request (no wait) cancels it, and fails the hub unless it had
//  already failed: the real transports could still touch the buffer.
#include <memory>
#include <string>

#include "transport/transport.h"

namespace ringzip {

enum class LoopbackMode { Eager, Grouped };

LoopbackMode parse_loopback_mode(const std::string& s);  // "eager" or "grouped"

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

  struct State;  // loopback_transport.cc

 private:
  friend class LoopbackTransport;
  std::shared_ptr<State> s_;
};

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
  void group_start() override;
  void group_end() override;
  bool eager_receives() const override;
  void abort() override;
  void close() override;

 private:
  std::shared_ptr<LoopbackHub> hub_;
  int rank_;
};

}  // namespace ringzip
