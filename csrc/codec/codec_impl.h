// Internal: per-family entry points behind codec.h's dispatch (codec.cc).
#pragma once
#include <vector>

#include "codec/codec.h"

// Hot loops are compiled for the baseline ISA and cloned for AVX2 / AVX-512 (runtime dispatch
// by the loader), so one wheel is fast on every x86-64 machine.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(RINGZIP_NO_CLONES)
#define RZ_CLONES __attribute__((target_clones("default", "avx2", "arch=x86-64-v4")))
#else
#define RZ_CLONES
#endif

namespace ringzip::codec::detail {

[[noreturn]] void fail(const std::string& msg);  // throws std::runtime_error("ringzip codec: ...")

// Elements of the caller's buffer as float32 (exact for every InType).
void load_f32(InType t, const void* x, int64_t begin, int64_t count, float* out);

// Philox words of global elements [g0, g0 + L): the word of g0 + j lands at w[j + (g0 & 3)];
// w must hold 4 * ceil(((g0 & 3) + L) / 4) words.
void philox_fill(const RngKey& key, uint64_t g0, int64_t L, uint32_t* w);
// max |x| as ordered bits (>= 0x7f800000 means a NaN or Inf is present).
uint32_t amax_bits(const float* x, int64_t L);

void cast_encode(const Spec&, InType, const void* x, int64_t n, uint8_t* out);
void cast_decode(const Spec&, const uint8_t* in, int64_t n, float* out, bool accumulate);

void quant_encode(const Spec&, InType, const void* x, int64_t n, int64_t off, const RngKey&, uint8_t* out);
void quant_decode(const Spec&, const uint8_t* in, int64_t n, float* out, bool accumulate);
bool quant_encode_feedback(const Spec&, const float* x, float* r, int64_t n, int64_t off, const RngKey&, uint8_t* out);
bool quant_reduce_encode(const Spec&, const uint8_t* const* in, int m, float* acc, int64_t n, int64_t off,
                         const RngKey& key, uint8_t* out, float* r);
void quant_decode_add_encode(const Spec&, const uint8_t* in, const float* local, int64_t n, int64_t off,
                             const RngKey& enc_key, uint8_t* out);

void topk_encode(const Spec&, const float* x, int64_t n, uint8_t* out);
void topk_decode(const Spec&, const uint8_t* in, int64_t n, float* out, bool accumulate);
void topk_residual(const Spec&, const uint8_t* in, const float* x, int64_t n, float* r);
bool topk_feedback(const Spec&, float* x, float* r, int64_t n, uint8_t* out);
void randomk_encode(const Spec&, const float* x, int64_t n, int64_t off, const RngKey&, uint8_t* out);
void randomk_decode(const Spec&, const uint8_t* in, int64_t n, int64_t off, const RngKey&, float* out, bool accumulate);
// Random-k sparse pattern of a chunk: k sorted local indices (shared by encode and decode).
void randomk_indices(const Spec&, int64_t n, int64_t off, const RngKey&, std::vector<int32_t>& idx);

}  // namespace ringzip::codec::detail
