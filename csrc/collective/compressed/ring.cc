// Compressed ring: a reduce-scatter that re-encodes the partial sum at every hop (fused
// decode-add-encode), then the owner's gather of encoded parts. One schedule
// (collective/schedule.h) of n steps: step 0 encodes part (r-1) and sends it to the right; step
// s >= 1 receives the partial sum of part (r-s-1) from the left, adds its own and (but for the
// last step, which keeps the sum of its own part r) re-encodes it and sends it on.
#include <algorithm>
#include <vector>

#include "collective/algorithms.h"
#include "collective/compressed/common.h"
#include "collective/compressed/layout.h"
#include "collective/schedule.h"

namespace ringzip::compressed {
namespace {

// Every rank contributed its own encoded part of `l` in `wire`; gather all parts and decode.
void gather_encoded(Comm& c, const CompressedCall& call, const Layout& l, uint8_t* wire, float* data,
                    uint32_t step_base) {
  ring_allgather(c, Buf{wire, l.bytes.back(), DType::U8}, l.bytes, step_base);
  CodecTimer t(c);
  for (int i = 0; i < c.size(); ++i) {
    c.dev.decode(call.spec, wire + l.bytes[i], l.nbytes(i), l.len(i), l.elem[i], key(call, c, i, kGatherPhase),
                 data + l.elem[i]);
  }
}

// The owner encodes its reduced part once; all gather and decode. The owner's residual for its
// part is what that encode lost (sum - decode(encode(sum))), so error feedback also covers the
// second compression of biased codecs.
void owner_gather(Comm& c, float* data, const Layout& l, const CompressedCall& call, uint32_t step_base) {
  const int r = c.rank();
  auto wire = c.dev.alloc(l.bytes.back());
  const codec::RngKey k = key(call, c, r, kGatherPhase);
  encode(c, call, data + l.elem[r], l.len(r), l.elem[r], k, wire.get() + l.bytes[r]);
  record_residual(c, call, data + l.elem[r], wire.get() + l.bytes[r], l.nbytes(r), l.len(r), l.elem[r], k);
  gather_encoded(c, call, l, wire.get(), data, step_base);
}

}  // namespace

bool ring(Comm& c, float* data, size_t count, const CompressedCall& call) {
  add_residual(c, call, data, count);
  const int n = c.size(), r = c.rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  const Layout l = layout(call.spec, count, n);
  auto part = [&](int i) { return ((i % n) + n) % n; };
  size_t max_bytes = 0;
  for (int i = 0; i < n; ++i) max_bytes = std::max(max_bytes, l.nbytes(i));
  const int slots = lookahead(c, 1) + 1;  // step s receives into in(s)
  auto out = c.dev.alloc(max_bytes), in_slots = c.dev.alloc(slots * max_bytes);
  auto in = [&](int s) { return in_slots.get() + (s - 1) % slots * max_bytes; };
  const char* send_what = "compressed reduce-scatter send to";

  Schedule sch;
  sch.steps = n;
  sch.ahead = slots - 1;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {
    if (s > 0)
      q.push_back({in(s), l.nbytes(part(r - s - 1)), left, static_cast<uint32_t>(s - 1),
                   "compressed reduce-scatter receive from"});
  };
  sch.body = [&](int s, Step& st) {
    if (s == 0) {  // the first hop sends this rank's part (r-1), encoded at phase 1
      const int p0 = part(r - 1);
      encode(c, call, data + l.elem[p0], l.len(p0), l.elem[p0], key(call, c, r, 1), out.get());
      record_residual(c, call, data + l.elem[p0], out.get(), l.nbytes(p0), l.len(p0), l.elem[p0], key(call, c, r, 1));
      st.send(out.get(), l.nbytes(p0), right, 0, send_what);
      return;
    }
    const int p = part(r - s - 1);
    st.wait(0);
    st.sends_done();  // `out` is free again
    const codec::RngKey dec = key(call, c, left, s);
    if (s + 1 == n) {
      CodecTimer t(c);
      return c.dev.decode_accumulate(call.spec, in(s), l.nbytes(p), l.len(p), l.elem[p], dec, data + l.elem[p]);
    }
    {
      CodecTimer t(c);
      c.dev.decode_add_encode(call.spec, in(s), l.nbytes(p), data + l.elem[p], l.len(p), l.elem[p], dec,
                              key(call, c, r, s + 1), out.get());
      // This rank's share of a forwarded sum can't be told apart from the others' any more:
      // its residual is that of a local encode (an approximation, docs/algorithms.md).
      if (call.residual) {
        auto own = c.dev.alloc(l.nbytes(p));
        c.dev.encode(call.spec, codec::InType::F32, data + l.elem[p], l.len(p), l.elem[p], key(call, c, r, s + 1),
                     own.get());
        c.dev.decode(call.spec, own.get(), l.nbytes(p), l.len(p), l.elem[p], key(call, c, r, s + 1),
                     call.residual + l.elem[p]);
        c.dev.residual(call.residual + l.elem[p], data + l.elem[p], l.len(p));
      }
    }
    st.send(out.get(), l.nbytes(p), right, static_cast<uint32_t>(s), send_what);
  };
  run(c, sch);
  owner_gather(c, data, l, call, static_cast<uint32_t>(n));
  return false;
}

}  // namespace ringzip::compressed
