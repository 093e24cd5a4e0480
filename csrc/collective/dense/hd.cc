// Recursive halving-doubling all-reduce (Rabenseifner): the ring's bytes (2(p-1)/p of the
// buffer per rank) in 2·log2 p steps instead of 2(n-1), where recursive doubling sends log2 p
// whole buffers -- for the sizes between the two.
//
// Ranks beyond the largest power of two p fold their buffer into rank - p first and receive the
// result last (dense/fold.h, as recursive doubling does). The p others cut the buffer into p blocks (even_parts) and run 2K
// rounds, K = log2 p. Halving round q (mask m = p/2^(q+1)) halves the window of blocks a rank
// is responsible for: it keeps the m blocks around its own rank, sends the m around rank ^ m to
// that rank and adds what comes back; after K rounds rank r holds block r reduced over all
// ranks. Doubling round K+q (mask 2^q) mirrors it: a rank sends the 2^q blocks it holds to
// rank ^ 2^q and receives that rank's in place. Each reduction is op(lower rank's, higher
// rank's): MIN / MAX of +0 and -0 and NaN payloads under SUM depend on the operand order, and
// the reference simulates exactly this order. Each block is reduced on one rank and copied to
// the others, so every rank ends with the same bits.
//
// The schedule (collective/schedule.h):
//   step 0          ranks >= p send their buffer to rank - p (the fold)
//   step 1          ranks < n - p add the folded buffer; ranks < p send round 0
//   step q+2        (q = 0..2K-1) ranks < p finish round q (add the half received, or take the
//                   blocks received in place) and send round q+1, or after the last round the
//                   result to rank + p
//   step 2K+2       ranks >= p receive the result
// Halving receives share one scratch buffer, and doubling receives land in blocks this rank sent
// away while halving: nothing may be posted ahead of the step before (Step::receive_next).
#include <vector>

#include "collective/algorithms.h"
#include "collective/dense/fold.h"
#include "collective/schedule.h"

namespace ringzip {

void hd_allreduce(Comm& c, Buf data, RedOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || data.count == 0) return;
  const size_t bytes = data.bytes(), esz = dtype_size(data.dtype);
  auto scratch = c.dev.alloc(bytes);
  Fold f(c, data, scratch.get());
  const int p = f.p, K = f.K, extra = f.extra, rounds = 2 * K;
  const std::vector<size_t> begin = even_parts(data.count, p);
  auto mask = [&](int q) { return q < K ? p >> (q + 1) : 1 << (q - K); };
  // The m blocks around `rank`: first element and element count.
  auto span = [&](int rank, int m) {
    const int b = rank & ~(m - 1);
    return std::pair<size_t, size_t>{begin[b], begin[b + m] - begin[b]};
  };
  // Round q's receive: halving gets the partner's copy of this rank's window into scratch,
  // doubling the partner's window in place. Empty blocks (fewer elements than ranks) travel as
  // no message at all, on both sides.
  auto recv_of = [&](int q) {
    const int m = mask(q), partner = r ^ m;
    const auto [at, len] = span(q < K ? r : partner, m);
    void* dst = q < K ? static_cast<void*>(scratch.get()) : data.at(at);
    return Xfer{dst, len * esz, partner, static_cast<uint32_t>(q + 1), "halving-doubling receive from"};
  };
  Schedule sch;
  sch.steps = rounds + 3;
  f.last = sch.steps - 1;
  sch.ahead = 0;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    f.recvs(s, q);
    if (s >= 2 && s <= rounds + 1 && r < p) {
      const Xfer x = recv_of(s - 2);
      if (x.bytes) q.push_back(x);
    }
  };
  sch.body = [&](int s, Step& st) {
    if (f.folded_body(s, st) || s == 0 || s > rounds + 1) return;
    if (s == 1 && r < extra) {  // op(own, folded): the folded rank is the higher one
      st.wait(0);
      c.dev.reduce_into(data.dtype, op, data.data, scratch.get(), data.count);
    }
    const int q = s - 2;  // the round finishing in this step
    if (q >= 0 && recv_of(q).bytes) st.wait(0);
    if (q >= 0 && q < K) {
      const int partner = r ^ mask(q);
      const auto [at, len] = span(r, mask(q));
      if (partner < r) {  // op(partner's, own), left in scratch, then moved to data
        c.dev.reduce_into(data.dtype, op, scratch.get(), data.at(at), len);
        c.dev.copy(data.at(at), scratch.get(), len * esz);
      } else {
        c.dev.reduce_into(data.dtype, op, data.at(at), scratch.get(), len);
      }
    }
    // The doubling receives (posted from here on) overwrite the halves sent while halving.
    if (q == K - 1) st.sends_done();
    st.receive_next();  // before the send, so both directions of the exchange run at once
    if (s <= rounds) {  // round s-1: halving sends the partner's window, doubling this rank's
      const int m = mask(s - 1), partner = r ^ m;
      const auto [at, len] = span(s - 1 < K ? partner : r, m);
      if (len) st.send(data.at(at), len * esz, partner, static_cast<uint32_t>(s), "halving-doubling send to");
    } else {
      f.send_result(st);
    }
  };
  run(c, sch);
}

}  // namespace ringzip
