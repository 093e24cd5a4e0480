// Fused AVX-512 bucket kernels of the q8/q4/q2 codecs (quantize_avx512.cc). quantize_cpu.cc uses
// them when the CPU has AVX-512 F/BW/VBMI and falls back to its portable passes otherwise; both
// produce the same bytes (docs/wire-format.md), the portable passes being the readable statement
// of the arithmetic.
#pragma once
#include <cstdint>

namespace ringzip::codec::detail {

// Whether this CPU runs the kernels below (checked once).
bool quant_avx512_available();

// max |x| as ordered bits (abs_bits), like amax_bits.
uint32_t amax_bits_avx512(const float* x, int64_t L);

// Codes of a finite bucket, packed: element j's code (quant_code_stoch with dither byte d[j], or
// quant_code_nearest when d is null) at bit j * bits of out; ceil(L * bits / 8) bytes written,
// unused high bits of the last byte 0. bits is 8, 4 or 2.
void codes_pack_avx512(int bits, const float* x, const uint8_t* d, int64_t L, float inv, uint8_t* out);

// sum[j] = quant_value(code j of `in`, step) + local[j] for the L packed codes of a bucket, and
// *amax = max |sum| as ordered bits. Returns false (writing nothing useful) if a code of the
// bytes covering L codes is all ones, the pattern no encoder writes.
bool unpack_add_avx512(int bits, const uint8_t* in, int64_t L, float step, const float* local, float* sum,
                       uint32_t* amax);

}  // namespace ringzip::codec::detail
