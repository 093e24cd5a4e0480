// q8 / q4 / q2 / q1 codecs on the CPU. Layout (docs/wire-format.md): nb float32 scales, then the
// codes of all elements packed LSB-first (element i at bit i*b of the code area). bucket is a
// multiple of 8, so every bucket's codes start on a byte boundary.
//
// Each bucket is handled in one pass over cache-resident scratch: load (and widen) -> scale ->
// Philox dither bytes (one block per 16 elements) -> codes -> pack. The loops are written so GCC vectorizes them at -O3 with the
// baseline x86-64 ISA; hot functions are also cloned for AVX2 / AVX-512 (runtime dispatch).
// On CPUs with AVX2 or AVX-512 BW/VBMI, q8/q4/q2 buckets skip the scratch codes: the fused
// kernels (quantize_fused.h) compute and pack them in one sweep (and decode + add in one sweep
// for decode_add_encode).
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in avx512fintrin.h
#include "codec/codec_impl.h"
#include "codec/quantize_fused.h"
#include "codec/quantize_math.h"

namespace ringzip::codec::detail {
namespace {

struct QParams {
  int bits;
  int s;  // levels each side (q1: unused)
  int64_t bucket;
  bool stochastic;
};

QParams qparams(const Spec& sp) { return {sp.bits, sp.bits > 1 ? quant_levels(sp.bits) : 1, sp.bucket, sp.stochastic}; }

struct Scratch {
  std::vector<float> x;     // widened / summed bucket input
  std::vector<uint32_t> w;  // Philox blocks (dither bytes of the bucket: philox_fill_bytes)
  std::vector<uint8_t> c;   // unpacked codes
  std::vector<float> z;     // zeros for the kernels that add (made on first use)
  explicit Scratch(int64_t bucket) : x(bucket + 8), w(bucket + 8), c(bucket + 8) {}
  const float* zeros(int64_t L) {
    if (static_cast<int64_t>(z.size()) < L) z.assign(L, 0.0f);
    return z.data();
  }
};

}  // namespace

namespace {

void philox_fill_scalar(uint64_t q0, int64_t nq, const RngKey& key, uint32_t* w) {
  const uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
  for (int64_t q = 0; q < nq; ++q) {
    uint64_t qq = q0 + q;
    U32x4 r = philox4x32_10((uint32_t)qq, (uint32_t)(qq >> 32), key.seq, key.stream, k0, k1);
    for (int i = 0; i < 4; ++i) w[4 * q + i] = r.v[i];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// Sixteen Philox blocks per iteration: four independent groups of four (one block per 64-bit
// lane, as in the AVX-512 version below: _mm256_mul_epu32 yields each whole product), so the
// rounds' multiply latency overlaps across groups. Lanes hold blocks 0, 2, 1, 3 of a group, the
// order in which the final 64-bit unpacks store whole blocks contiguously. Same arithmetic as
// philox4x32_10.
__attribute__((target("avx2"))) void philox_fill_avx2(uint64_t q0, int64_t nq, const RngKey& key, uint32_t* w) {
  constexpr int G = 4;
  const __m256i m0 = _mm256_set1_epi64x(kPhiloxM0), m1 = _mm256_set1_epi64x(kPhiloxM1);
  const __m256i lo32 = _mm256_set1_epi64x(0xffffffffLL), lane = _mm256_setr_epi64x(0, 2, 1, 3);
  int64_t q = 0;
  for (; q + 4 * G <= nq; q += 4 * G) {
    const uint64_t base = q0 + q;
    // Low words of base + block; the high word may differ across blocks only at a 2^32 wrap.
    if ((uint32_t)base > 0xffffffffu - 4 * G) break;
    __m256i c0[G], c1[G], c2[G], c3[G];
    for (int g = 0; g < G; ++g) {
      c0[g] = _mm256_add_epi64(_mm256_set1_epi64x((uint32_t)base + 4 * g), lane);
      c1[g] = _mm256_set1_epi64x((uint32_t)(base >> 32));
      c2[g] = _mm256_set1_epi64x(key.seq);
      c3[g] = _mm256_set1_epi64x(key.stream);
    }
    uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
    for (int r = 0; r < 10; ++r) {
      const __m256i kk0 = _mm256_set1_epi64x(k0), kk1 = _mm256_set1_epi64x(k1);
      for (int g = 0; g < G; ++g) {  // high halves of the lanes carry garbage the multiplies ignore
        const __m256i p0 = _mm256_mul_epu32(c0[g], m0), p1 = _mm256_mul_epu32(c2[g], m1);
        c0[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[g]), kk0);
        c1[g] = p1;
        c2[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[g]), kk1);
        c3[g] = p0;
      }
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    for (int g = 0; g < G; ++g) {
      const __m256i p01 = _mm256_or_si256(_mm256_and_si256(c0[g], lo32), _mm256_slli_epi64(c1[g], 32));
      const __m256i p23 = _mm256_or_si256(_mm256_and_si256(c2[g], lo32), _mm256_slli_epi64(c3[g], 32));
      uint32_t* o = w + 4 * (q + 4 * g);
      _mm256_storeu_si256((__m256i*)o, _mm256_unpacklo_epi64(p01, p23));
      _mm256_storeu_si256((__m256i*)(o + 8), _mm256_unpackhi_epi64(p01, p23));
    }
  }
  philox_fill_scalar(q0 + q, nq - q, key, w + 4 * q);
}

// Sixteen blocks per iteration, as two independent groups of eight blocks held one per 64-bit
// lane: _mm512_mul_epu32 then yields each full 64-bit product directly (hi = p >> 32, lo = the
// low half, whose upper garbage later multiplies ignore), so a round costs six instructions per
// eight blocks instead of the shuffles a 32-bit-lane layout needs. Lane b of a group holds
// block kLaneBlock[b], chosen so the final 64-bit unpacks come out in block order.
__attribute__((target("avx512f"))) inline void philox8_avx512(__m512i c0, __m512i c1, __m512i c2, __m512i c3,
                                                              uint32_t k0, uint32_t k1, uint32_t* o) {
  const __m512i m0 = _mm512_set1_epi64(kPhiloxM0), m1 = _mm512_set1_epi64(kPhiloxM1);
  for (int r = 0; r < 10; ++r) {
    __m512i p0 = _mm512_mul_epu32(c0, m0), p1 = _mm512_mul_epu32(c2, m1);
    c0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1, _mm512_set1_epi64(k0), 0x96);
    c1 = p1;
    c2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3, _mm512_set1_epi64(k1), 0x96);
    c3 = p0;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  // Lane b -> (c0, c1) and (c2, c3) as 32-bit pairs, then 64-bit unpacks give whole blocks.
  const __m512i lo32 = _mm512_set1_epi64(0xffffffffLL);
  __m512i p01 = _mm512_ternarylogic_epi64(c0, lo32, _mm512_slli_epi64(c1, 32), 0xEA);  // (c0 & lo) | c1<<32
  __m512i p23 = _mm512_ternarylogic_epi64(c2, lo32, _mm512_slli_epi64(c3, 32), 0xEA);
  _mm512_storeu_si512(o, _mm512_unpacklo_epi64(p01, p23));
  _mm512_storeu_si512(o + 16, _mm512_unpackhi_epi64(p01, p23));
}

__attribute__((target("avx512f"))) void philox_fill_avx512(uint64_t q0, int64_t nq, const RngKey& key, uint32_t* w) {
  // 128-bit lane L of unpacklo takes lanes 2L of both inputs, unpackhi lanes 2L+1: so lanes
  // 0,2,4,6 hold blocks 0-3 and lanes 1,3,5,7 blocks 4-7.
  const __m512i lane = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
  const __m512i c2 = _mm512_set1_epi64(key.seq), c3 = _mm512_set1_epi64(key.stream);
  const uint32_t k0 = (uint32_t)key.seed, k1 = (uint32_t)(key.seed >> 32);
  int64_t q = 0;
  for (; q + 16 <= nq; q += 16) {
    uint64_t base = q0 + q;
    // Low words of base + lane; the high word may differ across lanes only at a 2^32 wrap.
    if ((uint32_t)base > 0xffffffefu) break;
    const __m512i c1 = _mm512_set1_epi64((uint32_t)(base >> 32));
    const __m512i a = _mm512_add_epi64(_mm512_set1_epi64((uint32_t)base), lane);
    philox8_avx512(a, c1, c2, c3, k0, k1, w + 4 * q);
    philox8_avx512(_mm512_add_epi64(a, _mm512_set1_epi64(8)), c1, c2, c3, k0, k1, w + 4 * q + 32);
  }
  philox_fill_scalar(q0 + q, nq - q, key, w + 4 * q);
}
#endif

}  // namespace

namespace {
// Blocks q0 .. q0 + nq - 1 into w[4 * (q - q0) + word].
void philox_fill_blocks(const RngKey& key, uint64_t q0, int64_t nq, uint32_t* w) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
  if (isa == 2) return philox_fill_avx512(q0, nq, key, w);
  if (isa == 1) return philox_fill_avx2(q0, nq, key, w);
#endif
  philox_fill_scalar(q0, nq, key, w);
}
}  // namespace

