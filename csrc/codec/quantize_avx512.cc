// Fused AVX-512 bucket kernels of the q8/q4/q2 codecs (see quantize_fused.h). The portable
// passes in quantize_cpu.cc write unpacked codes to scratch and pack them in a second pass, one
// target_clones call per pass; here a bucket's codes are computed, packed in registers and stored
// in one sweep, and decode + add + max |sum| is one sweep too, so a bucket costs a few loads per
// 64 elements besides the arithmetic. Groups of 64 elements (one 64-byte vector of codes); a
// bucket's tail uses masked loads and stores, so no scratch padding is needed.
//
// Floors and roundings use the AVX-512 conversion with a static rounding mode: for |t| < 2^22 it
// is exactly floor_i32 / quant_code_nearest's rounding. Callers guarantee that bound by handing
// only buckets with a finite inv (|x * inv| <= s + 1), so the codes equal the portable ones.
#include "codec/quantize_fused.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(RINGZIP_NO_CLONES)
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positives in avx512fintrin.h
#pragma GCC diagnostic ignored "-Wuninitialized"
#define RZ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

namespace ringzip::codec::detail {
namespace {

// Masks of the first m bytes of 64 / lanes of 16 (m may be <= 0 or past the end).
RZ_AVX512 inline __mmask64 first_bytes(int64_t m) { return m >= 64 ? ~0ull : m <= 0 ? 0 : (1ull << m) - 1; }
RZ_AVX512 inline __mmask16 first_lanes(int64_t m) { return m >= 16 ? 0xffff : m <= 0 ? 0 : (__mmask16)((1u << m) - 1); }

// fl(fl(x * inv) + u) rounded down to an integer, u = (d + 0.5) / 256 (exact, so computing it
// with a fused multiply-add changes nothing); or fl(x * inv) rounded to nearest even without
// Dither. K masks the elements past a bucket's end (Tail only).
template <bool Dither, bool Tail>
RZ_AVX512 inline __m512i rounded16(const float* x, const uint8_t* d, __mmask16 k, __m512 inv) {
  const __m512 t = _mm512_mul_ps(Tail ? _mm512_maskz_loadu_ps(k, x) : _mm512_loadu_ps(x), inv);
  if constexpr (!Dither) return _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m128i db = Tail ? _mm_maskz_loadu_epi8(k, d) : _mm_loadu_si128((const __m128i*)d);
  const __m512 u = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(db)), _mm512_set1_ps(1.0f / 256),
                                   _mm512_set1_ps(1.0f / 512));
  return _mm512_cvt_roundps_epi32(_mm512_add_ps(t, u), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}

// Unsigned codes clamp(r, -s, s) + s of 64 elements, one per byte in element order. The
// saturating packs clamp at 0 (and 255) on the way down to bytes; they interleave 128-bit lanes
// (dword 4 i + k of the result holds elements 16 k + 4 i .. + 3), which one permute undoes.
template <bool Dither, bool Tail>
RZ_AVX512 inline __m512i codes64(const float* x, const uint8_t* d, int64_t m, __m512 inv, int s) {
  const __m512i sv = _mm512_set1_epi32(s);
  __m512i r[4];
  for (int q = 0; q < 4; ++q)
    r[q] = _mm512_add_epi32(rounded16<Dither, Tail>(x + 16 * q, d + 16 * q, first_lanes(m - 16 * q), inv), sv);
  const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(r[0], r[1]), _mm512_packus_epi32(r[2], r[3]));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i c = _mm512_min_epu8(_mm512_permutexvar_epi32(order, b), _mm512_set1_epi8((char)(2 * s)));
  return Tail ? _mm512_maskz_mov_epi8(first_bytes(m), c) : c;  // codes past the end pack as 0
}

// Packs 64 one-byte codes (each < 2^Bits) LSB-first into the low 8 * Bits bytes.
template <int Bits>
RZ_AVX512 inline __m512i pack64(__m512i c) {
  if constexpr (Bits == 4) {  // per 16-bit word lo | hi << 8 -> lo | hi << 4 in the low byte
    return _mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_or_si512(c, _mm512_srli_epi16(c, 4))));
  } else if constexpr (Bits ==
                       2) {  // per 32-bit word c0 | c1 << 8 | c2 << 16 | c3 << 24 -> c0 | c1 << 2 | c2 << 4 | c3 << 6
    const __m512i a = _mm512_or_si512(c, _mm512_srli_epi32(c, 6));
    return _mm512_castsi128_si512(_mm512_cvtepi32_epi8(_mm512_or_si512(a, _mm512_srli_epi32(a, 12))));
  }
  return c;
}

template <int Bits, bool Dither>
RZ_AVX512 void pack_bucket(const float* x, const uint8_t* d, int64_t L, float inv_, uint8_t* out) {
  const int s = (1 << (Bits - 1)) - 1;
  const __m512 inv = _mm512_set1_ps(inv_);
  int64_t j = 0;
  for (; j + 64 <= L; j += 64)
    _mm512_mask_storeu_epi8(out + j * Bits / 8, first_bytes(8 * Bits),
                            pack64<Bits>(codes64<Dither, false>(x + j, d + j, 64, inv, s)));
  if (j < L) {
    const int64_t m = L - j;
    _mm512_mask_storeu_epi8(out + j * Bits / 8, first_bytes((m * Bits + 7) / 8),
                            pack64<Bits>(codes64<Dither, true>(x + j, d + j, m, inv, s)));
  }
}

