// Log-step all-reduce for small messages: ranks beyond the largest power of two p fold their
// data into a partner first and receive the result last; the rest exchange whole buffers with
// partner rank^mask for each mask. Both partners compute op(lower rank's, higher rank's): MIN /
// MAX of +0 and -0, and NaN payloads under SUM, depend on the operand order, so the same order
// on both sides is what keeps every rank bitwise identical.
//
// The schedule (collective/schedule.h), with K = log2 p:
//   step 0        ranks >= p send their buffer to rank - p (the fold)
//   step 1        ranks < n - p add the folded buffer; ranks < p send theirs to rank ^ 1
//   step 1+k      (k = 1..K) ranks < p add the buffer of rank ^ 2^(k-1) and send to rank ^ 2^k,
//                 or, after the last exchange, the result to rank + p
//   step K+2      ranks >= p receive the result
// Every receive lands in the one scratch buffer (or, for the result, in data): nothing is posted
// ahead, but a step posts the next one's receive before its send (Step::receive_next).
#include <vector>

#include "collective/algorithms.h"
#include "collective/dense/fold.h"
#include "collective/schedule.h"

namespace ringzip {

void rd_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  const size_t bytes = data.bytes();
  auto scratch = c.dev.alloc(bytes);
  Fold f(c, data, scratch.get());
  const int p = f.p, K = f.K, extra = f.extra;
  Schedule sch;
  sch.steps = K + 3;
  f.last = sch.steps - 1;
  sch.ahead = 0;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    f.recvs(s, q);
    if (s >= 2 && s <= K + 1 && r < p)
      q.push_back({scratch.get(), bytes, r ^ (1 << (s - 2)), static_cast<uint32_t>(s - 1), "exchange receive from"});
  };
  sch.body = [&](int s, Step& st) {
    if (f.folded_body(s, st) || s == 0 || s > K + 1) return;
    if (s >= 2 || r < extra) {  // the partner's (or the folded) buffer
      st.wait(0);
      st.sends_done();  // data went to the partner before it changes
      const int partner = s == 1 ? r + p : r ^ (1 << (s - 2));
      if (partner < r) {  // op(partner's, own), left in scratch, then moved to data
        c.dev.reduce_into(data.dtype, op, scratch.get(), data.data, data.count);
        c.dev.copy(data.data, scratch.get(), bytes);
      } else {
        c.dev.reduce_into(data.dtype, op, data.data, scratch.get(), data.count);
      }
    }
    st.receive_next();  // scratch is free: the partner's buffer may land while ours travels
    if (s <= K)
      st.send(data.data, bytes, r ^ (1 << (s - 1)), static_cast<uint32_t>(s), "exchange send to");
    else
      f.send_result(st);
  };
  run(c, sch);
}

}  // namespace ringzip