void philox_fill(const RngKey& key, uint64_t g0, int64_t L, uint32_t* w) {
  uint64_t q0 = g0 >> 2;
  philox_fill_blocks(key, q0, (int64_t)(((g0 + L + 3) >> 2) - q0), w);
}

// Dither bytes of global elements [g0, g0 + L) (philox.h's philox_byte): blocks g0 / 16 .. are
// written as words; on a little-endian machine their bytes in memory order are the bytes of
// elements 16 * (g0 / 16) + 0, 1, ..., so element g0 + j's byte is at byte j + g0 % 16.
// w holds at least (L + 31) / 4 words.
const uint8_t* philox_fill_bytes(const RngKey& key, uint64_t g0, int64_t L, uint32_t* w) {
  static_assert(std::endian::native == std::endian::little, "philox_fill_bytes reads words as bytes");
  uint64_t q0 = g0 >> 4;
  philox_fill_blocks(key, q0, (int64_t)(((g0 + L + 15) >> 4) - q0), w);
  return reinterpret_cast<const uint8_t*>(w) + (g0 & 15);
}

RZ_CLONES uint32_t amax_bits(const float* x, int64_t L) {
  uint32_t m = 0;
  for (int64_t j = 0; j < L; ++j) {
    uint32_t a = abs_bits(x[j]);
    m = a > m ? a : m;
  }
  return m;
}

