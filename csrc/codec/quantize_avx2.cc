// Fused AVX2 bucket kernels of the q8/q4/q2 codecs (see quantize_fused.h): the same single
// sweeps as quantize_avx512.cc for CPUs without AVX-512 (AMD before Zen 4, Intel client cores).
// Codes are made 32 at a time (four vectors of eight, narrowed to one byte each by saturating
// packs) and packed in registers; decoding spreads a bucket's packed bytes to one code per
// 32-bit lane with a broadcast and a variable shift. AVX2 has no masked byte loads or stores, so
// a bucket's last partial group goes through a small zero-padded copy.
//
// Roundings use vroundps (floor, or nearest-even, for any float), then an exact conversion: the
// codes equal the portable floor_i32 / quant_code_nearest ones for the finite inv callers pass
// (|x * inv| <= s + 1).
#include "codec/quantize_fused.h"
#include "codec/quantize_math.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(RINGZIP_NO_CLONES)
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#define RZ_AVX2 __attribute__((target("avx2,fma")))

namespace ringzip::codec::detail {
namespace {

const int kAhead = 2048;  // floats: prefetching 8 KiB ahead keeps the next buckets streaming in while this one computes

// Eight codes before the offset s: floor(fl(fl(x * inv) + u)) with u = (d + 0.5) / 256 (exact,
// so the fused multiply-add that makes it changes nothing), or fl(x * inv) rounded to nearest even.
template <bool Dither>
RZ_AVX2 inline __m256i rounded8(const float* x, const uint8_t* d, __m256 inv) {
  const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x), inv);
  if constexpr (!Dither) return _mm256_cvttps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m128i db = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(d));
  const __m256 u = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(db)), _mm256_set1_ps(1.0f / 256),
                                   _mm256_set1_ps(1.0f / 512));
  return _mm256_cvttps_epi32(_mm256_floor_ps(_mm256_add_ps(t, u)));
}

// Unsigned codes clamp(r, -s, s) + s of 32 elements, one per byte in element order. The
// saturating packs clamp at 0 on the way down to bytes and work within 128-bit lanes (dword k
// of the result holds elements 8 (k % 4) + 4 (k / 4) .. + 3), which one permute undoes.
template <bool Dither>
RZ_AVX2 inline __m256i codes32(const float* x, const uint8_t* d, __m256 inv, int s) {
  const __m256i sv = _mm256_set1_epi32(s);
  const __m256i r0 = _mm256_add_epi32(rounded8<Dither>(x, d, inv), sv);
  const __m256i r1 = _mm256_add_epi32(rounded8<Dither>(x + 8, d + 8, inv), sv);
  const __m256i r2 = _mm256_add_epi32(rounded8<Dither>(x + 16, d + 16, inv), sv);
  const __m256i r3 = _mm256_add_epi32(rounded8<Dither>(x + 24, d + 24, inv), sv);
  const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(r0, r1), _mm256_packus_epi32(r2, r3));
  const __m256i c = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return _mm256_min_epu8(c, _mm256_set1_epi8((char)(2 * s)));
}

// Packs 32 one-byte codes (each < 2^Bits) LSB-first and stores the 4 * Bits bytes at out.
template <int Bits>
RZ_AVX2 inline void pack_store32(__m256i c, uint8_t* out) {
  if constexpr (Bits == 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), c);
  } else if constexpr (Bits == 4) {  // per 16-bit word lo | hi << 8 -> lo | hi << 4 in the low byte
    const __m256i w = _mm256_or_si256(c, _mm256_srli_epi16(c, 4));
    const __m256i even = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                          0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i p = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(w, even), 0x08);  // qwords 0, 2
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(p));
  } else {  // per 32-bit word c0 | c1 << 8 | c2 << 16 | c3 << 24 -> c0 | c1 << 2 | c2 << 4 | c3 << 6
    const __m256i a = _mm256_or_si256(c, _mm256_srli_epi32(c, 6));
    const __m256i w = _mm256_or_si256(a, _mm256_srli_epi32(a, 12));
    const __m256i first = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                           0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i p =
        _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(w, first), _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(p));
  }
}

