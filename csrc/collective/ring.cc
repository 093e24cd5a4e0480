// Ring reduce-scatter and allgather, segmented so that the transfer of one segment overlaps
// the reduction of the previous one (each reduced segment is forwarded at once).
#include <algorithm>
#include <vector>

#include "collective/algorithms.h"
#include "collective/reduce.h"

namespace ringzip {
namespace {

// Big enough to amortize a message's fixed cost, small enough to keep the pipeline full.
constexpr size_t kSegmentBytes = 256 << 10;

struct Segments {
  size_t elems_per_seg;
  size_t count(size_t part_elems) const { return (part_elems + elems_per_seg - 1) / elems_per_seg; }
};

}  // namespace

std::vector<size_t> even_parts(size_t count, int parts) {
  std::vector<size_t> begin(parts + 1);
  for (int i = 0; i <= parts; ++i) begin[i] = part_begin(count, parts, i);
  return begin;
}

void ring_reduce_scatter(Comm& c, Buf data, RedOp op, const std::vector<size_t>& begin,
                         uint32_t step_base) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const size_t esz = dtype_size(data.dtype);
  const Segments seg{std::max<size_t>(1, kSegmentBytes / esz)};
  auto part = [&](int i) { return ((i % n) + n) % n; };
  auto len = [&](int p) { return begin[p + 1] - begin[p]; };
  size_t max_part = 0;
  for (int p = 0; p < n; ++p) max_part = std::max(max_part, len(p));
  std::vector<char> scratch(2 * max_part * esz);

  std::vector<std::unique_ptr<Request>> sends;
  std::vector<int> send_peers;
  auto send_seg = [&](int p, size_t j, int step) {
    size_t off = j * seg.elems_per_seg, cnt = std::min(seg.elems_per_seg, len(p) - off);
    sends.push_back(c.isend(data.at(begin[p] + off), cnt * esz, right, step_base + step));
    send_peers.push_back(right);
  };
  // Step s receives part (r-s-2) from the left, adds its own, forwards it as step s+1.
  auto post_recvs = [&](int step) {
    std::vector<std::unique_ptr<Request>> recvs;
    int p = part(r - step - 2);
    char* buf = scratch.data() + (step % 2) * max_part * esz;
    for (size_t j = 0; j < seg.count(len(p)); ++j) {
      size_t off = j * seg.elems_per_seg, cnt = std::min(seg.elems_per_seg, len(p) - off);
      recvs.push_back(c.irecv(buf + off * esz, cnt * esz, left, step_base + step));
    }
    return recvs;
  };

  for (size_t j = 0; j < seg.count(len(part(r - 1))); ++j) send_seg(part(r - 1), j, 0);
  auto recvs = post_recvs(0);
  for (int s = 0; s + 1 < n; ++s) {
    std::vector<std::unique_ptr<Request>> next;
    if (s + 2 < n) next = post_recvs(s + 1);
    const int p = part(r - s - 2);
    const char* buf = scratch.data() + (s % 2) * max_part * esz;
    for (size_t j = 0; j < recvs.size(); ++j) {
      c.wait(*recvs[j], left, "reduce-scatter receive from");
      size_t off = j * seg.elems_per_seg, cnt = std::min(seg.elems_per_seg, len(p) - off);
      reduce_into(data.dtype, op, data.at(begin[p] + off), buf + off * esz, cnt);
      if (s + 2 < n) send_seg(p, j, s + 1);
    }
    recvs = std::move(next);
  }
  c.wait_all(sends, send_peers, "reduce-scatter send to");
}

void ring_allgather(Comm& c, Buf data, const std::vector<size_t>& begin, uint32_t step_base) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const size_t esz = dtype_size(data.dtype);
  const Segments seg{std::max<size_t>(1, kSegmentBytes / esz)};
  auto part = [&](int i) { return ((i % n) + n) % n; };
  auto len = [&](int p) { return begin[p + 1] - begin[p]; };

  std::vector<std::unique_ptr<Request>> sends;
  std::vector<int> send_peers;
  auto send_seg = [&](int p, size_t j, int step) {
    size_t off = j * seg.elems_per_seg, cnt = std::min(seg.elems_per_seg, len(p) - off);
    sends.push_back(c.isend(data.at(begin[p] + off), cnt * esz, right, step_base + step));
    send_peers.push_back(right);
  };
  // Every received part lands in its final place, so all receives can be posted up front.
  std::vector<std::vector<std::unique_ptr<Request>>> recvs(n - 1);
  for (int s = 0; s + 1 < n; ++s) {
    int p = part(r - s - 1);
    for (size_t j = 0; j < seg.count(len(p)); ++j) {
      size_t off = j * seg.elems_per_seg, cnt = std::min(seg.elems_per_seg, len(p) - off);
      recvs[s].push_back(c.irecv(data.at(begin[p] + off), cnt * esz, left, step_base + s));
    }
  }
  for (size_t j = 0; j < seg.count(len(r)); ++j) send_seg(r, j, 0);
  for (int s = 0; s + 1 < n; ++s) {
    int p = part(r - s - 1);
    for (size_t j = 0; j < recvs[s].size(); ++j) {
      c.wait(*recvs[s][j], left, "allgather receive from");
      if (s + 2 < n) send_seg(p, j, s + 1);
    }
  }
  c.wait_all(sends, send_peers, "allgather send to");
}

void ring_allreduce(Comm& c, Buf data, RedOp op) {
  auto begin = even_parts(data.count, c.size());
  ring_reduce_scatter(c, data, op, begin, 0);
  ring_allgather(c, data, begin, static_cast<uint32_t>(c.size()));
}

}  // namespace ringzip
