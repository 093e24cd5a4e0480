// Dissemination barrier: in round k every rank sends one byte to rank + 2^k and receives one
// from rank - 2^k; after ceil(log2 n) rounds every rank has heard, indirectly, from all.
#include <vector>

#include "collective/algorithms.h"
#include "collective/schedule.h"

namespace ringzip {

// Step k sends round k's byte; step k+1 receives round k's byte (all into the same byte:
// posted once the one before landed, before step k's send).
void barrier(Comm& c) {
  const int n = c.size(), r = c.rank();
  auto buf = c.dev.alloc(2);  // one byte out, one in
  c.dev.zero(buf.get(), 2);
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  Schedule sch;
  sch.steps = rounds + 1;
  sch.ahead = 0;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    if (s > 0) q.push_back({buf.get() + 1, 1, (r - (1 << (s - 1)) + n) % n, uint32_t(s - 1), "barrier receive from"});
  };
  sch.body = [&](int s, Step& st) {
    if (s > 0) st.wait(0);
    st.receive_next();  // the byte is free: the round's receive goes before its send
    if (s < rounds) st.send(buf.get(), 1, (r + (1 << s)) % n, uint32_t(s), "barrier send to");
  };
  run(c, sch);
}

}  // namespace ringzip
