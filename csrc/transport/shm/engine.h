#pragma once
// The progress engine of the shm transport: posted sends and receives of one rank, moved
// through the rings of its mapped segments (segment.h, ring.h).
//
// Progress is driven by whichever thread waits (MPI's model): a wait() runs passes over every
// peer under the engine's mutex -- read every frame that arrived, write as much of the posted
// sends as the rings take -- until its own request finished, so no thread spins in the
// background on a machine whose cores the ranks share. Between passes that moved nothing it
// spins briefly, then sleeps on its rank's doorbell (a futex in shared memory that peers bump
// after writing frames for it or freeing space it waits for), in slices that bound how late
// it notices its deadline or a dead peer (pid check).
//
// Matching: a receive takes the oldest message of its (peer, tag). A message whose receive is
// not posted yet stays in its ring while nothing else from that peer is posted (the receive
// usually follows soon: then it lands in place, one copy, no heap). It is buffered in heap
// memory (whole; a receive posted later takes what arrived and the rest streams in place)
// when a receive of that peer is posted -- it may wait behind this message -- or when a wait
// has stayed idle for 50 ms, so a peer may send tags in any order and two ranks
// that both send before they receive never deadlock. Sizes must be equal: a message of another
// size than its receive fails that receive (both sizes named) and is discarded.
//
// A send is complete once all its bytes are in the ring and the receiver matched the message
// with a posted receive (it acknowledges in the ring's control, RingControl::acks), as on Gloo.
//
// A progress thread moves what is posted while no thread of this rank waits on the transport
// (say, it waits on Gloo for a peer on another node, transport/routed.h): a message larger than
// the ring then still streams out as the receiver frees space, and messages from peers are
// matched (acknowledged) while this rank is busy elsewhere. It touches the rings only while
// work is pending, no waiter is inside and none came within 500 us of the post.
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <condition_variable>
#include <thread>
#include <vector>

#include "transport/shm/rank_names.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"

namespace ringzip::shm {

struct Op {
  enum class State { Pending, Done, Failed };
  bool send;
  int peer;
  uint32_t tag;
  char* data;
  size_t bytes;
  size_t done = 0;      // bytes moved
  uint64_t number = 0;  // send: its message number in the ring to `peer` (RingControl::acks)
  State state = State::Pending;
  std::string error;  // why it failed
};

class Engine {
 public:
  // `own`: this rank's segment, initialized; `peers[p]`: rank p's segment (empty for rank).
  Engine(int rank, int size, size_t ring_bytes, Mapping own, std::vector<Mapping> peers, RankNames names = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Post a transfer of bytes > 0; throws when the transport or that peer can no longer be used.
  std::shared_ptr<Op> post_send(const void* data, size_t bytes, int peer, uint32_t tag);
  std::shared_ptr<Op> post_recv(void* data, size_t bytes, int peer, uint32_t tag);
  // Progresses everything until `op` finished; throws std::runtime_error on its failure or when
  // `timeout` elapsed (the op stays posted: a later wait may still complete it).
  void wait(Op& op, std::chrono::milliseconds timeout);
  // A request dropped unfinished: its buffer may go away, so the engine must never touch it
  // again -- aborts the transport (as the loopback hub fails on a dropped request).
  void drop(Op& op) noexcept;
  void abort() noexcept;
  void close() noexcept;

 private:
  struct Unexpected;
  struct Peer;

  [[noreturn]] void raise(const std::string& what) const;
  Peer& peer_of(int peer, const char* what);
  void check_open() const;
  bool progress(bool rescue);
  bool drain(Peer& p, bool rescue);
  bool push(Peer& p);
  bool begin_message(Peer& p, const FrameHeader& h);
  void take(Peer& p, std::shared_ptr<Unexpected> u, const std::shared_ptr<Op>& op);
  void complete(Op& op);
  void fail(Op& op, const std::string& why);
  void peer_gone(Peer& p, const std::string& why);
  void watch_peers();
  void acknowledge(Peer& p, uint64_t number);
  bool check_acks(Peer& p);
  bool pending() const;
  void background();
  void wake_thread();
  void sleep_on_bell(std::unique_lock<std::mutex>& lk, uint32_t seq, std::chrono::steady_clock::duration nap);
  void shut(uint32_t state_bit, const std::string& why);
  void release_memory();
  std::string describe(const Op& op) const;

  std::string who(int r) const;  // rank r as messages name it
  const int rank_, size_;
  RankNames names_;
  const size_t ring_bytes_, max_frame_, min_frame_;
  const std::chrono::nanoseconds spin_;
  std::mutex mu_;
  Mapping own_;
  SegmentHeader* me_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; null for this rank
  std::string shut_;                          // why the transport is unusable; empty while open
  bool closed_ = false;
  int in_wait_ = 0;  // threads inside wait(): they may touch the segments
  int local_sleepers_ = 0;
  bool completed_ = false;  // a pass finished some op (local sleepers may want it)
  bool parked_ = false;     // the last pass left an unposted message in a ring
  std::chrono::steady_clock::time_point last_watch_;
  std::atomic<bool> interrupt_{false};  // abort/close: stop copying between frames
  std::condition_variable idle_cv_;     // wakes the progress thread: work while no waiter
  bool stop_thread_ = false;
  bool thread_parked_ = false;  // the progress thread sleeps until wake_thread()
  std::thread thread_;          // background(); started last, joined by close()
};

}  // namespace ringzip::shm