// vpermb indices and vpmultishiftqb offsets that spread the 8 * bits bytes of 64 packed codes to
// one code per byte: byte k of qword q takes input byte q * bits + k (only the first `bits`
// matter), shifted right by k * bits.
struct Spread {
  __m512i idx, shift;
};
RZ_AVX512 Spread spread_for(int bits) {
  alignas(64) uint8_t idx[64], shift[64];
  for (int q = 0; q < 8; ++q)
    for (int k = 0; k < 8; ++k) {
      idx[8 * q + k] = (uint8_t)(q * bits + k);
      shift[8 * q + k] = (uint8_t)(k * bits);
    }
  return {_mm512_load_si512(idx), _mm512_load_si512(shift)};
}

// sum = value(codes 16 Q .. 16 Q + 15 of c) + local (Tail: the first m - 16 Q lanes only);
// mx = max(mx, |sum| as ordered bits).
template <int Q, bool Tail>
RZ_AVX512 inline void add16(__m512i c, int64_t m, __m512i s, __m512 step, const float* local, float* sum, __m512i& mx) {
  const __mmask16 k = first_lanes(m - 16 * Q);
  if (Tail && !k) return;
  const __m512i code = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(c, Q));
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(code, s)), step);
  v = _mm512_add_ps(v, Tail ? _mm512_maskz_loadu_ps(k, local + 16 * Q) : _mm512_loadu_ps(local + 16 * Q));
  const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  if constexpr (Tail) {
    _mm512_mask_storeu_ps(sum + 16 * Q, k, v);
    mx = _mm512_mask_max_epu32(mx, k, mx, a);
  } else {
    _mm512_storeu_ps(sum + 16 * Q, v);
    mx = _mm512_max_epu32(mx, a);
  }
}

// One group of 64 codes (Tail: the first m) from the packed bytes at in; returns the mask of
// codes that are all ones.
template <int Bits, bool Tail>
RZ_AVX512 inline __mmask64 unpack_add64(const Spread& sp, const uint8_t* in, int64_t m, __m512i s, __m512 step,
                                        const float* local, float* sum, __m512i& mx) {
  const __m512i low = _mm512_set1_epi8((char)((1 << Bits) - 1));
  __m512i c;  // the group's 8 * Bits bytes (the spread reads no others)
  if constexpr (Tail)
    c = _mm512_maskz_loadu_epi8(first_bytes((m * Bits + 7) / 8), in);
  else if constexpr (Bits == 8)
    c = _mm512_loadu_si512(in);
  else if constexpr (Bits == 4)
    c = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)in));
  else
    c = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)in));
  if constexpr (Bits != 8)
    c = _mm512_and_si512(_mm512_multishift_epi64_epi8(sp.shift, _mm512_permutexvar_epi8(sp.idx, c)), low);
  add16<0, Tail>(c, m, s, step, local, sum, mx);
  add16<1, Tail>(c, m, s, step, local, sum, mx);
  add16<2, Tail>(c, m, s, step, local, sum, mx);
  add16<3, Tail>(c, m, s, step, local, sum, mx);
  return _mm512_cmpeq_epi8_mask(c, low);
}

template <int Bits>
RZ_AVX512 bool unpack_add_bucket(const uint8_t* in, int64_t L, float step_, const float* local, float* sum,
                                 uint32_t* amax) {
  const Spread sp = spread_for(Bits);
  const __m512i s = _mm512_set1_epi32((1 << (Bits - 1)) - 1);
  const __m512 step = _mm512_set1_ps(step_);
  __mmask64 bad = 0;
  __m512i mx = _mm512_setzero_si512();
  int64_t j = 0;
  for (; j + 64 <= L; j += 64)
    bad |= unpack_add64<Bits, false>(sp, in + j * Bits / 8, 64, s, step, local + j, sum + j, mx);
  if (j < L)  // bytes past the input load as 0, codes never all ones
    bad |= unpack_add64<Bits, true>(sp, in + j * Bits / 8, L - j, s, step, local + j, sum + j, mx);
  *amax = (uint32_t)_mm512_reduce_max_epu32(mx);
  return bad == 0;
}

RZ_AVX512 uint32_t amax_bits(const float* x, int64_t L) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
  int64_t j = 0;
  for (; j + 32 <= L; j += 32) {  // two accumulators: the max is a dependency chain
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + j), abs_mask));
    m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + j + 16), abs_mask));
  }
  for (; j < L; j += 16)
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_maskz_loadu_epi32(first_lanes(L - j), x + j), abs_mask));
  return (uint32_t)_mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
}

RZ_FUSED_QUANT_KERNELS;

}  // namespace

const FusedQuant* fused_quant_avx512() {
  static const FusedQuant k = FusedQuantOf<Kernels>::table("avx512");
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi");
  return ok ? &k : nullptr;
}

}  // namespace ringzip::codec::detail

#else  // not x86-64 GCC/Clang, or a baseline-ISA build (RINGZIP_NO_CLONES): the portable passes only

namespace ringzip::codec::detail {
const FusedQuant* fused_quant_avx512() { return nullptr; }
}  // namespace ringzip::codec::detail

#endif
