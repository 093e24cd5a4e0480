// Collectives with a root: binomial-tree broadcast, reduce (reduce-scatter + gather to root),
// gather and scatter as direct exchanges with the root.
#include <vector>

#include "collective/algorithms.h"

namespace ringzip {

void broadcast(Comm& c, Buf data, int root) {
  const int n = c.size();
  if (n == 1 || data.count == 0) return;
  const int vr = (c.rank() - root + n) % n;
  auto real = [&](int v) { return (v + root) % n; };
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      auto q = c.irecv(data.data, data.bytes(), real(vr - mask), 0);
      c.wait(*q, real(vr - mask), "broadcast receive from");
      break;
    }
    mask <<= 1;
  }
  std::vector<std::unique_ptr<Request>> sends;
  std::vector<int> peers;
  c.net.group_start();
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) {
      sends.push_back(c.isend(data.data, data.bytes(), real(vr + mask), 0));
      peers.push_back(real(vr + mask));
    }
  }
  c.net.group_end();
  c.wait_all(sends, peers, "broadcast send to");
}

void reduce(Comm& c, Buf data, RedOp op, int root) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  std::shared_ptr<uint8_t> copy;
  Buf work = data;
  if (r != root) {  // non-root inputs stay untouched
    copy = c.dev.alloc(data.bytes());
    c.dev.copy(copy.get(), data.data, data.bytes());
    work.data = copy.get();
  }
  auto begin = even_parts(data.count, n);
  ring_reduce_scatter(c, work, op, begin, 0);
  const size_t esz = dtype_size(data.dtype);
  const uint32_t step = static_cast<uint32_t>(n);
  if (r == root) {
    std::vector<std::unique_ptr<Request>> recvs;
    std::vector<int> peers;
    c.net.group_start();
    for (int i = 0; i < n; ++i) {
      if (i == r) continue;
      recvs.push_back(c.irecv(work.at(begin[i]), (begin[i + 1] - begin[i]) * esz, i, step));
      peers.push_back(i);
    }
    c.net.group_end();
    c.wait_all(recvs, peers, "reduce receive from");
  } else {
    auto s = c.isend(work.at(begin[r]), (begin[r + 1] - begin[r]) * esz, root, step);
    c.wait(*s, root, "reduce send to");
  }
}

void gather(Comm& c, const void* in, size_t bytes, const std::vector<void*>& out, int root) {
  if (c.rank() != root) {
    auto s = c.isend(in, bytes, root, 0);
    c.wait(*s, root, "gather send to");
    return;
  }
  std::vector<std::unique_ptr<Request>> recvs;
  std::vector<int> peers;
  c.net.group_start();
  for (int i = 0; i < c.size(); ++i) {
    if (i == root) continue;
    recvs.push_back(c.irecv(out[i], bytes, i, 0));
    peers.push_back(i);
  }
  c.net.group_end();
  c.wait_all(recvs, peers, "gather receive from");
}

void scatter(Comm& c, const std::vector<const void*>& in, void* out, size_t bytes, int root) {
  if (c.rank() != root) {
    auto q = c.irecv(out, bytes, root, 0);
    c.wait(*q, root, "scatter receive from");
    return;
  }
  std::vector<std::unique_ptr<Request>> sends;
  std::vector<int> peers;
  c.net.group_start();
  for (int i = 0; i < c.size(); ++i) {
    if (i == root) continue;
    sends.push_back(c.isend(in[i], bytes, i, 0));
    peers.push_back(i);
  }
  c.net.group_end();
  c.wait_all(sends, peers, "scatter send to");
}

}  // namespace ringzip