namespace {

RZ_CLONES void codes_stoch(const float* x, const uint8_t* d, int64_t L, float inv, int s, uint8_t* c) {
  for (int64_t j = 0; j < L; ++j) c[j] = (uint8_t)quant_code_stoch(x[j], inv, dither_from_byte(d[j]), s);
}
RZ_CLONES void codes_nearest(const float* x, int64_t L, float inv, int s, uint8_t* c) {
  for (int64_t j = 0; j < L; ++j) c[j] = (uint8_t)quant_code_nearest(x[j], inv, s);
}

// q1 bucket sum of |x| in the documented 8-lane order.
// q1 bucket sum of |x| * f in the documented 8-lane order (f = 1: exactly |x|; kQ1Down: the
// overflow path).
RZ_CLONES float q1_sum(const float* x, int64_t L, float f) {
  float lane[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t full = L / kSumLanes;
  for (int64_t t = 0; t < full; ++t)
    for (int l = 0; l < kSumLanes; ++l) lane[l] = rz_add(lane[l], rz_mul(std::fabs(x[t * kSumLanes + l]), f));
  for (int64_t j = full * kSumLanes; j < L; ++j)
    lane[j - full * kSumLanes] = rz_add(lane[j - full * kSumLanes], rz_mul(std::fabs(x[j]), f));
  return q1_combine(lane);
}
// q1's scale of a finite bucket (quantize_math.h).
float q1_scale(const float* x, int64_t L, float plain) {
  return abs_bits_finite(abs_bits(plain)) ? plain : q1_rescaled(q1_sum(x, L, kQ1Down), (float)L);
}
RZ_CLONES void q1_bits(const float* x, int64_t L, uint8_t* c) {
  for (int64_t j = 0; j < L; ++j) c[j] = x[j] >= 0.0f ? 1 : 0;
}

// Packs L codes (c padded with zeros to a multiple of 8) of `bits` bits into ceil(L*bits/8) bytes.
template <int B>
void pack_t(const uint8_t* c, int64_t L, uint8_t* out) {
  constexpr int per = 8 / B;
  int64_t nbytes = (L * B + 7) / 8;
  for (int64_t j = 0; j < nbytes; ++j) {
    uint32_t v = 0;
    for (int k = 0; k < per; ++k) v |= (uint32_t)c[j * per + k] << (k * B);
    out[j] = (uint8_t)v;
  }
}
RZ_CLONES void pack(int bits, const uint8_t* c, int64_t L, uint8_t* out) {
  switch (bits) {
    case 8: std::memcpy(out, c, L); return;
    case 4: return pack_t<4>(c, L, out);
    case 2: return pack_t<2>(c, L, out);
    default: return pack_t<1>(c, L, out);
  }
}
// Unpacks the codes of whole bytes covering L codes (c holds L + 8); returns whether a code
// is all ones: for B > 1 the one pattern no encoder writes (codes run 0..2s = 2^B - 2), so it
// is what validation looks for. GCC vectorizes the shifts for B = 2, 4.
template <int B>
bool unpack_t(const uint8_t* in, int64_t L, uint8_t* c) {
  constexpr int per = 8 / B;
  constexpr uint32_t mask = (1u << B) - 1;
  int64_t nbytes = (L * B + 7) / 8;
  uint32_t mx = 0;
  for (int64_t j = 0; j < nbytes; ++j)
    for (int k = 0; k < per; ++k) {
      uint32_t v = ((uint32_t)in[j] >> (k * B)) & mask;
      c[j * per + k] = (uint8_t)v;
      mx = v > mx ? v : mx;
    }
  return mx == mask;
}
// One bit per code does not vectorize that way (3x slower than B = 4 per element): a table
// maps each byte to its eight codes, one load and one store per byte.
struct BitSpread {
  uint64_t of[256];
  constexpr BitSpread() : of() {
    for (int v = 0; v < 256; ++v)
      for (int k = 0; k < 8; ++k) of[v] |= (uint64_t)((v >> k) & 1) << (8 * k);
  }
};
constexpr BitSpread kBitSpread{};
template <>
bool unpack_t<1>(const uint8_t* in, int64_t L, uint8_t* c) {
  const int64_t nbytes = (L + 7) / 8;
  for (int64_t j = 0; j < nbytes; ++j) std::memcpy(c + 8 * j, &kBitSpread.of[in[j]], 8);
  return false;  // every 1-bit pattern is valid
}
RZ_CLONES bool unpack(int bits, const uint8_t* in, int64_t L, uint8_t* c) {
  switch (bits) {
    case 8: {
      uint8_t mx = 0;
      for (int64_t j = 0; j < L; ++j) {
        c[j] = in[j];
        mx = in[j] > mx ? in[j] : mx;
      }
      return mx == 0xff;
    }
    case 4: return unpack_t<4>(in, L, c);
    case 2: return unpack_t<2>(in, L, c);
    default: return unpack_t<1>(in, L, c);
  }
}

RZ_CLONES void values_store(const uint8_t* c, int64_t L, float step, int s, float* out) {
  for (int64_t j = 0; j < L; ++j) out[j] = quant_value(c[j], step, s);
}
RZ_CLONES void values_add(const uint8_t* c, int64_t L, float step, int s, const float* local, float* out) {
  for (int64_t j = 0; j < L; ++j) out[j] = rz_add(quant_value(c[j], step, s), local[j]);
}
RZ_CLONES void q1_store(const uint8_t* c, int64_t L, float scale, float* out) {
  for (int64_t j = 0; j < L; ++j) out[j] = q1_value(c[j], scale);
}
RZ_CLONES void q1_add(const uint8_t* c, int64_t L, float scale, const float* local, float* out) {
  for (int64_t j = 0; j < L; ++j) out[j] = rz_add(q1_value(c[j], scale), local[j]);
}

}  // namespace

const FusedQuant* fused_quant() {
  static const FusedQuant* const chosen = [] {
    const char* env = std::getenv("RINGZIP_QUANT_KERNELS");
    const std::string want = env ? env : "";
    if (want.empty() || want == "auto") {
      const FusedQuant* k = fused_quant_avx512();
      return k ? k : fused_quant_avx2();
    }
    if (want == "portable") return static_cast<const FusedQuant*>(nullptr);
    const FusedQuant* k = want == "avx512" ? fused_quant_avx512() : want == "avx2" ? fused_quant_avx2() : nullptr;
    if (!k)
      fail("RINGZIP_QUANT_KERNELS=" + want +
           (want == "avx512" || want == "avx2" ? ": this CPU (or this build) cannot run those kernels"
                                               : ": unknown; use auto, avx512, avx2 or portable"));
    return k;
  }();
  return chosen;
}

namespace {

// max |x| of a bucket as ordered bits.
uint32_t bucket_amax(const float* x, int64_t L) {
  const FusedQuant* k = fused_quant();
  return k ? k->amax(x, L) : amax_bits(x, L);
}

// Encodes one bucket of float32 x (L elements, first global index g0, max |x| bits am). With
// `unpacked` its codes are also left unpacked in sc.c (encode_feedback needs them); without, a
// finite q8/q4/q2 bucket takes the fused kernel where the CPU has one (quant_inv is
// always finite, the bound under which the kernel's roundings equal floor_i32's).
void encode_bucket(const QParams& p, const float* x, int64_t L, uint32_t am, uint64_t g0, const RngKey& key,
                   Scratch& sc, uint8_t* scale_out, uint8_t* code_out, bool unpacked) {
  const FusedQuant* fused = fused_quant();
  if (!unpacked && p.bits == 1 && abs_bits_finite(am) && fused) {
    const float scale = q1_scale(x, L, fused->q1_pack(x, L, code_out));
    std::memcpy(scale_out, &scale, 4);
    return;
  }
  if (!unpacked && p.bits > 1 && abs_bits_finite(am) && fused) {
    const float scale = u2f(am);
    const uint8_t* d = p.stochastic ? philox_fill_bytes(key, g0, L, sc.w.data()) : nullptr;
    fused->codes_pack(p.bits, x, d, L, quant_inv(scale, p.s), code_out);
    std::memcpy(scale_out, &scale, 4);
    return;
  }
  uint8_t* c = sc.c.data();
  std::memset(c + L, 0, 8);  // zero padding for the packer
  float scale;
  if (!abs_bits_finite(am)) {
    scale = u2f(kQuantNaN);
    std::memset(c, 0, L);
  } else if (p.bits == 1) {
    scale = q1_scale(x, L, rz_div(q1_sum(x, L, 1.0f), (float)L));
    q1_bits(x, L, c);
  } else {
    scale = u2f(am);
    float inv = quant_inv(scale, p.s);
    if (p.stochastic) {
      codes_stoch(x, philox_fill_bytes(key, g0, L, sc.w.data()), L, inv, p.s, c);
    } else {
      codes_nearest(x, L, inv, p.s, c);
    }
  }
  std::memcpy(scale_out, &scale, 4);
  pack(p.bits, c, L, code_out);
}

float read_scale(const uint8_t* p, int64_t b) {
  float scale;
  std::memcpy(&scale, p, 4);
  uint32_t u = f2u(scale);
  // A valid encoder writes a finite non-negative scale or the canonical NaN.
  if (u != kQuantNaN && (u >> 31 || !abs_bits_finite(u)))
    fail("corrupt q-codec payload: bucket " + std::to_string(b) + " has scale " + std::to_string(scale));
  return scale;
}

// Unpacks and validates the codes of bucket b.
void read_codes(const QParams& p, const uint8_t* code_in, int64_t L, int64_t b, uint8_t* c) {
  if (unpack(p.bits, code_in, L, c) && p.bits > 1)  // codes run 0..2s = 2^bits - 2
    fail("corrupt q" + std::to_string(p.bits) + " payload: code " + std::to_string((1 << p.bits) - 1) +
         " out of range in bucket " + std::to_string(b));
}

// out[j] = the value of packed code j of bucket b (with local: plus local[j], added after), in
// one sweep from the packed codes where the CPU has the fused kernels, else unpacked first (in
// sc.c); with amax, *amax = max |out| as ordered bits (the q8/q4/q2 kernel finds it on the way).
// Throws on a code no encoder writes. out may be local.
void decode_bucket(const QParams& p, const uint8_t* codes, int64_t L, int64_t b, float scale, const float* local,
                   float* out, Scratch& sc, uint32_t* amax = nullptr) {
  const FusedQuant* fused = fused_quant();
  const float step = p.bits > 1 ? quant_step(scale, p.s) : 0.0f;
  uint32_t am;
  // The q8/q4/q2 kernel always adds: onto +0 the value is unchanged unless it is -0, which
  // only a step of 0 makes.
  if (fused && p.bits > 1 && (local || step != 0.0f) &&
      fused->unpack_add(p.bits, codes, L, step, local ? local : sc.zeros(L), out, &am)) {
    if (amax) *amax = am;
    return;
  }
  if (fused && p.bits == 1) {
    fused->q1_unpack_add(codes, L, scale, local, out);
  } else {
    uint8_t* c = sc.c.data();
    read_codes(p, codes, L, b, c);  // where the kernel found a bad code, names it and throws
    if (p.bits == 1)
      local ? q1_add(c, L, scale, local, out) : q1_store(c, L, scale, out);
    else
      local ? values_add(c, L, step, p.s, local, out) : values_store(c, L, step, p.s, out);
  }
  if (amax) *amax = bucket_amax(out, L);
}

}  // namespace

namespace {

// The bucket loop of the encoders: encode(begin, L, sc, scale_at, codes_at) encodes a bucket
// and returns its float32 values; after(begin, L, values, sc, scale) runs while the codes are
// still unpacked in sc.c (where encode left them so).
template <typename Encode, typename After>
void for_each_bucket(const QParams& p, int64_t n, uint8_t* out, Encode encode, After after) {
  Scratch sc(p.bucket < n ? p.bucket : n);
  int64_t nb = (n + p.bucket - 1) / p.bucket;
  uint8_t* codes = out + 4 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t begin = b * p.bucket, L = n - begin < p.bucket ? n - begin : p.bucket;
    const float* xb = encode(begin, L, sc, out + 4 * b, codes + begin * p.bits / 8);
    float scale;
    std::memcpy(&scale, out + 4 * b, 4);
    after(begin, L, xb, sc, scale);
  }
}

// The usual encode: input(begin, L, sc) gives a bucket's float32 values, encode_bucket the rest.
template <typename Input, typename After>
void encode_buckets(const QParams& p, int64_t n, int64_t off, const RngKey& key, uint8_t* out, Input input, After after,
                    bool unpacked) {
  for_each_bucket(
      p, n, out,
      [&](int64_t begin, int64_t L, Scratch& sc, uint8_t* scale_at, uint8_t* codes_at) {
        const float* xb = input(begin, L, sc);
        encode_bucket(p, xb, L, bucket_amax(xb, L), (uint64_t)(off + begin), key, sc, scale_at, codes_at, unpacked);
        return xb;
      },
      after);
}

RZ_CLONES void add_into(const float* x, const float* r, int64_t L, float* s) {
  for (int64_t j = 0; j < L; ++j) s[j] = rz_add(x[j], r[j]);
}
// r = s - value(code), with the decoder's values; returns max |r| as ordered bits.
RZ_CLONES uint32_t values_residual(const uint8_t* c, int64_t L, float step, int s, const float* sum, float* r) {
  uint32_t worst = 0;
  for (int64_t j = 0; j < L; ++j) {
    r[j] = rz_sub(sum[j], quant_value(c[j], step, s));
    worst = std::max(worst, abs_bits(r[j]));
  }
  return worst;
}
// q1's residual from the values themselves: a finite bucket's codes are (sum >= 0), a
// non-finite one's all 0 (encode_bucket), so no codes are needed.
RZ_CLONES uint32_t q1_residual(int64_t L, float scale, const float* sum, float* r) {
  const bool finite = abs_bits_finite(abs_bits(scale));
  uint32_t worst = 0;
  for (int64_t j = 0; j < L; ++j) {
    r[j] = rz_sub(sum[j], q1_value(finite && sum[j] >= 0.0f, scale));
    worst = std::max(worst, abs_bits(r[j]));
  }
  return worst;
}

}  // namespace