template <int Bits, bool Dither>
RZ_AVX2 void pack_bucket(const float* x, const uint8_t* d, int64_t L, float inv_, uint8_t* out) {
  const int s = (1 << (Bits - 1)) - 1;
  const __m256 inv = _mm256_set1_ps(inv_);
  int64_t j = 0;
  for (; j + 32 <= L; j += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(x + j + kAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + j + kAhead + 16), _MM_HINT_T0);
    pack_store32<Bits>(codes32<Dither>(x + j, Dither ? d + j : d, inv, s), out + j * Bits / 8);
  }
  if (j == L) return;
  // The last partial group: zero-padded copies in, codes past the end cleared, the bytes that
  // cover the rest copied out.
  const int64_t m = L - j;
  alignas(32) float xt[32] = {};
  alignas(32) uint8_t dt[32] = {}, packed[32];
  std::memcpy(xt, x + j, 4 * m);
  if (Dither) std::memcpy(dt, d + j, m);
  alignas(32) static const int8_t kLive[64] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                               -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  const __m256i live = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLive + 32 - m));
  pack_store32<Bits>(_mm256_and_si256(codes32<Dither>(xt, dt, inv, s), live), packed);
  std::memcpy(out + j * Bits / 8, packed, (m * Bits + 7) / 8);
}

// Codes 8 k .. 8 k + 7 of a group's packed bytes, one per 32-bit lane.
template <int Bits>
RZ_AVX2 inline __m256i spread8(const uint8_t* group, int k) {
  if constexpr (Bits == 8)
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group + 8 * k)));
  using Word = std::conditional_t<Bits == 4, uint32_t, uint16_t>;  // the Bits bytes of eight codes
  Word w;
  std::memcpy(&w, group + k * Bits, sizeof w);
  const __m256i shift =
      Bits == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28) : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), shift), _mm256_set1_epi32((1 << Bits) - 1));
}

// sum = value(code) + local of eight lanes (only those in `keep`, a lane mask, count towards
// mx); bad collects lanes whose code is all ones.
RZ_AVX2 inline void add8(__m256i code, __m256i all_ones, __m256i s, __m256 step, const float* local, float* sum,
                         __m256i keep, __m256i& mx, __m256i& bad) {
  bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(code, all_ones));
  const __m256 v =
      _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(code, s)), step), _mm256_loadu_ps(local));
  _mm256_storeu_ps(sum, v);
  const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), _mm256_and_si256(keep, _mm256_set1_epi32(0x7fffffff)));
  mx = _mm256_max_epu32(mx, a);
}

template <int Bits>
RZ_AVX2 bool unpack_add_bucket(const uint8_t* in, int64_t L, float step_, const float* local, float* sum,
                               uint32_t* amax) {
  const __m256i s = _mm256_set1_epi32((1 << (Bits - 1)) - 1), all_ones = _mm256_set1_epi32((1 << Bits) - 1);
  const __m256i every = _mm256_set1_epi32(-1);
  const __m256 step = _mm256_set1_ps(step_);
  __m256i mx = _mm256_setzero_si256(), bad = _mm256_setzero_si256();
  int64_t j = 0;
  for (; j + 32 <= L; j += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(local + j + kAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(local + j + kAhead + 16), _MM_HINT_T0);
    for (int k = 0; k < 4; ++k)
      add8(spread8<Bits>(in + j * Bits / 8, k), all_ones, s, step, local + j + 8 * k, sum + j + 8 * k, every, mx, bad);
  }
  for (; j + 8 <= L; j += 8)
    add8(spread8<Bits>(in + j * Bits / 8, 0), all_ones, s, step, local + j, sum + j, every, mx, bad);
  if (j < L) {  // fewer than eight codes left: through zero-padded copies (zero bytes are never all ones)
    const int64_t m = L - j;
    alignas(32) uint8_t bytes[32] = {};
    alignas(32) float lt[8] = {}, st[8];
    std::memcpy(bytes, in + j * Bits / 8, (m * Bits + 7) / 8);
    std::memcpy(lt, local + j, 4 * m);
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    add8(spread8<Bits>(bytes, 0), all_ones, s, step, lt, st, keep, mx, bad);
    std::memcpy(sum + j, st, 4 * m);
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), mx);
  uint32_t m = 0;
  for (uint32_t v : lanes) m = v > m ? v : m;
  *amax = m;
  return _mm256_testz_si256(bad, bad);
}

RZ_AVX2 uint32_t amax_bits(const float* x, int64_t L) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  int64_t j = 0;
  for (; j + 16 <= L; j += 16) {  // two accumulators: the max is a dependency chain
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j)), abs_mask));
    m1 = _mm256_max_epu32(m1,
                          _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j + 8)), abs_mask));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epu32(m0, m1));
  uint32_t m = 0;
  for (uint32_t v : lanes) m = v > m ? v : m;
  for (; j < L; ++j) {
    uint32_t a;
    std::memcpy(&a, x + j, 4);
    a &= 0x7fffffffu;
    m = a > m ? a : m;
  }
  return m;
}

RZ_FUSED_QUANT_KERNELS;

}  // namespace

