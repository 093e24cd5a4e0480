// Collectives with a root: binomial-tree broadcast, reduce (reduce-scatter + gather to root),
// gather and scatter as direct exchanges with the root (collective/schedule.h).
#include <vector>

#include "collective/algorithms.h"
#include "collective/schedule.h"

namespace ringzip {

// Binomial tree over virtual ranks v = rank - root (mod n), K = ceil(log2 n) rounds: in round t
// every v that is a multiple of 2^(K-t) sends to v + 2^(K-1-t). As a schedule, step t's body
// sends round t and step t+1 receives it, so a rank whose lowest set bit is 2^m receives in
// step K-m and then serves its children, one per step.
void broadcast(Comm& c, Buf data, int root) {
  const int n = c.size();
  if (n == 1 || data.count == 0) return;
  const int v = (c.rank() - root + n) % n;
  auto real = [&](int u) { return (u + root) % n; };
  int K = 0;
  while ((1 << K) < n) ++K;
  int m = 0;  // v's lowest set bit (K for the root)
  while (m < K && !(v & (1 << m))) ++m;
  Schedule sch;
  sch.steps = K + 1;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    if (v != 0 && s == K - m) q.push_back({data.data, data.bytes(), real(v - (1 << m)), 0, "broadcast receive from"});
  };
  sch.body = [&](int s, Step& st) {
    if (s < K - m) return;
    if (s == K - m && v != 0) st.wait(0);
    if (s < K && v + (1 << (K - 1 - s)) < n)
      st.send(data.data, data.bytes(), real(v + (1 << (K - 1 - s))), 0, "broadcast send to");
  };
  run(c, sch);
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
  auto part = [&](int i, int peer, const char* what) {
    return Xfer{work.at(begin[i]), (begin[i + 1] - begin[i]) * esz, peer, step, what};
  };
  std::vector<Xfer> sends, recvs;
  if (r != root) sends.push_back(part(r, root, "reduce send to"));
  for (int i = 0; r == root && i < n; ++i)
    if (i != root) recvs.push_back(part(i, i, "reduce receive from"));
  run_exchange(c, sends, recvs);
}

void gather(Comm& c, const void* in, size_t bytes, const std::vector<void*>& out, int root) {
  std::vector<Xfer> sends, recvs;
  if (c.rank() != root) sends.push_back({const_cast<void*>(in), bytes, root, 0, "gather send to"});
  for (int i = 0; c.rank() == root && i < c.size(); ++i)
    if (i != root) recvs.push_back({out[i], bytes, i, 0, "gather receive from"});
  run_exchange(c, sends, recvs);
}

void scatter(Comm& c, const std::vector<const void*>& in, void* out, size_t bytes, int root) {
  std::vector<Xfer> sends, recvs;
  if (c.rank() != root) recvs.push_back({out, bytes, root, 0, "scatter receive from"});
  for (int i = 0; c.rank() == root && i < c.size(); ++i)
    if (i != root) sends.push_back({const_cast<void*>(in[i]), bytes, i, 0, "scatter send to"});
  run_exchange(c, sends, recvs);
}

}  // namespace ringzip