void quant_encode(const Spec& sp, InType t, const void* x, int64_t n, int64_t off, const RngKey& key, uint8_t* out) {
  encode_buckets(
      qparams(sp), n, off, key, out,
      [&](int64_t begin, int64_t L, Scratch& sc) -> const float* {
        if (t == InType::F32) return static_cast<const float*>(x) + begin;
        load_f32(t, x, begin, L, sc.x.data());
        return sc.x.data();
      },
      [](int64_t, int64_t, const float*, Scratch&, float) {}, false);
}

namespace {

// q1 with error feedback on the fused kernels: each bucket's x + r, its bits, max and lane sum
// in one sweep from memory, then the residual from the bucket in cache.
bool q1_encode_feedback(const QParams& p, const FusedQuant& k, const float* x, float* r, int64_t n, int64_t off,
                        const RngKey& key, uint8_t* out) {
  uint32_t worst = 0;
  for_each_bucket(
      p, n, out,
      [&](int64_t begin, int64_t L, Scratch& sc, uint8_t* scale_at, uint8_t* codes_at) -> const float* {
        float* s = sc.x.data();
        uint32_t am;
        const float plain = k.q1_add_pack(x + begin, r + begin, L, s, codes_at, &am);
        if (abs_bits_finite(am)) {
          const float scale = q1_scale(s, L, plain);
          std::memcpy(scale_at, &scale, 4);
        } else {  // NaN / Inf: the NaN scale and zero codes
          encode_bucket(p, s, L, am, (uint64_t)(off + begin), key, sc, scale_at, codes_at, false);
        }
        return s;
      },
      [&](int64_t begin, int64_t L, const float* s, Scratch&, float scale) {
        worst = std::max(worst, q1_residual(L, scale, s, r + begin));
      });
  return abs_bits_finite(worst);
}

}  // namespace

