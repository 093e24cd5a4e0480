// Per-element and per-bucket numerics of the q8/q4/q2/q1 codecs, shared by quantize_cpu.cc and
// its CUDA twin. See docs/wire-format.md for the layout these produce.
//
// q8/q4/q2 (b bits, s = 2^(b-1) - 1 levels each side):
//   scale = max|x| over the bucket (exact), inv = fl(s / scale) (0 if scale == 0 or it overflows),
//   t = fl(x * inv), code = clamp(floor(fl(t + u)), -s, s)       (stochastic, u from Philox:
//                                                                  u = (byte + 0.5) / 256)
//                    code = clamp(rne(t), -s, s)                  (nearest)
//   stored as code + s in b bits; decoded value = fl((float)code * fl(scale / s)).
// q1: scale = mean|x| = fl(sum / count) with the 8-lane summation order below (q1_rescaled where
//   that sum overflows); bit = (x >= 0);
//   decoded value = bit ? scale : -scale.
// A bucket holding NaN/Inf gets scale = NaN and all-zero codes (code s / bit 0): it decodes to NaN.
#pragma once
#include <cstdint>

#include "codec/hd.h"

namespace ringzip::codec {

constexpr uint32_t kQuantNaN = 0x7fc00000u;  // the scale written for a non-finite bucket
constexpr int kSumLanes = 8;                 // q1 mean: element j of a bucket adds into lane j % 8

RZ_HD int quant_levels(int bits) { return (1 << (bits - 1)) - 1; }

// |x| as an ordered integer: for non-negative floats the integer order is the float order,
// and anything >= 0x7f800000 is Inf or NaN.
RZ_HD uint32_t abs_bits(float x) { return f2u(x) & 0x7fffffffu; }
RZ_HD bool abs_bits_finite(uint32_t a) { return a < 0x7f800000u; }

// s / scale, or 0 for an all-zero bucket and for one so tiny (max|x| < s / FLT_MAX) that the
// quotient overflows: x * Inf would give codes at the clamps and decode with flipped signs.
// Codes are then all s (zero), as the reference's nan_to_num of x * Inf gives.
RZ_HD float quant_inv(float scale, int s) {
  const float inv = scale > 0.0f ? rz_div((float)s, scale) : 0.0f;
  return abs_bits_finite(abs_bits(inv)) ? inv : 0.0f;
}
RZ_HD float quant_step(float scale, int s) { return rz_div(scale, (float)s); }

// floor for |y| < 2^31 using only a truncating conversion (vectorizes without SSE4.1).
RZ_HD int32_t floor_i32(float y) {
  int32_t i = (int32_t)y;
  return i - (y < (float)i ? 1 : 0);
}
RZ_HD int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The dither of an element from its Philox byte (philox.h, codec version 2): u = (byte + 0.5) / 256,
// exact in float, the centres of the 256 cells of [0, 1). With t = x * inv and p = t - floor(t),
// E[code] - t = (round(256 p) - 256 p) / 256 up to ties, so the bias of a decoded value is at most
// step / 512 in magnitude (docs/wire-format.md, "Stochastic rounding").
RZ_HD float dither_from_byte(uint32_t b) { return ((float)(int32_t)b + 0.5f) * (1.0f / 256.0f); }

// Unsigned code in [0, 2s] of a finite x, stochastic rounding with dither u in [0, 1).
RZ_HD uint32_t quant_code_stoch(float x, float inv, float u, int s) {
  float y = rz_add(rz_mul(x, inv), u);
  return (uint32_t)(clamp_i32(floor_i32(y), -s, s) + s);
}
// Unsigned code, round to nearest even (adding and removing 1.5 * 2^23 rounds |t| < 2^22 to RNE).
RZ_HD uint32_t quant_code_nearest(float x, float inv, int s) {
  float t = rz_mul(x, inv);
  float r = rz_add(rz_add(t, 12582912.0f), -12582912.0f);
  return (uint32_t)(clamp_i32((int32_t)r, -s, s) + s);
}
RZ_HD float quant_value(uint32_t code, float step, int s) { return rz_mul((float)((int32_t)code - s), step); }

RZ_HD float q1_value(uint32_t bit, float scale) { return bit ? scale : -scale; }
// q1's scale when the lane sum of a finite bucket overflows (fl(sum / count) = +Inf although the
// mean is at most max|x|): the same lane sums over |x| * 2^-64 (exact but for elements below
// 2^-62, which cannot matter next to a sum near FLT_MAX), then fl(fl(sum' / count) * 2^64),
// capped at FLT_MAX. Any other bucket never takes this path, so its scale is unchanged.
constexpr float kQ1Down = 0x1p-64f, kQ1Up = 0x1p64f;
RZ_HD float q1_rescaled(float scaled_sum, float count) {
  const float m = rz_mul(rz_div(scaled_sum, count), kQ1Up);
  return m < 3.40282347e38f ? m : 3.40282347e38f;
}
// Combines the 8 lane sums of a q1 bucket in a fixed tree.
RZ_HD float q1_combine(const float* l) {
  return rz_add(rz_add(rz_add(l[0], l[1]), rz_add(l[2], l[3])), rz_add(rz_add(l[4], l[5]), rz_add(l[6], l[7])));
}

}  // namespace ringzip::codec
