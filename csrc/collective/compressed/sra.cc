// SRA (scatter-reduce-allgather): part i of every rank's data goes, encoded, to its owner i
// (the owner's own contribution stays exact); the owner adds what it receives in rank order,
// encodes the sum once and sends it to every rank; everybody decodes. Each value is encoded
// once toward its owner and once for the gather, so the error does not grow with n.
//
// Pipelined in bucket-aligned segments (compressed/layout.h: the same bits as unsegmented) as
// one schedule (collective/schedule.h) whose step s
//   A. encodes segment s of every peer's part and sends it to the part's owner;
//   B. adds the peers' segments s-1 of this rank's part (received in step s, in rank order)
//      and, with `gather`, encodes the sum, keeps decode(encode(sum)) and sends the encoding to
//      every peer (one fused pass: Compute::reduce_encode);
//   C. decodes the owners' segments s-2 (received in step s).
// So the codec of one segment runs while others are on the wire, and every step waits only for
// data its peers sent the step before. With CompressedCall::lag L > 1 (a long link) B and C lag
// A by L segments instead of one (step s: A(s), B(s - L), C(s - 2L)): L segments are on their
// way before the first wait, and the call waits for the link's delay once per L segments, not
// once per segment. The same work on the same bytes in the same order per segment: the same
// bits.
#include <algorithm>
#include <memory>
#include <vector>

#include "collective/compressed/common.h"
#include "collective/compressed/layout.h"
#include "collective/schedule.h"

namespace ringzip::compressed {

bool sra(Comm& c, float* data, size_t count, const CompressedCall& call, bool gather) {
  const int n = c.size(), r = c.rank();
  const Layout l = layout(call.spec, count, n);
  const Segments g = segments(call.spec, l, call.segment_elems ? call.segment_elems : kSegmentElems);
  // mine: my encodings of every part; reduce_in: peers' encodings of my part (one slot per
  // peer); gather_in: the owners' encodings of their parts; my own part's is mine[r].
  std::vector<std::shared_ptr<uint8_t>> mine(n), reduce_in(n), gather_in(n);
  for (int i = 0; i < n; ++i) {
    if (i != r || gather) mine[i] = c.dev.alloc(g.total_bytes(i));
    if (i == r) continue;
    reduce_in[i] = c.dev.alloc(g.total_bytes(r));
    if (gather) gather_in[i] = c.dev.alloc(g.total_bytes(i));
  }
  bool finite = true;  // every residual written so far known free of NaN/Inf
  auto encode_segment = [&](int i, size_t t, const codec::RngKey& k) {  // a peer's part
    const size_t e = g.elem[i][t];
    uint8_t* out = mine[i].get() + g.bytes[i][t];
    if (call.residual) {  // what earlier calls owe goes along
      CodecTimer timer(c);
      bool seg_finite = false;
      if (c.dev.encode_feedback(call.spec, data + e, call.residual + e, static_cast<int64_t>(g.len(i, t)), e, k, out,
                                seg_finite)) {
        finite = finite && seg_finite;
        return;
      }
      add_residual(c, call, data, g.len(i, t), e);
    }
    encode(c, call, data + e, g.len(i, t), e, k, out);
    const bool seg_finite = record_residual(c, call, data + e, out, g.nbytes(i, t), g.len(i, t), e, k);
    finite = finite && seg_finite;
  };
  const char* send_what = "compressed all-reduce send to";
  std::vector<const uint8_t*> in;  // B: the peers' segments of this rank's part, and their keys
  std::vector<codec::RngKey> keys;

  size_t iterations = 0;
  for (int i = 0; i < n; ++i) iterations = std::max(iterations, g.count(i));
  Schedule sch;
  const bool eager = lookahead(c, Schedule::kAnyAhead) > 0;  // a grouped executor runs lag 1 only
  const int L = eager ? static_cast<int>(std::clamp<size_t>(call.lag, 1, std::max<size_t>(1, iterations))) : 1;
  sch.lag = L;
  sch.steps = static_cast<int>(iterations) + (gather ? 2 : 1) * L;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    const size_t t = s - L;
    for (int j = 0; s >= L && t < g.count(r) && j < n; ++j)
      if (j != r)
        q.push_back({reduce_in[j].get() + g.bytes[r][t], g.nbytes(r, t), j, static_cast<uint32_t>(t),
                     "compressed scatter-reduce receive from"});
    const int u = s - 2 * L;
    for (int j = 0; gather && u >= 0 && j < n; ++j)
      if (j != r && u < static_cast<int>(g.count(j)))
        q.push_back({gather_in[j].get() + g.bytes[j][u], g.nbytes(j, u), j, kGatherStep | u,
                     "compressed allgather receive from"});
  };
  sch.body = [&](int s, Step& st) {
    const size_t it = s;
    if (s == 0 && !gather) {  // this rank's part stays exact: it takes what earlier calls owe in full
      add_residual(c, call, data, l.len(r), l.elem[r]);  // (with the gather, B's reduce_encode adds it)
      clear_residual(c, call, l.elem[r], l.len(r));
    }
    for (int k = 1; k < n; ++k) {  // A, staggered so that every owner is served from the start
      const int i = (r + k) % n;
      if (it >= g.count(i)) continue;
      encode_segment(i, it, key(call, c, r, 0));
      st.send(mine[i].get() + g.bytes[i][it], g.nbytes(i, it), i, static_cast<uint32_t>(it), send_what);
    }
    size_t next = 0;                            // this step's next receive
    if (s >= L && it - L < g.count(r)) {  // B
      const size_t t = it - L, e = g.elem[r][t];
      if (gather) {  // every peer's segment, then add, encode and decode in one trip through memory
        in.clear();
        keys.clear();
        for (int j = 0; j < n; ++j) {
          if (j == r) continue;
          st.wait(next++);
          in.push_back(reduce_in[j].get() + g.bytes[r][t]);
          keys.push_back(key(call, c, j, 0));
        }
        // The owner keeps decode(encode(sum)) like everyone else, so all ranks agree bitwise.
        CodecTimer timer(c);
        uint8_t* out = mine[r].get() + g.bytes[r][t];
        const bool seg_finite =
            c.dev.reduce_encode(call.spec, in.data(), g.nbytes(r, t), n - 1, keys.data(), data + e, g.len(r, t), e,
                                key(call, c, r, kGatherPhase), out, call.residual ? call.residual + e : nullptr);
        finite = finite && seg_finite;
        for (int k = 1; k < n; ++k)
          st.send(out, g.nbytes(r, t), (r + k) % n, kGatherStep | static_cast<uint32_t>(t), send_what);
      } else {
        for (int j = 0; j < n; ++j) {
          if (j == r) continue;
          st.wait(next++);
          CodecTimer timer(c);
          c.dev.decode_accumulate(call.spec, reduce_in[j].get() + g.bytes[r][t], g.nbytes(r, t), g.len(r, t), e,
                                  key(call, c, j, 0), data + e);
        }
      }
    }
    if (gather && s >= 2 * L) {  // C
      const size_t t = it - 2 * L;
      for (int j = 0; j < n; ++j) {
        if (j == r || t >= g.count(j)) continue;
        st.wait(next++);
        const size_t e = g.elem[j][t];
        CodecTimer timer(c);
        c.dev.decode(call.spec, gather_in[j].get() + g.bytes[j][t], g.nbytes(j, t), g.len(j, t), e,
                     key(call, c, j, kGatherPhase), data + e);
      }
    }
  };
  run(c, sch);
  return finite;
}

}  // namespace ringzip::compressed