bool quant_encode_feedback(const Spec& sp, const float* x, float* r, int64_t n, int64_t off, const RngKey& key,
                           uint8_t* out) {
  const QParams p = qparams(sp);
  if (const FusedQuant* k = fused_quant(); k && p.bits == 1) return q1_encode_feedback(p, *k, x, r, n, off, key, out);
  uint32_t worst = 0;
  encode_buckets(
      p, n, off, key, out,
      [&](int64_t begin, int64_t L, Scratch& sc) -> const float* {
        add_into(x + begin, r + begin, L, sc.x.data());
        return sc.x.data();
      },
      [&](int64_t begin, int64_t L, const float* s, Scratch& sc, float scale) {
        const uint32_t w = p.bits == 1 ? q1_residual(L, scale, s, r + begin)
                                       : values_residual(sc.c.data(), L, quant_step(scale, p.s), p.s, s, r + begin);
        worst = std::max(worst, w);
      },
      p.bits > 1);
  return abs_bits_finite(worst);
}

void quant_decode(const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc) {
  QParams p = qparams(sp);
  int64_t B = p.bucket < n ? p.bucket : n;
  Scratch sc(B);
  int64_t nb = (n + p.bucket - 1) / p.bucket;
  const uint8_t* codes = in + 4 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t begin = b * p.bucket, L = n - begin < p.bucket ? n - begin : p.bucket;
    decode_bucket(p, codes + begin * p.bits / 8, L, b, read_scale(in + 4 * b, b), acc ? out + begin : nullptr,
                  out + begin, sc);
  }
}

