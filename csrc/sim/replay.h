#pragma once
// A discrete-event replay of a recorded call (sim/trace.h) on a model of links and kernels; the
// model and its assumptions: python/ringzip/bench/simulate.py and docs/algorithms.md ("The
// simulator").
#include <array>
#include <vector>

#include "sim/trace.h"

namespace ringzip::sim {

struct Model {
  std::vector<int> machine_of;  // machine of every rank
  double net_bytes_per_s = 1.25e9, net_latency_s = 50e-6;      // each machine's NIC, per direction
  double intra_bytes_per_s = 8e9, intra_latency_s = 5e-6;     // between ranks of a machine, per rank
  // Kernels of all ranks, and the copies that carry messages between ranks of one machine (a
  // sender's into shared memory, a receiver's out of it), share this many cores; 0: one per rank.
  int cores = 0;
  // A kernel of kind k over `amount` with m inputs takes amount * (per_unit[k] + m * per_input[k])
  // + launch seconds.
  std::array<double, kKinds> per_unit{}, per_input{};
  double launch = 0;
  double scale = 1;  // every byte and element count of the trace times this
  // Seconds a send costs the thread that posts it before its bytes move (a system call, a
  // wake-up: LogP's o), paid in turn: n-1 sends of an all-to-all cost n-1 of them.
  double send_overhead = 0;
  // Seconds a received message costs before its receiver sees it (LogP's o at the receiver: a
  // wake-up, the system call that reads it), on a core where cores are counted.
  double recv_overhead = 0;
  // Seconds of CPU each byte between machines costs where the machines share the counted cores
  // (emulated machines on one host: their TCP/IP stacks copy and forward every byte). A chunk
  // leaves once a core is free to start on it; that core is busy for bytes * this.
  double net_cpu_per_byte = 0;
  // A long link: every message between machines also spends `delay_s` on its way (propagation,
  // one way), and one connection has at most `window_bytes` sent and not yet acknowledged, an
  // acknowledgement coming back a round trip (2 x (delay_s + net_latency_s)) after its bytes
  // left: the messages between two ranks, over `pool` connections, have pool x window_bytes in
  // flight at most, however idle their NICs (0: no window).
  double delay_s = 0;
  double window_bytes = 0;
  int pool = 1;
  // A paced link (Options.link_gbit): the messages from one rank to a rank of another machine
  // leave at most at this rate together (bytes/s; 0: unpaced), however idle the sender's NIC.
  double pair_bytes_per_s = 0;
  // Eager sends (ringzip's own TCP transport): a message leaves when its send is posted and waits
  // at its receiver for the receive. Otherwise (Gloo's rendezvous) it leaves once both are posted,
  // a receive posted last sending its ready notice across first.
  bool eager = false;
};

struct Result {
  double time = 0;             // the last rank's finish
  std::vector<double> finish;  // per rank
  double wire_bytes = 0;       // between machines
  double compute = 0;          // kernel seconds of the busiest rank
};

// Throws std::runtime_error when some rank waits for a message nobody sends.
Result replay(const Trace& t, const Model& m);

}  // namespace ringzip::sim
