// All-reduces for tiny messages, where the cost is per message rather than per byte.
//
// direct: every rank sends its buffer to every other rank at once and reduces all n
//   contributions in rank order: one latency round, n(n-1) messages in all.
// star: every rank sends its buffer to one root, which reduces in rank order and sends the
//   result back: two rounds, only 2(n-1) messages. On hosts running several ranks per core
//   (wake-ups, not wire time, dominate) it halves the latency of direct (docs/algorithms.md).
// Every rank ends with the same bits: all add the same values in the same order (direct) or
// take the root's sum (star).
#include <vector>

#include "collective/algorithms.h"

namespace ringzip {

namespace {

// Waits for the peers' buffers posted into `all` (slot i = rank i, this rank's own copied in),
// then reduces the slots in rank order into data.
void reduce_slots(Comm& c, Buf data, RedOp op, uint8_t* all, std::vector<std::unique_ptr<Request>>& reqs,
                  const std::vector<int>& peers, const char* what) {
  const size_t bytes = data.bytes();
  c.dev.copy(all + bytes * c.rank(), data.data, bytes);
  c.wait_all(reqs, peers, what);
  c.dev.copy(data.data, all, bytes);
  for (int i = 1; i < c.size(); ++i) c.dev.reduce_into(data.dtype, op, data.data, all + bytes * i, data.count);
}

}  // namespace

void star_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  // The root rotates with the sequence number, so back-to-back calls share the reduction work.
  const int root = static_cast<int>(c.seq % static_cast<uint32_t>(n));
  const size_t bytes = data.bytes();
  if (r != root) {
    auto s = c.isend(data.data, bytes, root, 0);
    auto q = c.irecv(data.data, bytes, root, 1);
    // The result can only come after the root has our buffer: waiting for it first leaves
    // the send's completion already signalled, one wake-up fewer.
    c.wait(*q, root, "star result from");
    c.wait(*s, root, "star send to");
    return;
  }
  auto all = c.dev.alloc(bytes * n);
  auto slot = [&](int i) { return all.get() + bytes * i; };
  std::vector<std::unique_ptr<Request>> reqs;
  std::vector<int> peers;
  c.net.group_start();
  for (int i = 0; i < n; ++i)
    if (i != r) {
      reqs.push_back(c.irecv(slot(i), bytes, i, 0));
      peers.push_back(i);
    }
  c.net.group_end();
  reduce_slots(c, data, op, all.get(), reqs, peers, "star receive from");
  reqs.clear();
  c.net.group_start();
  for (int i = 0; i < n; ++i)
    if (i != r) reqs.push_back(c.isend(data.data, bytes, i, 1));
  c.net.group_end();
  c.wait_all(reqs, peers, "star result to");
}

void direct_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  const size_t bytes = data.bytes();
  auto all = c.dev.alloc(bytes * n);
  auto slot = [&](int i) { return all.get() + bytes * i; };
  std::vector<std::unique_ptr<Request>> reqs;
  std::vector<int> peers;
  c.net.group_start();
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n, to = (r + k) % n;
    reqs.push_back(c.irecv(slot(from), bytes, from, 0));
    peers.push_back(from);
    reqs.push_back(c.isend(data.data, bytes, to, 0));
    peers.push_back(to);
  }
  c.net.group_end();
  reduce_slots(c, data, op, all.get(), reqs, peers, "direct exchange with");
}

}  // namespace ringzip
