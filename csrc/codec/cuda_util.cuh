// Small helpers shared by the CUDA codec kernels: launch checks, grid sizes, unaligned loads and
// stores (payload parts can start at any byte: encoded sizes of q-codecs are not multiples of 4).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ringzip::codec::cuda {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("ringzip codec (cuda): ") + what + ": " + cudaGetErrorString(e));
}
#define RZ_CUDA_CHECK(expr) ::ringzip::codec::cuda::check_cuda((expr), #expr)
#define RZ_LAUNCH_CHECK(name) ::ringzip::codec::cuda::check_cuda(cudaGetLastError(), name)

// Blocks for a grid-stride loop over `work` items of `per_block` each, capped by what fills the GPU.
inline unsigned grid_for(int64_t work, int per_block, int cap = 1 << 16) {
  int64_t g = (work + per_block - 1) / per_block;
  if (g < 1) g = 1;
  return (unsigned)(g < cap ? g : cap);
}

__host__ __device__ inline bool aligned(const void* p, int a) { return ((uintptr_t)p & (uintptr_t)(a - 1)) == 0; }

__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) {
  if (((uintptr_t)p & 3) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
__device__ __forceinline__ void st_u32(uint8_t* p, uint32_t v) {
  if (((uintptr_t)p & 3) == 0) {
    *reinterpret_cast<uint32_t*>(p) = v;
  } else {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
  }
}
__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) {
  if (((uintptr_t)p & 1) == 0) return *reinterpret_cast<const uint16_t*>(p);
  return (uint16_t)(p[0] | p[1] << 8);
}
__device__ __forceinline__ void st_u16(uint8_t* p, uint16_t v) {
  if (((uintptr_t)p & 1) == 0) {
    *reinterpret_cast<uint16_t*>(p) = v;
  } else {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
  }
}
// `nbytes` (<= 8) little-endian bytes of v at p, vectorized when p allows.
__device__ __forceinline__ void st_bytes(uint8_t* p, uint64_t v, int nbytes) {
  if (nbytes == 8 && ((uintptr_t)p & 7) == 0) {
    *reinterpret_cast<uint64_t*>(p) = v;
    return;
  }
  if (nbytes == 4 && ((uintptr_t)p & 3) == 0) {
    *reinterpret_cast<uint32_t*>(p) = (uint32_t)v;
    return;
  }
  if (nbytes == 2 && ((uintptr_t)p & 1) == 0) {
    *reinterpret_cast<uint16_t*>(p) = (uint16_t)v;
    return;
  }
  for (int i = 0; i < nbytes; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
__device__ __forceinline__ uint64_t ld_bytes(const uint8_t* p, int nbytes) {
  if (nbytes == 8 && ((uintptr_t)p & 7) == 0) return *reinterpret_cast<const uint64_t*>(p);
  if (nbytes == 4 && ((uintptr_t)p & 3) == 0) return *reinterpret_cast<const uint32_t*>(p);
  if (nbytes == 2 && ((uintptr_t)p & 1) == 0) return *reinterpret_cast<const uint16_t*>(p);
  uint64_t v = 0;
  for (int i = 0; i < nbytes; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

}  // namespace ringzip::codec::cuda
