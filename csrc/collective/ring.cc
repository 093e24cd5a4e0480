// Ring reduce-scatter and allgather, in segments so transfer overlaps reduction.
//
// Two schedules of the same steps, chosen by what the transport allows:
//  - eager (host transports): receives are posted a step ahead into double buffers and each
//    reduced segment is forwarded at once, so segments stream through the ring across steps;
//  - grouped (stream-ordered transports such as NCCL): each step's sends and receives are
//    posted as one group, then reduced; posting a receive whose send sits in a later group
//    would deadlock there.
#include <algorithm>
#include <vector>

#include "collective/algorithms.h"

namespace ringzip {
namespace {

// Few, large messages (per-message costs -- thread wake-ups, rendezvous -- dominate on a busy
// host), but at least kMinSegments per part so the pipeline has something to overlap.
constexpr size_t kMaxSegmentBytes = 4 << 20, kMinSegmentBytes = 1 << 20, kMinSegments = 4;

size_t segment_elems(const std::vector<size_t>& begin, size_t esz) {
  size_t max_part = 0;
  for (size_t p = 0; p + 1 < begin.size(); ++p) max_part = std::max(max_part, begin[p + 1] - begin[p]);
  const size_t bytes = std::clamp(max_part * esz / kMinSegments, kMinSegmentBytes, kMaxSegmentBytes);
  return std::max<size_t>(1, bytes / esz);
}

struct Ring {
  Comm& c;
  Buf data;
  const std::vector<size_t>& begin;
  int n, r, right, left;
  size_t esz, seg;
  std::vector<std::unique_ptr<Request>> sends;
  std::vector<int> send_peers;

  Ring(Comm& comm, Buf d, const std::vector<size_t>& b)
      : c(comm), data(d), begin(b), n(comm.size()), r(comm.rank()), right((r + 1) % n),
        left((r + n - 1) % n), esz(dtype_size(d.dtype)), seg(segment_elems(b, esz)) {}
  int part(int i) const { return ((i % n) + n) % n; }
  size_t len(int p) const { return begin[p + 1] - begin[p]; }
  size_t segments(int p) const { return (len(p) + seg - 1) / seg; }
  size_t seg_len(int p, size_t j) const { return std::min(seg, len(p) - j * seg); }
  char* at(int p, size_t j) const { return data.at(begin[p] + j * seg); }

  void send(int p, size_t j, uint32_t tag) {
    sends.push_back(c.isend(at(p, j), seg_len(p, j) * esz, right, tag));
    send_peers.push_back(right);
  }
  std::vector<std::unique_ptr<Request>> recv(int p, char* dst, uint32_t tag) {
    std::vector<std::unique_ptr<Request>> q;
    for (size_t j = 0; j < segments(p); ++j) q.push_back(c.irecv(dst + j * seg * esz, seg_len(p, j) * esz, left, tag));
    return q;
  }
  void finish() { c.wait_all(sends, send_peers, "ring send to"); }
};

}  // namespace

std::vector<size_t> even_parts(size_t count, int parts) {
  std::vector<size_t> begin(parts + 1);
  for (int i = 0; i <= parts; ++i) begin[i] = part_begin(count, parts, i);
  return begin;
}

// Step s sends part (r-s-1) and receives part (r-s-2), adding it to its own; after n-1 steps
// part r holds the full reduction.
void ring_reduce_scatter(Comm& c, Buf data, RedOp op, const std::vector<size_t>& begin, uint32_t step_base) {
  if (c.size() == 1) return;
  Ring g(c, data, begin);
  size_t max_part = 0;
  for (int p = 0; p < g.n; ++p) max_part = std::max(max_part, g.len(p));
  const bool eager = c.net.eager_receives();
  auto scratch = c.dev.alloc((eager ? 2 : 1) * max_part * g.esz);
  auto buf = [&](int s) { return reinterpret_cast<char*>(scratch.get()) + (eager ? s % 2 : 0) * max_part * g.esz; };
  auto reduce_seg = [&](int p, char* b, size_t j) {
    c.dev.reduce_into(data.dtype, op, g.at(p, j), b + j * g.seg * g.esz, g.seg_len(p, j));
  };
  if (eager) {
    for (size_t j = 0; j < g.segments(g.part(g.r - 1)); ++j) g.send(g.part(g.r - 1), j, step_base);
    auto recvs = g.recv(g.part(g.r - 2), buf(0), step_base);
    for (int s = 0; s + 1 < g.n; ++s) {
      std::vector<std::unique_ptr<Request>> next;
      if (s + 2 < g.n) next = g.recv(g.part(g.r - s - 3), buf(s + 1), step_base + s + 1);
      const int p = g.part(g.r - s - 2);
      for (size_t j = 0; j < recvs.size(); ++j) {
        c.wait(*recvs[j], g.left, "ring receive from");
        reduce_seg(p, buf(s), j);
        if (s + 2 < g.n) g.send(p, j, step_base + s + 1);
      }
      recvs = std::move(next);
    }
  } else {
    for (int s = 0; s + 1 < g.n; ++s) {
      const int sp = g.part(g.r - s - 1), p = g.part(g.r - s - 2);
      c.net.group_start();
      for (size_t j = 0; j < g.segments(sp); ++j) g.send(sp, j, step_base + s);
      auto recvs = g.recv(p, buf(s), step_base + s);
      c.net.group_end();
      for (size_t j = 0; j < recvs.size(); ++j) {
        c.wait(*recvs[j], g.left, "ring receive from");
        reduce_seg(p, buf(s), j);
      }
    }
  }
  g.finish();
}

// Step s forwards part (r-s) and receives part (r-s-1) in place.
void ring_allgather(Comm& c, Buf data, const std::vector<size_t>& begin, uint32_t step_base) {
  if (c.size() == 1) return;
  Ring g(c, data, begin);
  if (c.net.eager_receives()) {
    // Every part lands in its final place, so all receives can be posted up front.
    std::vector<std::vector<std::unique_ptr<Request>>> recvs;
    for (int s = 0; s + 1 < g.n; ++s) recvs.push_back(g.recv(g.part(g.r - s - 1), g.at(g.part(g.r - s - 1), 0), step_base + s));
    for (size_t j = 0; j < g.segments(g.r); ++j) g.send(g.r, j, step_base);
    for (int s = 0; s + 1 < g.n; ++s) {
      for (size_t j = 0; j < recvs[s].size(); ++j) {
        c.wait(*recvs[s][j], g.left, "ring receive from");
        if (s + 2 < g.n) g.send(g.part(g.r - s - 1), j, step_base + s + 1);
      }
    }
  } else {
    for (int s = 0; s + 1 < g.n; ++s) {
      const int sp = g.part(g.r - s), p = g.part(g.r - s - 1);
      c.net.group_start();
      for (size_t j = 0; j < g.segments(sp); ++j) g.send(sp, j, step_base + s);
      auto recvs = g.recv(p, g.at(p, 0), step_base + s);
      c.net.group_end();
      for (auto& q : recvs) c.wait(*q, g.left, "ring receive from");
    }
  }
  g.finish();
}

void ring_allreduce(Comm& c, Buf data, RedOp op) {
  auto begin = even_parts(data.count, c.size());
  ring_reduce_scatter(c, data, op, begin, 0);
  ring_allgather(c, data, begin, static_cast<uint32_t>(c.size()));
}

}  // namespace ringzip