// Element j adds into lane j % 8 in order (quantize_math.h): exactly a vector of eight lanes;
// the last partial group adds +0 to the lanes it does not reach, which changes no sum.
RZ_AVX2 float q1_pack_avx2(const float* x, int64_t L, uint8_t* out) {
  const __m256 zero = _mm256_setzero_ps(), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 lanes = zero;
  int64_t j = 0;
  for (; j + 8 <= L; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    lanes = _mm256_add_ps(lanes, _mm256_and_ps(v, abs_mask));
    out[j / 8] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_GE_OQ));
  }
  if (j < L) {
    alignas(32) float t[8] = {};
    std::memcpy(t, x + j, 4 * (L - j));
    const __m256 v = _mm256_load_ps(t);
    lanes = _mm256_add_ps(lanes, _mm256_and_ps(v, abs_mask));
    out[j / 8] = (uint8_t)(_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_GE_OQ)) & ((1 << (L - j)) - 1));
  }
  alignas(32) float l[8];
  _mm256_store_ps(l, lanes);
  return rz_div(q1_combine(l), (float)L);
}

// Bit j of the packed bytes picks lane j % 8's sign: a byte broadcast, masked per lane, then a
// blend of the two values; Add adds local afterwards (value + local, as q1_add).
template <bool Add>
RZ_AVX2 void q1_values(const uint8_t* in, int64_t L, float scale, const float* local, float* sum) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 pos = _mm256_set1_ps(scale), neg = _mm256_set1_ps(-scale);
  int64_t j = 0;
  for (; j + 8 <= L; j += 8) {
    if (Add && (j & 31) == 0) _mm_prefetch(reinterpret_cast<const char*>(local + j + kAhead), _MM_HINT_T0);
    const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(in[j / 8]), bit), bit);
    __m256 v = _mm256_blendv_ps(neg, pos, _mm256_castsi256_ps(set));
    if (Add) v = _mm256_add_ps(v, _mm256_loadu_ps(local + j));
    _mm256_storeu_ps(sum + j, v);
  }
  for (; j < L; ++j) {
    const float v = (in[j / 8] >> (j % 8)) & 1 ? scale : -scale;
    sum[j] = Add ? v + local[j] : v;
  }
}

RZ_AVX2 void q1_unpack_add_avx2(const uint8_t* in, int64_t L, float scale, const float* local, float* sum) {
  local ? q1_values<true>(in, L, scale, local, sum) : q1_values<false>(in, L, scale, local, sum);
}

// One step of q1_add_pack: v's lanes of |v| added to `lanes`, their bits maxed into mx; returns
// the sign bits (v >= 0).
RZ_AVX2 inline int q1_sweep8(__m256 v, __m256& lanes, __m256i& mx) {
  const __m256 a = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  lanes = _mm256_add_ps(lanes, a);
  mx = _mm256_max_epu32(mx, _mm256_castps_si256(a));
  return _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ));
}

// q1_pack of s = x + r, formed on the way (and stored to s), with max |s| as ordered bits.
RZ_AVX2 float q1_add_pack_avx2(const float* x, const float* r, int64_t L, float* s, uint8_t* out, uint32_t* amax) {
  __m256 lanes = _mm256_setzero_ps();
  __m256i mx = _mm256_setzero_si256();
  int64_t j = 0;
  for (; j + 8 <= L; j += 8) {
    if ((j & 31) == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(x + j + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(r + j + kAhead), _MM_HINT_T0);
    }
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(r + j));
    _mm256_storeu_ps(s + j, v);
    out[j / 8] = (uint8_t)q1_sweep8(v, lanes, mx);
  }
  if (j < L) {  // zero padding adds +0 to the lanes and nothing to the max
    alignas(32) float t[8] = {};
    for (int64_t k = j; k < L; ++k) t[k - j] = x[k] + r[k];
    std::memcpy(s + j, t, 4 * (L - j));
    out[j / 8] = (uint8_t)(q1_sweep8(_mm256_load_ps(t), lanes, mx) & ((1 << (L - j)) - 1));
  }
  alignas(32) uint32_t m[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(m), mx);
  uint32_t top = 0;
  for (uint32_t v : m) top = v > top ? v : top;
  *amax = top;
  alignas(32) float l[8];
  _mm256_store_ps(l, lanes);
  return rz_div(q1_combine(l), (float)L);
}

const FusedQuant* fused_quant_avx2() {
  static const FusedQuant k = FusedQuantOf<Kernels>::table("avx2");
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok ? &k : nullptr;
}

}  // namespace ringzip::codec::detail

#else  // not x86-64 GCC/Clang, or a baseline-ISA build (RINGZIP_NO_CLONES): the portable passes only

namespace ringzip::codec::detail {
const FusedQuant* fused_quant_avx2() { return nullptr; }
}  // namespace ringzip::codec::detail

#endif
