#pragma once
// Connections a closed group leaves to the next one between the same processes.
//
// Why: a new TCP connection starts at the initial window and needs many round trips to carry a
// long link's rate; torchft rebuilds its process group at every membership change, and a new
// group that opened new connections paid that ramp at its first calls (several times a warm
// call at a 100 ms round trip). A connection that was healthy and idle when its group closed
// keeps its window; the next group between the same two processes takes it over.
//
// Protocol, per connection (either end): when its group closes cleanly an end sends a release
// frame after its last message and stops reading; the end that connects in the new group (the
// higher rank) waits for the other end's release, then sends its greeting on the same socket,
// and the other end (the lower rank) takes a greeting from a kept socket as it takes one from a
// new connection. An end that aborted, failed or exited closes the socket instead; a kept socket
// that reports end-of-file, an error, or anything but these frames is closed and forgotten.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/tcp/wire.h"

namespace ringzip::tcp {

// This process's identity among its peers' kept connections (random, fixed for its life).
uint64_t process_key();

struct Kept {
  int fd = -1;
  uint64_t peer = 0;       // the peer's process_key()
  bool released = false;   // the peer's release frame was read
  size_t got = 0;          // bytes of the frame being read
  unsigned char buf[sizeof(Hello)] = {};
  bool greeted = false;    // `hello` holds a greeting read for a group being built
  Hello hello{};

  // Reads what arrived (non-blocking): the release frame, then a greeting. false: the
  // connection is unusable (closed, failed, or a stream that is not the protocol's).
  bool advance();
};

// The process-wide set of kept connections (bounded: the oldest go first).
namespace kept {
void put(std::vector<Kept> connections);
// Up to `n` kept connections to process `peer`, taken out of the set.
std::vector<Kept> take_to(uint64_t peer, size_t n);
// Every kept connection not greeted for another group than `group`, taken out of the set.
std::vector<Kept> take_for(uint64_t group);
size_t count();
}  // namespace kept

}  // namespace ringzip::tcp
