// Sparse all-reduce of top-k payloads, pipelined per block: top-k selects within blocks of
// call.topk_block elements, so block q's payload leaves for every peer while block q+1 is being
// selected. One schedule (collective/schedule.h) of blocks+1 steps: step q < blocks encodes
// block q and sends it to every peer, who receive it in step q+1; the last step adds every
// block, in block then rank order (the same order, so the same bits, everywhere).
#include <vector>

#include "collective/compressed/common.h"
#include "collective/compressed/layout.h"
#include "collective/schedule.h"

namespace ringzip::compressed {

// Returns whether the residual is known to be finite.
bool topk(Comm& c, float* data, size_t count, const CompressedCall& call) {
  const int n = c.size(), r = c.rank();
  const Layout l = topk_blocks(call.spec, count, call.topk_block);
  const int blocks = l.parts();
  const size_t pb = l.bytes.back();
  auto wire = c.dev.alloc(pb * n);
  auto payload = [&](int j, int q) { return wire.get() + pb * j + l.bytes[q]; };
  auto len = [&](int q) { return static_cast<int64_t>(l.len(q)); };
  bool fused = call.residual != nullptr;  // residual added, data zeroed, residual left in one pass
  bool finite = fused;                    // ... and every block's residual finite

  Schedule sch;
  sch.steps = blocks + 1;
  sch.recvs = [&](int s, std::vector<Xfer>& q) {  // block s-1 of every peer; peer j is receive j - (j > r)
    for (int j = 0; s > 0 && j < n; ++j)
      if (j != r)
        q.push_back(
            {payload(j, s - 1), l.nbytes(s - 1), j, static_cast<uint32_t>(s - 1), "compressed allgather receive from"});
  };
  sch.body = [&](int q, Step& st) {
    if (q < blocks) {
      float* x = data + l.elem[q];
      if (fused) {
        CodecTimer t(c);
        bool block_finite = false;
        fused = c.dev.topk_feedback(call.spec, x, call.residual + l.elem[q], len(q), payload(r, q), block_finite);
        finite = finite && fused && block_finite;
        // The device decides: false at q = 0 (nothing touched) means never fused here.
      }
      if (!fused) {
        if (q == 0) add_residual(c, call, data, count);
        encode(c, call, x, l.len(q), l.elem[q], key(call, c, r, 0), payload(r, q));
        record_residual(c, call, x, payload(r, q), l.nbytes(q), l.len(q), l.elem[q], key(call, c, r, 0));
      }
      for (int k = 1; k < n; ++k)
        st.send(payload(r, q), l.nbytes(q), (r + k) % n, static_cast<uint32_t>(q), "compressed allgather send to");
      return;
    }
    if (!fused) {  // the sparse sum accumulates into data
      CodecTimer t(c);
      c.dev.zero(data, count * sizeof(float));
    }
    for (int b = 0; b < blocks; ++b) {
      for (int j = 0; j < n; ++j) {
        if (j != r) st.wait(b + 1, j - (j > r));
        CodecTimer t(c);
        c.dev.decode_accumulate(call.spec, payload(j, b), l.nbytes(b), len(b), l.elem[b], key(call, c, j, 0),
                                data + l.elem[b]);
      }
    }
  };
  run(c, sch);
  return finite;
}

}  // namespace ringzip::compressed
