// Host/device qualifiers and exactly-rounded float helpers shared by the CPU kernels and their
// CUDA twins. Every per-element operation of a codec goes through these so that both sides
// perform the same IEEE-754 float32 operations in the same order (no FMA contraction on device:
// __fmul_rn/__fadd_rn are never fused; on the host the codec sources build with
// -ffp-contract=off).
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define RZ_HD __host__ __device__ __forceinline__
#else
#define RZ_HD inline __attribute__((always_inline))
#endif

namespace ringzip::codec {

RZ_HD float rz_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
RZ_HD float rz_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
RZ_HD float rz_sub(float a, float b) {  // not a + (-b): that flips the sign of a NaN b
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
RZ_HD float rz_div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
RZ_HD uint32_t f2u(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
RZ_HD float u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

}  // namespace ringzip::codec
