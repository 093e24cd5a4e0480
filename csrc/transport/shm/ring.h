#pragma once
// One single-producer single-consumer byte ring in shared memory, carrying frames.
//
// A frame is a 32-byte header and its payload, padded to 64 bytes so that every header starts
// a cache line; frames never wrap: when the end of the ring is too short, the producer writes
// a Wrap frame that sends the consumer back to the start. `head` and `tail` count bytes since
// the start (they never wrap; 2^64 bytes is centuries of traffic). The producer copies a frame
// in, then publishes it with a release store of head; the consumer acquires head, reads the
// frame and releases its bytes with a store of tail. Only whole frames are ever visible.
// Each side trusts only the word it owns: a tail the producer loads that is ahead of its head,
// more than a ring behind it or behind the last one seen was not stored by the consumer, and
// the consumer checks that its tail is still the one it stored before it takes a frame's bytes
// (a tail moved by someone else lets the producer overwrite frames not yet read).
//
// A message is a Message frame (tag, total size, first bytes) followed by Data frames with the
// rest, in order, nothing else in between: a ring is one ordered stream, so at most one message
// is in flight per ordered pair of ranks. Each Data frame still names its message and where its
// payload starts in it, and a frame's payload is written before its header: a consumer led past
// the published head (a head overwritten in memory) finds only stale frames of earlier laps or
// frames not yet written, and the engine refuses both (engine.cc drain) instead of taking their
// bytes as data.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/shm/segment.h"

namespace ringzip::shm {

enum class FrameKind : uint32_t { Message = 0x4d534731, Data = 0x44415431, Wrap = 0x57524150 };

struct FrameHeader {
  FrameKind kind;
  uint32_t tag;
  uint64_t payload;  // bytes after the header in this frame
  uint64_t total;    // Message: bytes of the whole message; Data: where its payload starts in the message
  uint64_t number;   // the message's number in this ring (from 1; RingControl::acks), in its Data frames too
};
static_assert(sizeof(FrameHeader) == 32);

constexpr size_t kFrameAlign = 64;
constexpr size_t frame_bytes(size_t payload) {
  return (sizeof(FrameHeader) + payload + kFrameAlign - 1) / kFrameAlign * kFrameAlign;
}

class Producer {
 public:
  Producer() = default;
  Producer(RingControl* ctl, char* data, size_t cap) : ctl_(ctl), data_(data), cap_(cap) {}
  RingControl* control() const { return ctl_; }

  // How many payload bytes (at most `want`, at least `least`, 1 <= least <= want) one frame can
  // carry now; 0 when the ring has not room for `least`. Writes a Wrap frame when only the
  // start of the ring has room. Returns 0 with `corrupt` set when the consumer's tail is one it
  // cannot have stored; the caller stops writing to this ring.
  size_t room(size_t want, size_t least, bool& corrupt) {
    corrupt = false;
    for (int pass = 0; pass < 2; ++pass) {
      if (cap_ - (head_ - tail_) < frame_bytes(least)) {
        const uint64_t seen = ctl_->tail.load(std::memory_order_acquire);
        if (seen < tail_ || head_ - seen > cap_) {
          corrupt = true;
          return 0;
        }
        tail_ = seen;
      }
      const size_t free = cap_ - (head_ - tail_);
      const size_t contig = cap_ - head_ % cap_;
      const size_t room = std::min(free, contig);
      if (room >= frame_bytes(least)) return std::min(want, room - sizeof(FrameHeader));
      if (contig >= free) return 0;  // wrapping would not help: wait for the consumer
      put_header(FrameKind::Wrap, 0, 0, 0, 0);
      head_ += contig;
      ctl_->head.store(head_, std::memory_order_release);
    }
    return 0;
  }

  // Writes and publishes one frame; `n` must not exceed what room() allowed. The payload first:
  // a header that names this frame is never ahead of its bytes.
  void write(FrameKind kind, uint32_t tag, uint64_t total, uint64_t number, const void* src, size_t n) {
    std::memcpy(data_ + head_ % cap_ + sizeof(FrameHeader), src, n);
    std::atomic_thread_fence(std::memory_order_release);
    put_header(kind, tag, n, total, number);
    head_ += frame_bytes(n);
    ctl_->head.store(head_, std::memory_order_release);
  }

 private:
  void put_header(FrameKind kind, uint32_t tag, uint64_t payload, uint64_t total, uint64_t number) {
    FrameHeader h{kind, tag, payload, total, number};
    std::memcpy(data_ + head_ % cap_, &h, sizeof h);
  }

  RingControl* ctl_ = nullptr;
  char* data_ = nullptr;
  size_t cap_ = 0;
  uint64_t head_ = 0;  // ours to write
  uint64_t tail_ = 0;  // the consumer's, as last seen
};

class Consumer {
 public:
  Consumer() = default;
  Consumer(RingControl* ctl, char* data, size_t cap) : ctl_(ctl), data_(data), cap_(cap) {}
  RingControl* control() const { return ctl_; }

  // The next frame (Wrap frames are skipped here), or false when the ring is empty. A header
  // that cannot be a frame of this ring (a peer writing garbage) returns true with
  // `corrupt` set; the caller stops reading this ring.
  bool next(FrameHeader& h, const char*& payload, bool& corrupt) {
    corrupt = false;
    for (;;) {
      if (tail_ == head_) {
        head_ = ctl_->head.load(std::memory_order_acquire);
        if (tail_ == head_) return false;
        if (head_ - tail_ > cap_) {  // more than a ring ahead (or behind): no head the producer stored
          h = FrameHeader{};
          payload = nullptr;
          corrupt = true;
          return true;
        }
      }
      const size_t at = tail_ % cap_;
      std::memcpy(&h, data_ + at, sizeof h);
      std::atomic_thread_fence(std::memory_order_acquire);  // the payload is read after its header
      if (h.kind == FrameKind::Wrap) {
        if (release_bytes(cap_ - at)) continue;
        corrupt = true;
        return true;
      }
      corrupt = (h.kind != FrameKind::Message && h.kind != FrameKind::Data) ||
                h.payload > cap_ - at - sizeof(FrameHeader) || frame_bytes(h.payload) > head_ - tail_;
      payload = data_ + at + sizeof(FrameHeader);
      return true;
    }
  }

  // Frees the frame that next() returned, once its bytes were read; false (nothing freed) when
  // the tail in shared memory is not the one this consumer stored: the producer may have
  // written over the frame while it was read.
  bool release(const FrameHeader& h) { return release_bytes(frame_bytes(h.payload)); }

 private:
  bool release_bytes(size_t n) {
    std::atomic_thread_fence(std::memory_order_acquire);  // the frame's bytes are read before the check
    if (ctl_->tail.load(std::memory_order_relaxed) != tail_) return false;
    tail_ += n;
    ctl_->tail.store(tail_, std::memory_order_release);
    return true;
  }

  RingControl* ctl_ = nullptr;
  char* data_ = nullptr;
  size_t cap_ = 0;
  uint64_t tail_ = 0;  // ours to write
  uint64_t head_ = 0;  // the producer's, as last seen
};

}  // namespace ringzip::shm
