// All-reduces for tiny messages, where the cost is per message rather than per byte.
//
// direct: every rank sends its buffer to every other rank at once and reduces all n
//   contributions: one latency round, n(n-1) messages in all.
// star: every rank sends its buffer to one root, which reduces and sends the result back: two
//   rounds, only 2(n-1) messages. On hosts running several ranks per core (wake-ups, not wire
//   time, dominate) it halves the latency of direct (docs/algorithms.md).
// Both reduce in the ring's order (ring.cc): part p of even_parts(count, n) folds the ranks'
// contributions from rank p+1 on, each as op(next rank's, sum so far). So ring, direct and star
// give the same bits, and the planner may choose among them by time alone.
#include <vector>

#include "collective/algorithms.h"
#include "collective/schedule.h"

namespace ringzip {

namespace {

// Receives of every peer's buffer into slot i = rank i of `all` (n slots of data's size).
std::vector<Xfer> slot_recvs(const Comm& c, uint8_t* all, size_t bytes, uint32_t step, const char* what) {
  std::vector<Xfer> q;
  for (int k = 1; k < c.size(); ++k) {
    const int from = (c.rank() - k + c.size()) % c.size();
    q.push_back({all + bytes * from, bytes, from, step, what});
  }
  return q;
}

// Once the receives of `st` landed in `all` (this rank's own slot is copied in) and the earlier
// sends of data completed, reduces the slots into data in the ring's order: within each part the
// sum moves through the slots as it moves through the ring's ranks, reduced into each next one.
void reduce_slots(Comm& c, Step& st, Buf data, RedOp op, uint8_t* all) {
  const int n = c.size();
  const size_t bytes = data.bytes(), esz = dtype_size(data.dtype);
  c.dev.copy(all + bytes * c.rank(), data.data, bytes);
  for (int k = 1; k < n; ++k) st.wait(k - 1);
  st.sends_done();  // data went to the peers before it changes
  const std::vector<size_t> begin = even_parts(data.count, n);
  for (int p = 0; p < n; ++p) {
    const size_t len = begin[p + 1] - begin[p], off = begin[p] * esz;
    if (len == 0) continue;
    auto slot = [&](int k) { return all + bytes * ((p + k) % n) + off; };  // rank p+k's part p
    for (int k = 2; k <= n; ++k) c.dev.reduce_into(data.dtype, op, slot(k), slot(k - 1), len);
    c.dev.copy(data.at(begin[p]), slot(n), len * esz);
  }
}

}  // namespace

// Step 0: the others send to the root; step 1: the root reduces and sends the result, which
// the others receive in step 2 (into data: the result can only come after the root has the
// buffer, so the receive may be posted with the send).
void star_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  // The root rotates with the sequence number, so back-to-back calls share the reduction work.
  const int root = static_cast<int>(c.seq % static_cast<uint32_t>(n));
  const size_t bytes = data.bytes();
  std::shared_ptr<uint8_t> all;
  if (r == root) all = c.dev.alloc(bytes * n);
  Schedule sch;
  sch.steps = 3;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    if (s == 1 && r == root) q = slot_recvs(c, all.get(), bytes, 0, "star receive from");
    if (s == 2 && r != root) q.push_back({data.data, bytes, root, 1, "star result from"});
  };
  sch.body = [&](int s, Step& st) {
    if (r != root) {
      if (s == 0) st.send(data.data, bytes, root, 0, "star send to");
      if (s == 2) st.wait(0);
      return;
    }
    if (s != 1) return;
    reduce_slots(c, st, data, op, all.get());
    for (int i = 0; i < n; ++i)
      if (i != r) st.send(data.data, bytes, i, 1, "star result to");
  };
  run(c, sch);
}

void direct_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  const size_t bytes = data.bytes();
  auto all = c.dev.alloc(bytes * n);
  Schedule sch;
  sch.steps = 2;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    if (s == 1) q = slot_recvs(c, all.get(), bytes, 0, "direct exchange with");
  };
  sch.body = [&](int s, Step& st) {
    if (s == 1) return reduce_slots(c, st, data, op, all.get());
    for (int k = 1; k < n; ++k) st.send(data.data, bytes, (r + k) % n, 0, "direct exchange with");
  };
  run(c, sch);
}

}  // namespace ringzip