void quant_decode_add_encode(const Spec& sp, const uint8_t* in, const float* local, int64_t n, int64_t off,
                             const RngKey& enc_key, uint8_t* out) {
  QParams p = qparams(sp);
  int64_t B = p.bucket < n ? p.bucket : n;
  Scratch sc(B);
  int64_t nb = (n + p.bucket - 1) / p.bucket;
  const uint8_t* codes_in = in + 4 * nb;
  uint8_t* codes_out = out + 4 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t begin = b * p.bucket, L = n - begin < p.bucket ? n - begin : p.bucket;
    float* sum = sc.x.data();
    uint32_t am;
    decode_bucket(p, codes_in + begin * p.bits / 8, L, b, read_scale(in + 4 * b, b), local + begin, sum, sc, &am);
    encode_bucket(p, sum, L, am, (uint64_t)(off + begin), enc_key, sc, out + 4 * b, codes_out + begin * p.bits / 8,
                  false);
  }
}

bool quant_reduce_encode(const Spec& sp, const uint8_t* const* in, int m, float* acc, int64_t n, int64_t off,
                         const RngKey& key, uint8_t* out, float* r) {
  const QParams p = qparams(sp);
  const int64_t B = p.bucket < n ? p.bucket : n;
  Scratch sc(B);
  const FusedQuant* fused = fused_quant();
  const int64_t nb = (n + p.bucket - 1) / p.bucket;
  uint32_t worst = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t begin = b * p.bucket, L = n - begin < p.bucket ? n - begin : p.bucket;
    const int64_t code_at = 4 * nb + begin * p.bits / 8;
    float* sum = sc.x.data();
    const float* local = acc + begin;  // sum = acc (+ r) + in[0] + in[1] + ..., added in that order
    if (r) {
      add_into(local, r + begin, L, sum);
      local = sum;
    }
    uint32_t am = 0;
    if (m == 0 && local != sum) std::memcpy(sum, local, 4 * L);
    for (int j = 0; j < m; ++j, local = sum)  // the last one finds max |sum|
      decode_bucket(p, in[j] + code_at, L, b, read_scale(in[j] + 4 * b, b), local, sum, sc, j + 1 == m ? &am : nullptr);
    if (m == 0) am = bucket_amax(sum, L);
    encode_bucket(p, sum, L, am, (uint64_t)(off + begin), key, sc, out + 4 * b, out + code_at, !fused);
    float scale;
    std::memcpy(&scale, out + 4 * b, 4);
    if (fused) {  // the codes just packed, decoded in cache
      decode_bucket(p, out + code_at, L, b, scale, nullptr, acc + begin, sc);
      for (int64_t j = 0; r && j < L; ++j) {
        r[begin + j] = rz_sub(sum[j], acc[begin + j]);
        worst = std::max(worst, abs_bits(r[begin + j]));
      }
      continue;
    }
    if (r)
      worst =
          std::max(worst, p.bits == 1 ? q1_residual(L, scale, sum, r + begin)
                                      : values_residual(sc.c.data(), L, quant_step(scale, p.s), p.s, sum, r + begin));
    if (p.bits == 1)
      q1_store(sc.c.data(), L, scale, acc + begin);
    else
      values_store(sc.c.data(), L, quant_step(scale, p.s), p.s, acc + begin);
  }
  return abs_bits_finite(worst);
}

}  // namespace ringzip::codec::detail
