#pragma once
// What the TCP transport puts on a connection: a greeting when a group takes the connection
// (new, or kept from a group before: kept.h), then messages, each a frame header and its bytes,
// and a release frame when the group closes cleanly. A connection over a long link may also
// carry warm-up frames, whose bytes nobody receives (engine.h, Engine::warm).
#include <cstdint>

namespace ringzip::tcp {

constexpr uint32_t kHello = 0x33485a52;    // "RZH3"
constexpr uint32_t kData = 0x31445a52;     // "RZD1": a message of `bytes` bytes follows
constexpr uint32_t kRelease = 0x31525a52;  // "RZR1": the sender's group closed; nothing follows for it
constexpr uint32_t kWarm = 0x31575a52;     // "RZW1": `bytes` bytes follow that open a new connection's window (discarded)

struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint32_t member;
  uint32_t size;
  uint64_t process;  // the sender's process_key() (kept.h)
  uint64_t group;    // the group's token (rank 0's, from its published address)
  uint32_t pool;     // how many connections the sender opens to the receiver in this group (connect.h)
  uint32_t unused = 0;
};
static_assert(sizeof(Hello) == 40, "the greeting is 40 bytes on the wire");

struct Frame {
  uint32_t kind;
  uint32_t tag;
  uint64_t bytes;
  uint64_t seq;  // the frame's number on its connection in this group: 1, 2, ... (a gap is a corrupted stream)
};
static_assert(sizeof(Frame) == 24, "the frame header is 24 bytes on the wire");

}  // namespace ringzip::tcp
