// Log-step all-reduce for small messages: ranks beyond the largest power of two fold their
// data into a partner first and receive the result last; the rest exchange whole buffers
// with partner rank^mask for each mask. Both partners compute op(lower rank's, higher rank's):
// MIN / MAX of +0 and -0, and NaN payloads under SUM, depend on the operand order, so the same
// order on both sides is what keeps every rank bitwise identical.
#include <vector>

#include "collective/algorithms.h"

namespace ringzip {

void rd_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  const uint32_t last_step = 31;
  auto scratch_mem = c.dev.alloc(data.bytes());
  void* scratch = scratch_mem.get();

  if (r >= p) {
    auto s = c.isend(data.data, data.bytes(), r - p, 0);
    c.wait(*s, r - p, "fold send to");
    auto q = c.irecv(data.data, data.bytes(), r - p, last_step);
    c.wait(*q, r - p, "result receive from");
    return;
  }
  if (r < extra) {
    auto q = c.irecv(scratch, data.bytes(), r + p, 0);
    c.wait(*q, r + p, "fold receive from");
    c.dev.reduce_into(data.dtype, op, data.data, scratch, data.count);
  }
  uint32_t step = 1;
  for (int mask = 1; mask < p; mask <<= 1, ++step) {
    const int partner = r ^ mask;
    c.net.group_start();
    auto q = c.irecv(scratch, data.bytes(), partner, step);
    auto s = c.isend(data.data, data.bytes(), partner, step);
    c.net.group_end();
    c.wait(*q, partner, "exchange receive from");
    c.wait(*s, partner, "exchange send to");
    if (partner < r) {  // op(partner's, own), left in scratch, then moved to data
      c.dev.reduce_into(data.dtype, op, scratch, data.data, data.count);
      c.dev.copy(data.data, scratch, data.bytes());
    } else {
      c.dev.reduce_into(data.dtype, op, data.data, scratch, data.count);
    }
  }
  if (r < extra) {
    auto s = c.isend(data.data, data.bytes(), r + p, last_step);
    c.wait(*s, r + p, "result send to");
  }
}

AllreduceAlgo choose_allreduce(size_t bytes, int ranks, AllreduceAlgo requested) {
  if (requested != AllreduceAlgo::Auto) return requested;
  // Recursive doubling moves log2(n) whole buffers, the ring 2(n-1)/n of one buffer in
  // 2(n-1) latency-bound steps: below this size latency dominates (bench/results).
  // While the payload is tiny, messages cost more than bytes: the star's 2(n-1) messages beat
  // both the direct exchange's n(n-1) and recursive doubling's n·log2 n (docs/algorithms.md).
  constexpr size_t kRingThreshold = 1 << 20, kStarMaxSent = 16 << 10;
  if (bytes * (ranks - 1) <= kStarMaxSent) return AllreduceAlgo::Star;
  return bytes < kRingThreshold ? AllreduceAlgo::RecursiveDoubling : AllreduceAlgo::Ring;
}

void allreduce(Comm& c, Buf data, RedOp op, AllreduceAlgo algo) {
  switch (choose_allreduce(data.bytes(), c.size(), algo)) {
    case AllreduceAlgo::Ring: return ring_allreduce(c, data, op);
    case AllreduceAlgo::Direct: return direct_allreduce(c, data, op);
    case AllreduceAlgo::Star: return star_allreduce(c, data, op);
    default: return rd_allreduce(c, data, op);
  }
}

}  // namespace ringzip
