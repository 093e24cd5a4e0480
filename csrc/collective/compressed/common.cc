#include "collective/compressed/common.h"

namespace ringzip::compressed {

void encode(Comm& c, const CompressedCall& call, const float* x, size_t n, size_t off, const codec::RngKey& k,
            uint8_t* out) {
  CodecTimer t(c);
  c.dev.encode(call.spec, codec::InType::F32, x, n, off, k, out);
}

bool record_residual(Comm& c, const CompressedCall& call, const float* x, const uint8_t* payload, size_t bytes,
                     size_t n, size_t off, const codec::RngKey& k) {
  if (!call.residual) return true;
  CodecTimer t(c);
  return c.dev.decode_residual(call.spec, payload, bytes, n, off, k, x, call.residual + off);
}

void add_residual(Comm& c, const CompressedCall& call, float* data, size_t count, size_t off) {
  if (call.residual) c.dev.reduce_into(DType::F32, RedOp::Sum, data + off, call.residual + off, count);
}

void clear_residual(Comm& c, const CompressedCall& call, size_t off, size_t n) {
  if (call.residual) c.dev.zero(call.residual + off, n * sizeof(float));
}

}  // namespace ringzip::compressed
