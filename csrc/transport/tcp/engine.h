#pragma once
// The TCP transport's progress engine: the connected sockets of one rank (a pool of them to every
// peer), the sends and receives posted on them, and one thread that moves the bytes.
//
// Wire: each connection carries messages, each a 24-byte header (its tag, size and number on
// the connection) and the bytes. Sends are eager: a message goes out as soon as it is posted,
// whether or not its receive is, and the send is complete once the kernel took all of it (on a
// long link a send that waited for its receive to be posted, as Gloo's does, would wait a round
// trip). The receiver matches it on its header -- the oldest posted receive of that
// (connection, tag), else a receive from any source of that tag (first connection of the pool
// only), else it is kept in heap memory until a receive takes it. Sizes of a message and its
// receive must be equal (else the receive fails naming both, and the message is discarded).
//
// Threads: one I/O thread per engine (epoll over every socket and an eventfd), level-triggered.
// Posts write what the socket takes at once, so an idle link costs no wake-up; the thread
// writes the rest as the sockets drain and reads everything that arrives, straight into the
// posted receive's buffer when there is one. Every touch of a caller's buffer happens under the
// engine's mutex, so abort() -- which takes it, fails every pending operation and shuts every
// socket -- leaves no transfer that can still land in memory.
//
// Failures: a connection that reports end-of-file or an error fails every operation on it that is
// not complete, at once, naming the peer; later posts on it fail the same way (a receive still
// takes a message that arrived whole before: a peer that finished and left is no error). An
// operation that failed is never touched again, whatever of it is still queued or streaming in
// (its buffer may be gone): a message meant for it is read into a sink. abort() shuts every
// socket, so peers blocked on this rank fail at once too.
//
// Closing: close() keeps every connection that is idle and healthy for the next group between
// the same processes (kept.h): it sends a release frame on it and hands the socket over instead
// of closing it. A release frame from the peer ends the connection for this group as a close
// would (what is posted on it fails), but leaves the socket to be kept.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ringzip::tcp {

struct Op {
  bool send;
  int peer;  // receive from any source: -1 until matched
  uint32_t tag;
  size_t bytes;
  int pending = 0;  // parts (stripes) not finished
  bool failed = false;
  std::string error;
  bool finished() const { return failed || pending == 0; }
};

class Engine {
 public:
  // sockets[p][m]: connection m to peer p, connected and greeted (empty for this rank);
  // processes[p]: peer p's process_key() (kept.h).
  Engine(int rank, int size, std::vector<std::vector<int>> sockets, std::vector<uint64_t> processes);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // How many connections carry messages to `peer` (its pool; 0 for this rank).
  size_t pool(int peer) const { return conns_.at(peer).size(); }
  // A message of bytes > 0 cut into as many parts as stripes.h gives for the peer's pool, part
  // i on connection i. A post to a peer that is gone returns an operation already failed.
  std::shared_ptr<Op> post_send(const void* data, size_t bytes, int peer, uint32_t tag);
  std::shared_ptr<Op> post_recv(void* data, size_t bytes, int peer, uint32_t tag);
  std::shared_ptr<Op> post_recv_any(void* data, size_t bytes, uint32_t tag);
  // Until `op` finished; throws std::runtime_error on its failure or when `timeout` elapsed
  // (the op stays posted).
  void wait(const Op& op, std::chrono::milliseconds timeout);
  // A request dropped unfinished: its buffer may go away, so nothing may touch it again --
  // aborts the engine (as the shm transport does).
  void drop(const Op& op) noexcept;
  void abort(const std::string& why) noexcept;
  // Paces every connection to a peer to its share of `bytes_per_s` (the kernel's
  // SO_MAX_PACING_RATE, which TCP honours without the fq qdisc); 0 lifts it.
  void pace(double bytes_per_s);
  // The longest of the peers' round trips, each the least minimum round trip (TCP_INFO) of its
  // connections, in seconds; 0 if none knows (Transport::round_trip).
  double round_trip() const;
  // Opens the windows of connections over a long link (a round trip of Transport::kLongRoundTrip
  // or more): each connection to a peer whose congestion window is below its share of what the
  // pair's rate `pair_rate` (bytes/s) keeps in flight over its round trip (split over the pair's
  // pool; at most `window`, what one connection can keep in flight) is sent that share, which
  // the peer discards, ahead of anything posted later.
  // A new connection's window grows a round trip at a time as its bytes are acknowledged; so it
  // grows while the group's creator does other work, not in the group's first calls. Returns
  // how many connections it warms.
  int warm(double pair_rate, double window);
  // Stops the thread; pending operations fail. Idle, healthy connections are kept for the next
  // group (kept.h), the others closed.
  void close() noexcept;

 private:
  struct Part;
  struct Unexpected;
  struct Conn;

  void run();
  void wake() noexcept;
  void check_open() const;
  std::string describe(const Op& op) const;
  void write_some(Conn& c);
  void read_some(Conn& c);
  void on_frame(Conn& c);
  void begin_message(Conn& c);
  void end_message(Conn& c);
  void take(Conn& c, const std::shared_ptr<Unexpected>& u, const std::shared_ptr<Part>& p);
  void want_writes(Conn& c, bool on);
  void finish(Part& p);
  void fail(Op& op, const std::string& why);
  void close_conn(Conn& c, const std::string& why);
  void end_conn(Conn& c, const std::string& why);
  void on_release(Conn& c);
  bool keep(Conn& c);
  void shut(const std::string& why);

  const int rank_, size_;
  const std::vector<uint64_t> processes_;
  std::vector<std::vector<std::unique_ptr<Conn>>> conns_;  // [peer][member]
  std::map<uint32_t, std::deque<std::shared_ptr<Part>>> any_;  // receives from any source, by tag
  uint64_t arrivals_ = 0;                                  // orders unexpected messages across peers
  std::vector<char> sink_ = std::vector<char>(64 << 10);   // where a message nobody takes goes
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  std::string shut_;  // why the engine is unusable; empty while open
  bool closed_ = false;
  int epoll_ = -1, event_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ringzip::tcp
