// All-to-all exchanges: personalized all-to-all (n-1 concurrent pairs) and the
// dissemination barrier.
#include <cstring>
#include <vector>

#include "collective/algorithms.h"

namespace ringzip {

void alltoall(Comm& c, const std::vector<const void*>& sends, const std::vector<size_t>& send_bytes,
              const std::vector<void*>& recvs, const std::vector<size_t>& recv_bytes) {
  const int n = c.size(), r = c.rank();
  c.dev.copy(recvs[r], sends[r], recv_bytes[r]);
  std::vector<std::unique_ptr<Request>> reqs;
  std::vector<int> peers;
  c.net.group_start();
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    reqs.push_back(c.irecv(recvs[from], recv_bytes[from], from, 0));
    peers.push_back(from);
  }
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    reqs.push_back(c.isend(sends[to], send_bytes[to], to, 0));
    peers.push_back(to);
  }
  c.net.group_end();
  c.wait_all(reqs, peers, "alltoall exchange with");
}

void barrier(Comm& c) {
  const int n = c.size(), r = c.rank();
  auto buf = c.dev.alloc(2);  // one byte out, one in
  c.dev.zero(buf.get(), 2);
  uint32_t step = 0;
  for (int d = 1; d < n; d <<= 1, ++step) {
    c.net.group_start();
    auto q = c.irecv(buf.get() + 1, 1, (r - d + n) % n, step);
    auto s = c.isend(buf.get(), 1, (r + d) % n, step);
    c.net.group_end();
    c.wait(*q, (r - d + n) % n, "barrier receive from");
    c.wait(*s, (r + d) % n, "barrier send to");
  }
}

}  // namespace ringzip
