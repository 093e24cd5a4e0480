#pragma once
// What one rank of a loopback run did, in order: every post, every wait and every piece of
// element-wise work, so that a simulator can replay the schedule's real messages through a model
// of other links (sim/replay.h). Wraps the rank's Transport and Compute;
// the run itself is unchanged.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/compute.h"
#include "sim/trace.h"
#include "transport/transport.h"

namespace ringzip {

using RankTrace = std::vector<sim::Event>;

// One rank's log: events of all its threads, each tagged with its lane (first thread seen 0).
class RankLog {
 public:
  explicit RankLog(RankTrace& out) : out_(out) {}
  // Appends e from the calling thread; for posts (id < 0 asked) the request's number.
  int64_t add(sim::Event e, bool new_request = false);

 private:
  std::mutex mu_;
  RankTrace& out_;
  std::vector<std::thread::id> lanes_;
  int64_t requests_ = 0;
};

std::unique_ptr<Transport> make_recording_transport(std::unique_ptr<Transport> inner, std::shared_ptr<RankLog> log);
std::unique_ptr<Compute> make_recording_compute(Compute& inner, std::shared_ptr<RankLog> log);

}  // namespace ringzip
