// Scatter-reduce-allgather, exact: part p of every rank's buffer goes to its owner, rank p, in
// one round; the owner reduces the n contributions and sends the result to every rank in a
// second. The ring's bytes (2(n-1)/n of the buffer through each link) in two rounds instead of
// its 2(n-1) steps: where every step waits a long link's one-way delay, the fewest rounds that
// move no more bytes than the ring (docs/algorithms.md).
//
// The owner folds part p in the ring's order (ring.cc, direct.cc): rank p+1's contribution
// first, each next rank's as op(its, sum so far), its own last. So ring, direct, star and this
// give the same bits, and the planner may choose among them by time alone.
#include <algorithm>
#include <vector>

#include "collective/algorithms.h"
#include "collective/schedule.h"

namespace ringzip {

void sra_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  const size_t esz = dtype_size(data.dtype);
  const std::vector<size_t> begin = even_parts(data.count, n);
  auto part = [&](int p) { return reinterpret_cast<uint8_t*>(data.at(begin[p])); };
  auto part_bytes = [&](int p) { return (begin[p + 1] - begin[p]) * esz; };
  // slot k - 1 holds rank r+k's contribution to this rank's part (k = 1 .. n-1): the ring's order.
  const size_t mine = part_bytes(r);
  auto in = c.dev.alloc(std::max<size_t>(1, mine * (n - 1)));
  auto slot = [&](int k) { return in.get() + mine * (k - 1); };
  Schedule sch;
  sch.steps = 3;
  // Every receive has a place of its own, so all are posted before the first send: over a
  // long link a receive posted late costs its message a round trip more (Gloo moves a message
  // once the receiver said it is ready). The result lands in place: it can only come after
  // its owner had this rank's part, so the send of that part is done by then; the executor
  // waits for it at the schedule's end.
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    for (int k = 1; k < n; ++k) {
      const int peer = (r + k) % n;
      if (s == 1 && mine) q.push_back({slot(k), mine, peer, 0, "sra contribution from"});
      if (s == 2 && part_bytes(peer)) q.push_back({part(peer), part_bytes(peer), peer, 1, "sra result from"});
    }
  };
  sch.body = [&](int s, Step& st) {
    if (s == 0) {
      for (int k = 1; k < n; ++k) {
        const int owner = (r + k) % n;
        if (part_bytes(owner)) st.send(part(owner), part_bytes(owner), owner, 0, "sra send to");
      }
    } else if (s == 1) {
      if (!mine) return;
      for (int k = 1; k < n; ++k) st.wait(k - 1);
      const size_t len = mine / esz;
      for (int k = 2; k < n; ++k) c.dev.reduce_into(data.dtype, op, slot(k), slot(k - 1), len);
      c.dev.reduce_into(data.dtype, op, part(r), slot(n - 1), len);
      for (int k = 1; k < n; ++k) st.send(part(r), mine, (r + k) % n, 1, "sra result to");
    }
  };
  run(c, sch);
}

}  // namespace ringzip
