// Fused bucket kernels of the q8/q4/q2/q1 codecs: quantize_avx512.cc (AVX-512 F/BW/VL/VBMI) and
// quantize_avx2.cc (AVX2 + FMA; its q1 kernels serve both sets). quantize_cpu.cc uses the widest set the CPU runs and falls back
// to its portable passes otherwise; all produce the same bytes (docs/wire-format.md), the
// portable passes being the readable statement of the arithmetic.
#pragma once
#include <cstdint>

namespace ringzip::codec::detail {

struct FusedQuant {
  const char* name;  // "avx512" or "avx2"
  // max |x| as ordered bits (abs_bits), like amax_bits.
  uint32_t (*amax)(const float* x, int64_t L);
  // Codes of a finite bucket, packed: element j's code (quant_code_stoch with dither byte d[j],
  // or quant_code_nearest when d is null) at bit j * bits of out; ceil(L * bits / 8) bytes
  // written, unused high bits of the last byte 0. bits is 8, 4 or 2. inv is finite.
  void (*codes_pack)(int bits, const float* x, const uint8_t* d, int64_t L, float inv, uint8_t* out);
  // sum[j] = quant_value(code j of `in`, step) + local[j] for the L packed codes of a bucket, and
  // *amax = max |sum| as ordered bits. Returns false (writing nothing useful) if a code of the
  // bytes covering L codes is all ones, the pattern no encoder writes.
  bool (*unpack_add)(int bits, const uint8_t* in, int64_t L, float step, const float* local, float* sum,
                     uint32_t* amax);
  // q1 of a finite bucket: the bits (x >= 0) packed LSB-first into ceil(L / 8) bytes of out,
  // unused high bits 0; returns the scale fl(q1 lane sum / L) (quantize_math.h's order).
  float (*q1_pack)(const float* x, int64_t L, uint8_t* out);
  // q1 decode of L packed bits: sum[j] = q1_value(bit j, scale), plus local[j] (added after,
  // as q1_add) unless local is null. Every bit pattern is valid.
  void (*q1_unpack_add)(const uint8_t* in, int64_t L, float scale, const float* local, float* sum);
  // q1_pack of s = x + r (error feedback), s formed on the way and stored (L floats), *amax =
  // max |s| as ordered bits; the bits and scale are q1_pack's for a finite s.
  float (*q1_add_pack)(const float* x, const float* r, int64_t L, float* s, uint8_t* out, uint32_t* amax);
};

// The AVX2 q1 kernels, which the AVX-512 set shares (quantize_avx2.cc).
float q1_pack_avx2(const float* x, int64_t L, uint8_t* out);
void q1_unpack_add_avx2(const uint8_t* in, int64_t L, float scale, const float* local, float* sum);
float q1_add_pack_avx2(const float* x, const float* r, int64_t L, float* s, uint8_t* out, uint32_t* amax);

// A set's table from its templates K::codes_pack<Bits, Dither>, K::unpack_add<Bits> and K::amax:
// the run-time switch over bits and dither.
template <class K>
struct FusedQuantOf {
  static void codes_pack(int bits, const float* x, const uint8_t* d, int64_t L, float inv, uint8_t* out) {
    const bool dither = d != nullptr;
    if (bits == 8)
      return dither ? K::template codes_pack<8, true>(x, d, L, inv, out)
                    : K::template codes_pack<8, false>(x, d, L, inv, out);
    if (bits == 4)
      return dither ? K::template codes_pack<4, true>(x, d, L, inv, out)
                    : K::template codes_pack<4, false>(x, d, L, inv, out);
    return dither ? K::template codes_pack<2, true>(x, d, L, inv, out)
                  : K::template codes_pack<2, false>(x, d, L, inv, out);
  }
  static bool unpack_add(int bits, const uint8_t* in, int64_t L, float step, const float* local, float* sum,
                         uint32_t* amax) {
    if (bits == 8) return K::template unpack_add<8>(in, L, step, local, sum, amax);
    if (bits == 4) return K::template unpack_add<4>(in, L, step, local, sum, amax);
    return K::template unpack_add<2>(in, L, step, local, sum, amax);
  }
  static constexpr FusedQuant table(const char* name) {
    return {name, K::amax, codes_pack, unpack_add, q1_pack_avx2, q1_unpack_add_avx2, q1_add_pack_avx2};
  }
};

// The K of a kernel file whose bucket templates are pack_bucket<Bits, Dither>,
// unpack_add_bucket<Bits> and amax_bits (function templates can't be template arguments).
#define RZ_FUSED_QUANT_KERNELS                                                                                         \
  struct Kernels {                                                                                                     \
    template <int Bits, bool Dither>                                                                                   \
    static void codes_pack(const float* x, const uint8_t* d, int64_t L, float inv, uint8_t* out) {                     \
      pack_bucket<Bits, Dither>(x, d, L, inv, out);                                                                    \
    }                                                                                                                  \
    template <int Bits>                                                                                                \
    static bool unpack_add(const uint8_t* in, int64_t L, float step, const float* local, float* sum, uint32_t* amax) { \
      return unpack_add_bucket<Bits>(in, L, step, local, sum, amax);                                                   \
    }                                                                                                                  \
    static uint32_t amax(const float* x, int64_t L) { return amax_bits(x, L); }                                        \
  }

// Each set, or null where this CPU (or this build) cannot run it.
const FusedQuant* fused_quant_avx512();
const FusedQuant* fused_quant_avx2();

// The set quantize_cpu.cc uses, chosen once: the widest available, unless RINGZIP_QUANT_KERNELS
// names one ("avx512", "avx2", or "portable" for none), which tests use to compare them on one
// machine. Null means the portable passes.
const FusedQuant* fused_quant();

}  // namespace ringzip::codec::detail
