#pragma once
// The POSIX shared-memory segments of the shm transport (shm_transport.h) and the few OS
// services around them: futex doorbells, process liveness, the sweep of stale segments.
//
// Every rank creates one segment, its inbox: a header, then one single-producer single-consumer
// ring (ring.h) per peer that sends to it. Rank r's segment holds the rings p -> r, so a rank
// reads only from its own segment and writes only into its peers' (first touch places the
// pages near the reader, who touches them most: every byte is read once and freed).
//
//   [SegmentHeader][RingControl x (size-1)][pad to a page][ring data x (size-1)]
//
// The ring of sender s sits in slot s (s < owner) or s-1 (s > owner); no slot for the owner.
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ringzip::shm {

constexpr uint64_t kMagic = 0x315a52474e495221ull;  // "!RINGRZ1"
constexpr uint32_t kVersion = 3;  // 2: acknowledgements of matched messages; 3: Data frames name their place

// Bits of SegmentHeader::state.
constexpr uint32_t kStateClosed = 1;   // the owner closed its transport (peers drain, then fail)
constexpr uint32_t kStateAborted = 2;  // the owner aborted it (peers fail what they wait for)

static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free (address-free)");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex word is a plain 32-bit integer");

struct alignas(64) SegmentHeader {
  // Written by the creator before it publishes the segment's name, read-only afterwards.
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  int32_t size;
  int32_t pid;
  uint64_t start_time;  // of the creating process (/proc/<pid>/stat), against pid reuse
  uint64_t ring_bytes;  // data bytes of each ring
  uint64_t total_bytes;
  // Each word that changes at run time sits on a cache line of its own: the read-mostly state
  // must not bounce with the doorbell.
  alignas(64) std::atomic<uint32_t> state;
  // The owner's doorbell: whoever may have unblocked the owner (new frames in its inbox, space
  // freed in a ring it writes to, an abort) bumps it, then wakes it when `sleepers` > 0.
  alignas(64) std::atomic<uint32_t> bell;
  alignas(64) std::atomic<uint32_t> sleepers;  // owner threads inside (or entering) futex_wait
};

struct alignas(64) RingControl {
  alignas(64) std::atomic<uint64_t> head;  // bytes the producer published (monotonic)
  alignas(64) std::atomic<uint64_t> tail;  // bytes the consumer released (monotonic)
  // Messages the consumer matched with a posted receive: slot n % kAckSlots holds n (messages
  // are numbered from 1 per ring). A send completes only then, as on Gloo, so calls that differ
  // between ranks stall (and check="auto" names them) instead of completing on both sides
  // without a byte received; a sender keeps fewer than kAckSlots messages unacknowledged.
  static constexpr size_t kAckSlots = 4096;
  alignas(64) std::atomic<uint64_t> acks[kAckSlots];
};

// Offsets inside a segment of `size` ranks with rings of `ring_bytes`.
struct Layout {
  int size;
  size_t ring_bytes;
  size_t controls() const { return sizeof(SegmentHeader); }
  size_t data() const;
  size_t total() const { return data() + static_cast<size_t>(size - 1) * ring_bytes; }
  // The slot of sender `from` in the segment of `owner`.
  static int slot(int owner, int from) { return from < owner ? from : from - 1; }
};

// A mapped segment; unmaps on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~Mapping() { reset(); }
  Mapping(Mapping&& o) noexcept : base_(o.base_), bytes_(o.bytes_) { o.base_ = nullptr; }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  void reset();
  char* base() const { return static_cast<char*>(base_); }
  size_t bytes() const { return bytes_; }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }
  RingControl* control(int slot) const { return reinterpret_cast<RingControl*>(base() + sizeof(SegmentHeader)) + slot; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// A new, unique name: /ringzip-<pid>-<pid namespace>-<random>.
std::string new_segment_name();
// Creates, reserves (posix_fallocate: a full /dev/shm fails here with ENOSPC, never later with
// SIGBUS) and maps a segment; throws std::runtime_error naming the cause.
Mapping create_segment(const std::string& name, size_t bytes);
// Maps an existing segment read-write; throws std::runtime_error naming the cause.
Mapping open_segment(const std::string& name);
void unlink_segment(const std::string& name) noexcept;
// Unlinks /dev/shm/ringzip-<pid>-<ns>-* left by processes of this pid namespace that are gone
// (a crash between creating a segment and the rendezvous that unlinks it). Returns how many.
int sweep_stale_segments() noexcept;

// Start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat); 0 when
// unknown.
uint64_t process_start_time(pid_t pid) noexcept;
// True when the process is gone for sure: no such pid, a zombie, or the pid now belongs to a
// process started at another time (`start_time` 0: not compared).
bool process_gone(pid_t pid, uint64_t start_time) noexcept;

// Sleeps while *word == expected, at most `timeout` (spurious wake-ups are allowed).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) noexcept;
void futex_wake_all(std::atomic<uint32_t>* word) noexcept;
// Bumps a rank's doorbell and wakes its sleepers, if any. The bump must follow the stores that
// it announces: a sleeper reads the bell before it looks for work and sleeps only while the
// bell still holds that value, so either it sees the work or the bump changes the bell.
inline void ring_bell(SegmentHeader* h) noexcept {
  h->bell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(&h->bell);
}

}  // namespace ringzip::shm
