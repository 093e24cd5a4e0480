// All-to-all exchanges: personalized all-to-all (n-1 concurrent pairs) and the
// dissemination barrier.
#include <cstring>
#include <vector>

#include "collective/algorithms.h"

namespace ringzip {

void alltoall(Comm& c, const std::vector<const void*>& sends, const std::vector<size_t>& send_bytes,
              const std::vector<void*>& recvs, const std::vector<size_t>& recv_bytes) {
  const int n = c.size(), r = c.rank();
  if (recv_bytes[r] > 0 && recvs[r] != sends[r]) std::memcpy(recvs[r], sends[r], recv_bytes[r]);
  std::vector<std::unique_ptr<Request>> reqs;
  std::vector<int> peers;
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
  c.wait_all(reqs, peers, "alltoall exchange with");
}

void barrier(Comm& c) {
  const int n = c.size(), r = c.rank();
  char out = 1, in = 0;
  uint32_t step = 0;
  for (int d = 1; d < n; d <<= 1, ++step) {
    auto q = c.irecv(&in, 1, (r - d + n) % n, step);
    auto s = c.isend(&out, 1, (r + d) % n, step);
    c.wait(*q, (r - d + n) % n, "barrier receive from");
    c.wait(*s, (r + d) % n, "barrier send to");
  }
}

}  // namespace ringzip
