// Entry points of the compressed collectives (collective/compressed.h): the single-rank round
// trip, the algorithm the planner resolved (CompressedCall::algo), and the residual's final check.
#include "collective/compressed/common.h"
#include "common/check.h"

namespace ringzip {

using namespace compressed;

void compressed_reduce_scatter(Comm& c, float* data, size_t count, const CompressedCall& call) {
  if (c.size() == 1 || count == 0) {  // nothing compressed
    add_residual(c, call, data, count);
    return clear_residual(c, call, 0, count);
  }
  const bool residual_finite = sra(c, data, count, call, false);
  if (call.residual && !residual_finite) c.dev.drop_nonfinite(call.residual, count);
}

void compressed_allreduce(Comm& c, float* data, size_t count, const CompressedCall& call) {
  if (c.size() == 1 || count == 0) {
    // Still one encode/decode round trip, so results do not depend on the world size's path.
    if (count == 0) return;
    add_residual(c, call, data, count);
    const size_t bytes = codec::encoded_bytes(call.spec, count);
    auto wire = c.dev.alloc(bytes);
    const codec::RngKey k = key(call, c, 0, kGatherPhase);
    encode(c, call, data, count, 0, k, wire.get());
    record_residual(c, call, data, wire.get(), bytes, count, 0, k);
    CodecTimer t(c);
    c.dev.decode(call.spec, wire.get(), bytes, count, 0, k, data);
    if (call.residual) c.dev.drop_nonfinite(call.residual, count);
    return;
  }
  // Each algorithm adds the residual owed by earlier calls itself (top-k and sra on host
  // transports fuse it into their encodes) and says whether the new one is known to be finite.
  const bool sparse_codec = call.spec.kind == codec::Kind::TopK || call.spec.kind == codec::Kind::RandomK;
  RZ_CHECK(call.algo != CompressedAlgo::Auto && sparse_codec == (call.algo == CompressedAlgo::Sparse),
           "compressed all-reduce: codec ", codec::name(call.spec),
           " runs on the sparse algorithm if it is top-k or random-k, else on ring or sra (the planner resolves "
           "\"auto\")");
  bool residual_finite;
  switch (call.algo) {
    case CompressedAlgo::Ring: residual_finite = ring(c, data, count, call); break;
    case CompressedAlgo::Sparse:
      residual_finite =
          call.spec.kind == codec::Kind::TopK ? topk(c, data, count, call) : randomk(c, data, count, call);
      break;
    default: residual_finite = sra(c, data, count, call, true);  // Sra
  }
  if (call.residual && !residual_finite) c.dev.drop_nonfinite(call.residual, count);
}

}  // namespace ringzip
