// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// counter-based: the random words of an element depend only on (key, counter), so any slice of a
// tensor can be encoded independently, on CPU or GPU, and give the same bits.
//
// Keying used by every ringzip codec (see docs/wire-format.md):
//   key     = (k0, k1)           = (seed & 0xffffffff, seed >> 32)
//   counter = (c0, c1, c2, c3)   = (g/4 & 0xffffffff, g/4 >> 32, seq, stream)
// where g is the element's index in the whole tensor (elem_offset + local index), seq the
// collective sequence number, stream = rank << 8 | phase (callers choose; random-k index draws
// use stream 0 so that every rank draws the same indices).
// Random-k: element g uses output word g % 4 of block g / 4 (philox_word).
// Stochastic q8/q4/q2 (codec version 2, codec.h's kCodecVersion): element g uses ONE BYTE,
// byte g % 4 of word (g / 4) % 4 of block g / 16 (philox_byte): the block's 16 bytes read
// little-endian in word order are the bytes of elements 16q .. 16q + 15, so one Philox block
// dithers 16 elements. The byte becomes u = (byte + 0.5) / 256 (quantize_math.h's
// dither_from_byte). Codec version 1 used word g % 4 of block g / 4 and u = (word >> 8) * 2^-24.
#pragma once
#include <cstdint>

#include "codec/hd.h"

namespace ringzip::codec {

struct RngKey {
  uint64_t seed = 0;
  uint32_t seq = 0;
  uint32_t stream = 0;
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

struct U32x4 {
  uint32_t v[4];
};

// One Philox4x32-10 block. Written with 64-bit products so compilers vectorize loops of it.
RZ_HD U32x4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
#ifdef __CUDACC__
#pragma unroll
#else
#pragma GCC unroll 10
#endif
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = (uint64_t)kPhiloxM0 * c0;
    uint64_t p1 = (uint64_t)kPhiloxM1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return U32x4{{c0, c1, c2, c3}};
}

// The four words of counter block q (= g / 4) under key.
RZ_HD U32x4 philox_block(const RngKey& key, uint64_t q) {
  return philox4x32_10((uint32_t)q, (uint32_t)(q >> 32), key.seq, key.stream, (uint32_t)key.seed,
                       (uint32_t)(key.seed >> 32));
}

// The random word of element g (random-k).
RZ_HD uint32_t philox_word(const RngKey& key, uint64_t g) { return philox_block(key, g >> 2).v[g & 3]; }

// The dither byte of element g (stochastic q-codecs, codec version 2): byte g % 4 of word
// (g / 4) % 4 of counter block g / 16.
RZ_HD uint32_t philox_byte(const RngKey& key, uint64_t g) {
  return (philox_block(key, g >> 4).v[(g >> 2) & 3] >> (8 * (uint32_t)(g & 3))) & 0xffu;
}

}  // namespace ringzip::codec
