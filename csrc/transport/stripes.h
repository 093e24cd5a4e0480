#pragma once
// How a message is cut over a pool of connections to its peer (transport/gloo/, transport/tcp/):
// both ends compute the cut from what both know -- the size, the tag, the pool, and whether the
// ranks agreed on a long round trip -- so no header says it (docs/design.md, "Filling a long link").
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ringzip {

// Stripes are at least this long: below it a connection's per-message cost outweighs what a
// second window adds.
constexpr size_t kStripeMin = 512 << 10;
// Tags of collectives lie at and above this (collective/comm.h); user point-to-point below.
constexpr uint32_t kCollectiveTags = 1u << 30;

// How many connections a message travels over: one for user point-to-point, on a short link
// (one connection's window is not the limit there, and stripes only cost) and for messages
// under 2 x kStripeMin.
inline size_t stripe_count(size_t bytes, uint32_t tag, size_t pool, bool long_link) {
  if (tag < kCollectiveTags || pool < 2 || !long_link) return 1;
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
