// Random-k all-reduce: every rank selects the same indices (keyed by seed and call number
// only), so the k values can be summed by an exact all-reduce (the planner's rule picks it: CompressedCall::values_rule);
// one more slot carries the "saw a NaN/Inf" flag as NaN (codec::randomk_to_values).
#include "collective/algorithms.h"
#include "collective/compressed/common.h"
#include "common/check.h"

namespace ringzip::compressed {

bool randomk(Comm& c, float* data, size_t count, const CompressedCall& call) {
  add_residual(c, call, data, count);
  const size_t pb = codec::encoded_bytes(call.spec, count);
  const size_t k = static_cast<size_t>(codec::k_for(call.spec, count));
  const codec::RngKey key0 = key(call, c, c.rank(), 0);
  auto payload = c.dev.alloc(pb);
  auto vals = c.dev.alloc((k + 1) * sizeof(float));
  float* v = reinterpret_cast<float*>(vals.get());
  encode(c, call, data, count, 0, key0, payload.get());
  record_residual(c, call, data, payload.get(), pb, count, 0, key0);
  c.dev.randomk_to_values(payload.get(), k, v);
  RZ_CHECK(call.values_rule, "random-k: no rule for the values' all-reduce");
  const Buf values{v, k + 1, DType::F32};
  allreduce(c, values, RedOp::Sum, call.values_rule(values.bytes(), c.size()));
  c.dev.randomk_from_values(v, k, payload.get());
  CodecTimer t(c);
  c.dev.decode(call.spec, payload.get(), pb, count, 0, key0, data);
  return false;
}

}  // namespace ringzip::compressed
