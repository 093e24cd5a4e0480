// none / fp16 / bf16 codecs on the CPU: element-wise casts, little-endian on the wire.
#include <cstring>

#include "codec/cast_math.h"
#include "codec/codec_impl.h"

namespace ringzip::codec::detail {
namespace {

// The conversions are branch-free integer code; cloned loops let them run in wide vectors
// (lambdas can't carry target_clones, hence one function per direction and format).
RZ_CLONES void to_f16(const float* x, int64_t m, uint16_t* o) {
  for (int64_t i = 0; i < m; ++i) o[i] = f32_to_f16_bits(x[i]);
}
RZ_CLONES void to_bf16(const float* x, int64_t m, uint16_t* o) {
  for (int64_t i = 0; i < m; ++i) o[i] = f32_to_bf16_bits(x[i]);
}
RZ_CLONES void from_f16(const uint16_t* h, int64_t m, float* o, bool acc) {
  if (acc)
    for (int64_t i = 0; i < m; ++i) o[i] = rz_add(o[i], f16_bits_to_f32(h[i]));
  else
    for (int64_t i = 0; i < m; ++i) o[i] = f16_bits_to_f32(h[i]);
}
RZ_CLONES void from_bf16(const uint16_t* h, int64_t m, float* o, bool acc) {
  if (acc)
    for (int64_t i = 0; i < m; ++i) o[i] = rz_add(o[i], bf16_bits_to_f32(h[i]));
  else
    for (int64_t i = 0; i < m; ++i) o[i] = bf16_bits_to_f32(h[i]);
}
RZ_CLONES void add_f32(const float* in, int64_t m, float* o) {
  for (int64_t i = 0; i < m; ++i) o[i] = rz_add(o[i], in[i]);
}

// Blocks keep the widened input and the (possibly unaligned) wire bytes in cache-resident
// scratch; the wire is little-endian and byte-addressed, so it goes through memcpy.
constexpr int64_t kBlock = 1024;

void cast16(InType t, const void* x, int64_t n, uint8_t* out, bool bf16) {
  float buf[kBlock];
  uint16_t ob[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t m = n - b < kBlock ? n - b : kBlock;
    const float* xf;
    if (t == InType::F32) {
      xf = static_cast<const float*>(x) + b;
    } else {
      load_f32(t, x, b, m, buf);
      xf = buf;
    }
    bf16 ? to_bf16(xf, m, ob) : to_f16(xf, m, ob);
    std::memcpy(out + 2 * b, ob, 2 * m);
  }
}

void uncast16(const uint8_t* in, int64_t n, float* out, bool acc, bool bf16) {
  uint16_t ib[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t m = n - b < kBlock ? n - b : kBlock;
    std::memcpy(ib, in + 2 * b, 2 * m);
    bf16 ? from_bf16(ib, m, out + b, acc) : from_f16(ib, m, out + b, acc);
  }
}

}  // namespace

void cast_encode(const Spec& sp, InType t, const void* x, int64_t n, uint8_t* out) {
  switch (sp.kind) {
    case Kind::None:
      if (t == InType::F32) {
        std::memcpy(out, x, 4 * n);
      } else {
        float buf[kBlock];
        for (int64_t b = 0; b < n; b += kBlock) {
          int64_t m = n - b < kBlock ? n - b : kBlock;
          load_f32(t, x, b, m, buf);
          std::memcpy(out + 4 * b, buf, 4 * m);
        }
      }
      return;
    case Kind::Fp16:
      if (t == InType::F16) return (void)std::memcpy(out, x, 2 * n);
      return cast16(t, x, n, out, false);
    case Kind::Bf16:
      if (t == InType::BF16) return (void)std::memcpy(out, x, 2 * n);
      return cast16(t, x, n, out, true);
    default: fail("cast_encode: not a cast codec");
  }
}

void cast_decode(const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc) {
  switch (sp.kind) {
    case Kind::None:
      if (!acc) return (void)std::memcpy(out, in, 4 * n);
      {
        float buf[kBlock];
        for (int64_t b = 0; b < n; b += kBlock) {
          int64_t m = n - b < kBlock ? n - b : kBlock;
          std::memcpy(buf, in + 4 * b, 4 * m);
          add_f32(buf, m, out + b);
        }
      }
      return;
    case Kind::Fp16: return uncast16(in, n, out, acc, false);
    case Kind::Bf16: return uncast16(in, n, out, acc, true);
    default: fail("cast_decode: not a cast codec");
  }
}

}  // namespace ringzip::codec::detail
