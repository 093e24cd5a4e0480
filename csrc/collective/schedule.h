#pragma once
// An algorithm is a schedule; the transport decides how it executes (docs/algorithms.md,
// "Schedules and executors").
//
// A schedule is a sequence of steps. Step s lists the receives it needs (peer, bytes, where
// they land, tag step) and has a body: the compute of the step (reduce, encode, decode-
// accumulate, ...) between waits for those receives, and the sends it makes. One rule ties the
// steps of all ranks together: a send made by the body of step s is received by its peer in
// step s + lag (the peer lists it among step s + lag's receives; Schedule::lag, 1 unless the
// schedule runs sends ahead on an eager transport). Everything else belongs to the
// executor, which follows what the transport declares (Transport::lookahead()):
//  - eager (host transports, matching by tag): a send is posted the moment the body makes it,
//    and the receives of up to `lookahead` steps ahead are posted before a body runs, so the
//    next step's data lands while this one computes (double buffering);
//  - grouped (lookahead 0: stream-ordered transports such as NCCL, matching by posting order,
//    sends progressing only inside a group): step s's sends and receives -- those made by body
//    s-1 and those listed for step s -- are posted as one group, in tag order on every rank,
//    and nothing is posted ahead.
// Both run the same bodies in the same order on the same data, so they compute the same bits.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "collective/comm.h"

namespace ringzip {

// One transfer: `bytes` at `data` to or from `peer`, under tag step `step` (Comm::tag). Two
// transfers between the same pair of ranks with the same step are matched in posting order.
struct Xfer {
  void* data;
  size_t bytes;
  int peer;
  uint32_t step;
  const char* what;  // names the transfer in errors: "ring receive from"
};

class Executor;

// What a step's body may do.
class Step {
 public:
  int index() const { return s_; }
  // Waits for receive i of this step (the order of Schedule::recvs), or of an earlier step.
  void wait(size_t i) { wait(s_, i); }
  void wait(int step, size_t i);
  // Sends `bytes` at `data`; the peer receives it in step index() + Schedule::lag. The buffer must stay
  // untouched until a later step's sends_done().
  void send(const void* data, size_t bytes, int peer, uint32_t step, const char* what);
  // Waits until every send made by earlier steps completed, so that their buffers may change.
  void sends_done();
  // Says the buffers step index() + 1 receives into are free from here on: an eager executor
  // posts that step's receives now, before this body's sends, for schedules that cannot post
  // ahead (Schedule::ahead 0). Over Gloo a pairwise exchange whose two sides both send before
  // either posts its receive runs one direction at a time: half the link's rate (16 MiB between
  // two ranks over 1 Gbit/s: 270 ms sends first, 142 ms receives first).
  void receive_next();

 private:
  friend class Executor;
  Step(Executor& x, int s) : x_(x), s_(s) {}
  Executor& x_;
  int s_;
};

struct Schedule {
  static constexpr int kAnyAhead = INT_MAX;
  int steps = 0;
  // How far ahead the receive buffers allow receives to be posted: a receive of step s + k may
  // land before body s ran only for k <= ahead (e.g. 1 with two alternating buffers; 0 when each
  // step reuses one buffer; kAnyAhead when every receive has a place of its own).
  int ahead = kAnyAhead;
  // The steps between a send and its receive: more than 1 lets a body's sends run that many
  // steps ahead of the waits for them (a long link's delay then overlaps across steps). Eager
  // executors only: a grouped one posts body s's sends with step s + 1's receives.
  int lag = 1;
  // Appends the receives of step s.
  std::function<void(int s, std::vector<Xfer>& recvs)> recvs;
  std::function<void(int s, Step& step)> body;
};

// How many steps ahead receives will be posted for a schedule whose buffers allow `cap`: size
// alternating buffers as lookahead(c, cap) + 1.
int lookahead(const Comm& c, int cap);

// Runs the schedule to its end (every send completed). Failures throw through Comm (the
// transport is aborted, the error names the op, rank and peer).
void run(Comm& c, const Schedule& schedule);

// The simplest schedule: one round in which every send and receive is posted together (on a
// grouped transport, one group); returns once all completed.
void run_exchange(Comm& c, const std::vector<Xfer>& sends, const std::vector<Xfer>& recvs);

}  // namespace ringzip
