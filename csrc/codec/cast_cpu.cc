// none / fp16 / bf16 codecs on the CPU: element-wise casts, little-endian on the wire.
#include <cstring>

#include "codec/cast_math.h"
#include "codec/codec_impl.h"

namespace ringzip::codec::detail {
namespace {

template <typename Conv>
void cast16(InType t, const void* x, int64_t n, uint8_t* out, Conv conv) {
  constexpr int64_t kBlock = 1024;
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
    for (int64_t i = 0; i < m; ++i) ob[i] = conv(xf[i]);
    std::memcpy(out + 2 * b, ob, 2 * m);
  }
}

template <typename Conv>
void uncast16(const uint8_t* in, int64_t n, float* out, bool acc, Conv conv) {
  constexpr int64_t kBlock = 1024;
  uint16_t ib[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t m = n - b < kBlock ? n - b : kBlock;
    std::memcpy(ib, in + 2 * b, 2 * m);
    float* o = out + b;
    if (acc)
      for (int64_t i = 0; i < m; ++i) o[i] = rz_add(o[i], conv(ib[i]));
    else
      for (int64_t i = 0; i < m; ++i) o[i] = conv(ib[i]);
  }
}

}  // namespace

void cast_encode(const Spec& sp, InType t, const void* x, int64_t n, uint8_t* out) {
  switch (sp.kind) {
    case Kind::None:
      if (t == InType::F32) {
        std::memcpy(out, x, 4 * n);
      } else {
        constexpr int64_t kBlock = 1024;
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
      return cast16(t, x, n, out, [](float f) { return f32_to_f16_bits(f); });
    case Kind::Bf16:
      if (t == InType::BF16) return (void)std::memcpy(out, x, 2 * n);
      return cast16(t, x, n, out, [](float f) { return f32_to_bf16_bits(f); });
    default:
      fail("cast_encode: not a cast codec");
  }
}

void cast_decode(const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc) {
  switch (sp.kind) {
    case Kind::None:
      if (!acc) return (void)std::memcpy(out, in, 4 * n);
      {
        constexpr int64_t kBlock = 1024;
        float buf[kBlock];
        for (int64_t b = 0; b < n; b += kBlock) {
          int64_t m = n - b < kBlock ? n - b : kBlock;
          std::memcpy(buf, in + 4 * b, 4 * m);
          for (int64_t i = 0; i < m; ++i) out[b + i] = rz_add(out[b + i], buf[i]);
        }
      }
      return;
    case Kind::Fp16:
      return uncast16(in, n, out, acc, [](uint16_t h) { return f16_bits_to_f32(h); });
    case Kind::Bf16:
      return uncast16(in, n, out, acc, [](uint16_t h) { return bf16_bits_to_f32(h); });
    default:
      fail("cast_decode: not a cast codec");
  }
}

}  // namespace ringzip::codec::detail
