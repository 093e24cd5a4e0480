// Personalized all-to-all: one round of n-1 concurrent pairs (collective/schedule.h).
#include <vector>

#include "collective/algorithms.h"
#include "collective/schedule.h"

namespace ringzip {

void alltoall(Comm& c, const std::vector<const void*>& sends, const std::vector<size_t>& send_bytes,
              const std::vector<void*>& recvs, const std::vector<size_t>& recv_bytes) {
  const int n = c.size(), r = c.rank();
  c.dev.copy(recvs[r], sends[r], recv_bytes[r]);
  std::vector<Xfer> out, in;
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n, to = (r + k) % n;
    in.push_back({recvs[from], recv_bytes[from], from, 0, "alltoall exchange with"});
    out.push_back({const_cast<void*>(sends[to]), send_bytes[to], to, 0, "alltoall exchange with"});
  }
  run_exchange(c, out, in);
}

}  // namespace ringzip
