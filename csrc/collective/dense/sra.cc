// Scatter-reduce-allgather, exact: part p of every rank's buffer goes to its owner, rank p, in
// one round; the owner reduces the n contributions and sends the result to every rank in a
// second. The ring's bytes (2(n-1)/n of the buffer through each link) in two rounds instead of
// its 2(n-1) steps: where every step waits a long link's one-way delay, the fewest rounds that
// move no more bytes than the ring (docs/algorithms.md).
//
// The owner folds part p in the ring's order (ring.cc, direct.cc): rank p+1's contribution
// first, each next rank's as op(its, sum so far), its own last. So ring, direct, star and this
// give the same bits, and the planner may choose among them by time alone.
//
// Over a long link (Transport::kLongRoundTrip) large parts travel in segments of kSegmentBytes,
// each reduced and sent on as soon as its contributions are in: the results of the first
// segments leave while the last contributions are still on their way, so a large call waits the
// link's delay once, not once per round, and
// a lost segment near the end of the contributions (0.1 % of a long link's segments: one in
// nearly every 16 MiB) delays only its own segment, not the second round as a whole. Segmenting
// changes no element's order of reduction: the same bits. Not over shared memory or a short
// link, which have no delay to hide: there 4 ranks' 256 MiB calls ran 1.0-1.7x as long in 16
// segments. Every rank sees the same round trip (the longest to a peer), so all cut alike.
#include <algorithm>
#include <vector>

#include "collective/algorithms.h"
#include "collective/schedule.h"

namespace ringzip {

namespace {
// A segment of a part: long enough that its per-message costs vanish beside its bytes, short
// enough that a 64 MiB call among 4 ranks (16 MiB parts) has four to overlap.
constexpr size_t kSegmentBytes = 4 << 20;
constexpr size_t kMaxSegments = 64;
}  // namespace

void sra_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  const size_t esz = dtype_size(data.dtype);
  const std::vector<size_t> begin = even_parts(data.count, n);
  // Every rank cuts every part alike: from the call's size (the largest part's bytes) and the link.
  const size_t largest = (begin[1] - begin[0]) * esz;
  const size_t S =
      c.net.long_link() ? std::clamp<size_t>((largest + kSegmentBytes - 1) / kSegmentBytes, 1, kMaxSegments) : 1;
  // Segment t of part p: elements [seg(p, t), seg(p, t + 1)).
  auto seg = [&](int p, size_t t) { return begin[p] + (begin[p + 1] - begin[p]) * t / S; };
  auto at = [&](int p, size_t t) { return reinterpret_cast<uint8_t*>(data.at(seg(p, t))); };
  auto seg_bytes = [&](int p, size_t t) { return (seg(p, t + 1) - seg(p, t)) * esz; };
  // slot k - 1 holds rank r+k's contribution to this rank's part (k = 1 .. n-1): the ring's order.
  const size_t mine = (begin[r + 1] - begin[r]) * esz;
  auto in = c.dev.alloc(std::max<size_t>(1, mine * (n - 1)));
  auto slot = [&](int k, size_t t) { return in.get() + mine * (k - 1) + (seg(r, t) - begin[r]) * esz; };
  // Where sends are eager every contribution leaves in the first S steps, which wait for
  // nothing; the owner's step S + t reduces segment t and sends its result (L = S). A grouped
  // executor posts a step's sends with the next step's receives: one segment a step (L = 1).
  const size_t L = lookahead(c, Schedule::kAnyAhead) > 0 ? S : 1;
  Schedule sch;
  sch.lag = static_cast<int>(L);
  sch.steps = static_cast<int>(S + 2 * L);
  // Every receive has a place of its own, so all are posted before the first send: over a
  // long link a receive posted late costs its message a round trip more (Gloo moves a message
  // once the receiver said it is ready). A result lands in place: it can only come after its
  // owner had this rank's contribution to that segment, so that send is done by then; the
  // executor waits for the results at the schedule's end.
  sch.recvs = [&](int s, std::vector<Xfer>& q) {  // the contributions first: the body waits for them by index
    const size_t s_ = static_cast<size_t>(s);
    for (int k = 1; k < n && s_ >= L && s_ - L < S && seg_bytes(r, s_ - L); ++k)
      q.push_back({slot(k, s_ - L), seg_bytes(r, s_ - L), (r + k) % n, static_cast<uint32_t>(2 * (s_ - L)),
                   "sra contribution from"});
    for (int k = 1; k < n && s_ >= 2 * L && s_ - 2 * L < S; ++k) {
      const int peer = (r + k) % n;
      const size_t t = s_ - 2 * L;
      if (seg_bytes(peer, t))
        q.push_back({at(peer, t), seg_bytes(peer, t), peer, static_cast<uint32_t>(2 * t + 1), "sra result from"});
    }
  };
  sch.body = [&](int s, Step& st) {
    const size_t s_ = static_cast<size_t>(s);
    if (s_ < S) {  // this step's segment of every peer's part, to its owner
      for (int k = 1; k < n; ++k) {
        const int owner = (r + k) % n;
        if (seg_bytes(owner, s_)) st.send(at(owner, s_), seg_bytes(owner, s_), owner, static_cast<uint32_t>(2 * s_), "sra send to");
      }
    }
    if (s_ < L || s_ - L >= S) return;
    const size_t t = s_ - L, bytes = seg_bytes(r, t);
    if (!bytes) return;
    for (int k = 1; k < n; ++k) st.wait(k - 1);  // this step's first receives: the contributions
    const size_t len = bytes / esz;
    for (int k = 2; k < n; ++k) c.dev.reduce_into(data.dtype, op, slot(k, t), slot(k - 1, t), len);
    c.dev.reduce_into(data.dtype, op, at(r, t), slot(n - 1, t), len);
    for (int k = 1; k < n; ++k) st.send(at(r, t), bytes, (r + k) % n, static_cast<uint32_t>(2 * t + 1), "sra result to");
  };
  run(c, sch);
}

}  // namespace ringzip
