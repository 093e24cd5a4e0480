// float32 <-> float16 / bfloat16 conversions, round-to-nearest-even, written with integer and
// exactly-rounded float operations only so that host and device produce the same bits.
// NaN maps to a canonical quiet NaN with the input's sign (fp16: 0x7e00, bf16: 0x7fc0).
#pragma once
#include <cstdint>

#include "codec/hd.h"

namespace ringzip::codec {

// c ? a : b as bit arithmetic: GCC if-converts it where a ternary over computed floats would
// stay a branch and stop the loop from vectorizing.
RZ_HD uint32_t select_u32(bool c, uint32_t a, uint32_t b) { return b ^ ((a ^ b) & (0u - (uint32_t)c)); }

// Branch-free (all candidates computed, then selected) so that CPU loops vectorize.
RZ_HD uint16_t f32_to_f16_bits(float f) {
  uint32_t u = f2u(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  // >= 65520 rounds to inf; NaN -> canonical quiet NaN
  uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // normal half (>= 2^-14): rebias exponent 127 -> 15 and round the 13 dropped bits to nearest even
  uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // subnormal half or zero: adding 0.5 (ulp 2^-24) rounds |f| to a multiple of 2^-24 (RNE)
  uint32_t sub = f2u(rz_add(u2f(a), 0.5f)) - 0x3f000000u;
  uint32_t h = select_u32(a >= 0x477ff000u, big, select_u32(a >= 0x38800000u, normal, sub));
  return (uint16_t)(sign | h);
}

RZ_HD float f16_bits_to_f32(uint16_t hb) {
  uint32_t h = hb;
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t infnan = 0x7f800000u | (m << 13);
  uint32_t normal = ((e + 112u) << 23) | (m << 13);
  uint32_t sub = f2u(rz_mul((float)(int32_t)m, 1.0f / 16777216.0f));  // m * 2^-24, exact
  uint32_t u = select_u32(e == 0x1fu, infnan, select_u32(e != 0, normal, sub));
  return u2f(sign | u);
}

RZ_HD uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

RZ_HD float bf16_bits_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

}  // namespace ringzip::codec
