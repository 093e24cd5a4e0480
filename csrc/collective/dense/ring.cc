// Ring reduce-scatter and allgather, in segments so transfer overlaps reduction.
//
// Each is one schedule (collective/schedule.h) of n steps: step 0 sends this rank's first
// part to the right; step s >= 1 receives a part from the left segment by segment and, as each
// segment is reduced (or lands, for the allgather), forwards it to the right for step s + 1.
// On host transports the segments stream through the ring across steps (receives posted a step
// ahead into alternating buffers, each segment forwarded as soon as it is reduced); on
// stream-ordered transports each step is one group.
#include <algorithm>
#include <vector>

#include "collective/algorithms.h"
#include "collective/schedule.h"

namespace ringzip {
namespace {

// Few, large messages (per-message costs -- thread wake-ups, rendezvous -- dominate on a busy
// host), but at least kMinSegments per part so the pipeline has something to overlap.
constexpr size_t kMaxSegmentBytes = 4 << 20, kMinSegmentBytes = 1 << 20, kMinSegments = 4;

struct Ring {
  Buf data;
  const std::vector<size_t>& begin;
  int n, r, right, left;
  size_t esz, seg;

  Ring(const Comm& c, Buf d, const std::vector<size_t>& b)
      : data(d),
        begin(b),
        n(c.size()),
        r(c.rank()),
        right((r + 1) % n),
        left((r + n - 1) % n),
        esz(dtype_size(d.dtype)) {
    const size_t bytes = std::clamp(max_len() * esz / kMinSegments, kMinSegmentBytes, kMaxSegmentBytes);
    seg = std::max<size_t>(1, bytes / esz);
  }
  int part(int i) const { return ((i % n) + n) % n; }
  size_t len(int p) const { return begin[p + 1] - begin[p]; }
  size_t max_len() const {
    size_t m = 0;
    for (int p = 0; p < n; ++p) m = std::max(m, len(p));
    return m;
  }
  size_t segments(int p) const { return (len(p) + seg - 1) / seg; }
  size_t seg_bytes(int p, size_t j) const { return std::min(seg, len(p) - j * seg) * esz; }
  char* at(int p, size_t j) const { return data.at(begin[p] + j * seg); }

  // Part p's segments arriving from the left into dst (contiguous, one part long).
  void recv(std::vector<Xfer>& q, int p, char* dst, uint32_t step) const {
    for (size_t j = 0; j < segments(p); ++j)
      q.push_back({dst + j * seg * esz, seg_bytes(p, j), left, step, "ring receive from"});
  }
  void send(Step& st, int p, size_t j, uint32_t step) const {
    st.send(at(p, j), seg_bytes(p, j), right, step, "ring send to");
  }
};

}  // namespace

std::vector<size_t> even_parts(size_t count, int parts) {
  std::vector<size_t> begin(parts + 1);
  for (int i = 0; i <= parts; ++i) begin[i] = part_begin(count, parts, i);
  return begin;
}

// Step s >= 1 receives part (r-s-1) and adds it to its own, forwarding each reduced segment;
// after step n-1 part r holds the full reduction.
void ring_reduce_scatter(Comm& c, Buf data, RedOp op, const std::vector<size_t>& begin, uint32_t step_base) {
  if (c.size() == 1) return;
  const Ring g(c, data, begin);
  const int slots = lookahead(c, 1) + 1;  // receive buffers: step s lands in buf(s)
  const size_t slot_bytes = g.max_len() * g.esz;
  auto scratch = c.dev.alloc(slots * slot_bytes);
  auto buf = [&](int s) { return reinterpret_cast<char*>(scratch.get()) + (s - 1) % slots * slot_bytes; };
  Schedule sch;
  sch.steps = g.n;
  sch.ahead = slots - 1;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    if (s > 0) g.recv(q, g.part(g.r - s - 1), buf(s), step_base + s - 1);
  };
  sch.body = [&](int s, Step& st) {
    if (s == 0) {
      for (size_t j = 0; j < g.segments(g.part(g.r - 1)); ++j) g.send(st, g.part(g.r - 1), j, step_base);
      return;
    }
    const int p = g.part(g.r - s - 1);
    for (size_t j = 0; j < g.segments(p); ++j) {
      st.wait(j);
      c.dev.reduce_into(data.dtype, op, g.at(p, j), buf(s) + j * g.seg * g.esz, g.seg_bytes(p, j) / g.esz);
      if (s + 1 < g.n) g.send(st, p, j, step_base + s);
    }
  };
  run(c, sch);
}

// Step s >= 1 receives part (r-s) in place and forwards it. Every part lands in its final
// place, so all receives may be posted up front.
void ring_allgather(Comm& c, Buf data, const std::vector<size_t>& begin, uint32_t step_base) {
  if (c.size() == 1) return;
  const Ring g(c, data, begin);
  Schedule sch;
  sch.steps = g.n;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    if (s > 0) g.recv(q, g.part(g.r - s), g.at(g.part(g.r - s), 0), step_base + s - 1);
  };
  sch.body = [&](int s, Step& st) {
    const int p = g.part(g.r - s);
    for (size_t j = 0; j < g.segments(p); ++j) {
      if (s > 0) st.wait(j);
      if (s + 1 < g.n) g.send(st, p, j, step_base + s);
    }
  };
  run(c, sch);
}

void ring_allreduce(Comm& c, Buf data, RedOp op) {
  auto begin = even_parts(data.count, c.size());
  ring_reduce_scatter(c, data, op, begin, 0);
  ring_allgather(c, data, begin, static_cast<uint32_t>(c.size()));
}

}  // namespace ringzip
