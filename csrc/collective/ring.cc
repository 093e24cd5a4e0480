// Ring reduce-scatter and allgather. Each step posts its sends and receives as one group
// (a GPU transport must match them together), in segments, and reduces each received
// segment as soon as it lands, so transfer of the next segments overlaps the reduction.
#include <algorithm>
#include <vector>

#include "collective/algorithms.h"

namespace ringzip {
namespace {

// Big enough to amortize a message's fixed cost, small enough to keep transfer and
// reduction overlapped within a step.
constexpr size_t kSegmentBytes = 256 << 10;

struct Ring {
  Comm& c;
  Buf data;
  const std::vector<size_t>& begin;
  int n, r, right, left;
  size_t esz, seg;

  Ring(Comm& comm, Buf d, const std::vector<size_t>& b)
      : c(comm), data(d), begin(b), n(comm.size()), r(comm.rank()), right((r + 1) % n),
        left((r + n - 1) % n), esz(dtype_size(d.dtype)), seg(std::max<size_t>(1, kSegmentBytes / esz)) {}
  int part(int i) const { return ((i % n) + n) % n; }
  size_t len(int p) const { return begin[p + 1] - begin[p]; }
  size_t segments(int p) const { return (len(p) + seg - 1) / seg; }
  size_t seg_len(int p, size_t j) const { return std::min(seg, len(p) - j * seg); }

  // One step: send part `sp` to the right, receive part `rp` from the left into `dst`
  // (segment j at dst + j*seg elements); `on_segment(j)` runs as segment j arrives.
  template <typename F>
  void step(uint32_t tag, int sp, int rp, char* dst, F on_segment) {
    std::vector<std::unique_ptr<Request>> sends, recvs;
    c.net.group_start();
    for (size_t j = 0; j < segments(sp); ++j)
      sends.push_back(c.isend(data.at(begin[sp] + j * seg), seg_len(sp, j) * esz, right, tag));
    for (size_t j = 0; j < segments(rp); ++j)
      recvs.push_back(c.irecv(dst + j * seg * esz, seg_len(rp, j) * esz, left, tag));
    c.net.group_end();
    for (size_t j = 0; j < recvs.size(); ++j) {
      c.wait(*recvs[j], left, "ring receive from");
      on_segment(j);
    }
    for (auto& s : sends) c.wait(*s, right, "ring send to");
  }
};

}  // namespace

std::vector<size_t> even_parts(size_t count, int parts) {
  std::vector<size_t> begin(parts + 1);
  for (int i = 0; i <= parts; ++i) begin[i] = part_begin(count, parts, i);
  return begin;
}

void ring_reduce_scatter(Comm& c, Buf data, RedOp op, const std::vector<size_t>& begin, uint32_t step_base) {
  if (c.size() == 1) return;
  Ring ring(c, data, begin);
  size_t max_part = 0;
  for (int p = 0; p < ring.n; ++p) max_part = std::max(max_part, ring.len(p));
  auto scratch = c.dev.alloc(max_part * ring.esz);
  // Step s sends part (r-s-1) and receives part (r-s-2), adding it to its own; after n-1
  // steps part r holds the full reduction.
  for (int s = 0; s + 1 < ring.n; ++s) {
    const int rp = ring.part(ring.r - s - 2);
    char* buf = reinterpret_cast<char*>(scratch.get());
    ring.step(step_base + s, ring.part(ring.r - s - 1), rp, buf, [&](size_t j) {
      c.dev.reduce_into(data.dtype, op, data.at(begin[rp] + j * ring.seg), buf + j * ring.seg * ring.esz,
                        ring.seg_len(rp, j));
    });
  }
}

void ring_allgather(Comm& c, Buf data, const std::vector<size_t>& begin, uint32_t step_base) {
  if (c.size() == 1) return;
  Ring ring(c, data, begin);
  for (int s = 0; s + 1 < ring.n; ++s) {
    const int rp = ring.part(ring.r - s - 1);
    ring.step(step_base + s, ring.part(ring.r - s), rp, data.at(begin[rp]), [](size_t) {});
  }
}

void ring_allreduce(Comm& c, Buf data, RedOp op) {
  auto begin = even_parts(data.count, c.size());
  ring_reduce_scatter(c, data, op, begin, 0);
  ring_allgather(c, data, begin, static_cast<uint32_t>(c.size()));
}

}  // namespace ringzip
