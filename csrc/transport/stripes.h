#pragma once
// How a message is cut over a pool of connections to its peer (transport/gloo/, transport/tcp/):
// both ends compute the cut from what both know -- the size, the tag and the pool, whose size
// rank 0's options fix for the group -- so no header says it (docs/design.md, "Filling a long
// link"). Nothing else decides it (no measured round trip): a call with an algorithm named runs
// no probe, and its stripes must still be cut alike at both ends.
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ringzip {

// Stripes are at least this long: below it a connection's per-message cost outweighs what a
// second window adds.
constexpr size_t kStripeMin = 512 << 10;
// Tags of collectives lie at and above this (collective/comm.h); user point-to-point below.
constexpr uint32_t kCollectiveTags = 1u << 30;

// How many connections a message travels over: one for user point-to-point and for messages
// under 2 x kStripeMin.
inline size_t stripe_count(size_t bytes, uint32_t tag, size_t pool) {
  if (tag < kCollectiveTags || pool < 2) return 1;
  return std::clamp<size_t>(bytes / kStripeMin, 1, pool);
}

// Stripe i of k: [begin, begin + length) of the message.
struct Stripe {
  size_t begin, length;
};
inline Stripe stripe_of(size_t bytes, size_t k, size_t i) {
  const size_t base = bytes / k, extra = bytes % k;
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

}  // namespace ringzip
