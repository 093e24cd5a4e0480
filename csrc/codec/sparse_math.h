// Ordering keys of the sparse codecs, shared by sparse_cpu.cc and its CUDA twin.
//
// top-k: element i ranks by key = |x_i| as ordered bits (NaN > Inf > finite), larger first, ties
//   to the lower index: composite = key << 32 | (0xffffffff - i), the k largest composites win.
// random-k: element i (global index g = elem_offset + i) ranks by its Philox word under
//   (seed, seq, stream 0): composite = word << 32 | i, the k smallest composites win.
// Both composites are unique per chunk, so the selected set is well defined.
#pragma once
#include <cstddef>
#include <cstdint>

#include "codec/hd.h"

namespace ringzip::codec {

RZ_HD uint64_t topk_composite(float x, uint32_t i) {
  return (uint64_t)(f2u(x) & 0x7fffffffu) << 32 | (uint64_t)(0xffffffffu - i);
}
RZ_HD uint32_t topk_index(uint64_t comp) { return 0xffffffffu - (uint32_t)comp; }

RZ_HD uint64_t randomk_composite(uint32_t word, uint32_t i) { return (uint64_t)word << 32 | i; }
RZ_HD uint32_t randomk_index(uint64_t comp) { return (uint32_t)comp; }

constexpr uint32_t kRandomkNonFinite = 1u;  // header flag: the encoded chunk held a NaN/Inf

// random-k wire layout (docs/wire-format.md): int32 k | uint32 flags | k float32 values.
constexpr size_t kRandomkFlagsAt = 4, kRandomkValuesAt = 8;

}  // namespace ringzip::codec
