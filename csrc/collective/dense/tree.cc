// Pipelined binary-tree all-reduce: the buffer is cut into segments that flow up a binary tree
// to rank 0, being reduced on the way, and back down, one segment per step and tree level, so
// that after the pipeline fills every level works on a different segment at once. Its latency
// grows with the depth, log2 n, rather than with n as the ring's does.
//
// The tree is the heap: rank v's children are 2v+1 and 2v+2, its depth d = ⌊log2(v+1)⌋, the
// tree's depth D = that of rank n-1. Each node reduces op(op(own, left child's), right child's):
// fixed for every element, so the result is deterministic; every rank then takes the root's
// bits through the broadcast.
//
// The schedule (collective/schedule.h), S segments, step t, node of depth d:
//   up:   segment j = t - (D - d): wait for the children's copies (sent at step t-1), reduce them
//         into data, send the segment to the parent (received at step t+1, when it is the
//         parent's own up segment); leaves only send.
//   down: segment j = t - D - d: wait for it from the parent, landing in data, and send it to
//         the children. At the root the two coincide (t = D + j): reduced, then sent down.
// 2D + S steps. A segment's broadcast lands in the place this rank sent up from; it can only
// come once the root holds this rank's contribution, which the parent received before, so the
// send has been read by then. The children's segments land in scratch slots, alternating when
// receives are posted a step ahead.
#include <algorithm>
#include <vector>

#include "collective/algorithms.h"
#include "collective/schedule.h"

namespace ringzip {
namespace {

// A segment costs one message per tree edge and step: few, but at least kMinSegments of them
// so the levels have something to overlap. At most kMaxSegments keep steps (tags) below 2^16.
constexpr size_t kMinSegmentBytes = 256 << 10, kMaxSegmentBytes = 1 << 20, kMinSegments = 8;
constexpr size_t kMaxSegments = 1 << 14;

int depth(int v) {
  int d = 0;
  for (; v > 0; v = (v - 1) / 2) ++d;
  return d;
}

}  // namespace

void tree_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  const int D = depth(n - 1), d = depth(r), parent = (r - 1) / 2;
  std::vector<int> kids;
  for (int k = 2 * r + 1; k <= 2 * r + 2 && k < n; ++k) kids.push_back(k);
  const size_t esz = dtype_size(data.dtype);
  size_t seg = std::clamp(data.bytes() / kMinSegments, kMinSegmentBytes, kMaxSegmentBytes) / esz;
  seg = std::max({seg, (data.count + kMaxSegments - 1) / kMaxSegments, size_t{1}});
  const int segments = static_cast<int>((data.count + seg - 1) / seg);
  auto bytes_of = [&](int j) { return std::min(seg, data.count - j * seg) * esz; };
  auto at = [&](int j) { return data.at(j * seg); };
  const int slots = lookahead(c, 1) + 1;
  std::shared_ptr<uint8_t> scratch;
  if (!kids.empty()) scratch = c.dev.alloc(slots * kids.size() * seg * esz);
  auto slot = [&](int t, size_t k) { return scratch.get() + ((t % slots) * kids.size() + k) * seg * esz; };
  // The segment going up (down) at step t, or -1.
  auto up = [&](int t) { return t >= D - d && t - (D - d) < segments ? t - (D - d) : -1; };
  auto down = [&](int t) { return t >= D + d && t - (D + d) < segments ? t - (D + d) : -1; };
  Schedule sch;
  sch.steps = 2 * D + segments;
  sch.ahead = slots - 1;
  sch.recvs = [&](int t, std::vector<Xfer>& q) {
    const uint32_t from = static_cast<uint32_t>(t - 1);
    if (const int j = up(t); j >= 0)
      for (size_t k = 0; k < kids.size(); ++k)
        q.push_back({slot(t, k), bytes_of(j), kids[k], from, "tree reduce receive from"});
    if (const int j = down(t); j >= 0 && r != 0)
      q.push_back({at(j), bytes_of(j), parent, from, "tree broadcast receive from"});
  };
  sch.body = [&](int t, Step& st) {
    const uint32_t step = static_cast<uint32_t>(t);
    size_t received = 0;
    if (const int j = up(t); j >= 0) {
      for (size_t k = 0; k < kids.size(); ++k) {
        st.wait(received++);
        c.dev.reduce_into(data.dtype, op, at(j), slot(t, k), bytes_of(j) / esz);
      }
      if (r != 0) st.send(at(j), bytes_of(j), parent, step, "tree reduce send to");
    }
    if (const int j = down(t); j >= 0) {
      if (r != 0) st.wait(received);
      for (int kid : kids) st.send(at(j), bytes_of(j), kid, step, "tree broadcast send to");
    }
  };
  run(c, sch);
}

}  // namespace ringzip
