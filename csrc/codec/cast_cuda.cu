// none / fp16 / bf16 codecs on the GPU: element-wise casts, 4 elements per thread with 16/8-byte
// vector accesses when the buffers allow it. Bit-identical to cast_cpu.cc (cast_math.h).
#include "codec/cast_math.h"
#include "codec/codec_cuda.h"
#include "codec/cuda_util.cuh"

namespace ringzip::codec::cuda {
namespace {

constexpr int kThreads = 256;

// Four input elements as float32.
template <InType T>
__device__ __forceinline__ void load4(const void* x, int64_t e, int64_t n, bool vec, float v[4]) {
  if constexpr (T == InType::F32) {
    const float* p = static_cast<const float*>(x) + e;
    if (vec && e + 4 <= n) {
      float4 q = *reinterpret_cast<const float4*>(p);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
      for (int i = 0; i < 4; ++i) v[i] = e + i < n ? p[i] : 0.f;
    }
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(x) + e;
    uint16_t h[4];
    if (vec && e + 4 <= n) {
      uint2 q = *reinterpret_cast<const uint2*>(p);
      h[0] = (uint16_t)q.x, h[1] = (uint16_t)(q.x >> 16), h[2] = (uint16_t)q.y, h[3] = (uint16_t)(q.y >> 16);
    } else {
      for (int i = 0; i < 4; ++i) h[i] = e + i < n ? p[i] : 0;
    }
    for (int i = 0; i < 4; ++i) v[i] = T == InType::F16 ? f16_bits_to_f32(h[i]) : bf16_bits_to_f32(h[i]);
  }
}

// out (bytes) = float32 of x.
template <InType T>
__global__ void widen_kernel(const void* x, int64_t n, uint8_t* out, bool vec) {
  for (int64_t e = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x); e < n;
       e += 4 * (int64_t)gridDim.x * blockDim.x) {
    float v[4];
    load4<T>(x, e, n, vec, v);
    uint8_t* o = out + 4 * e;
    if (vec && e + 4 <= n) {
      *reinterpret_cast<float4*>(o) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      for (int i = 0; i < 4 && e + i < n; ++i) st_u32(o + 4 * i, f2u(v[i]));
    }
  }
}

// out (bytes) = 16-bit encoding of x.
template <InType T, bool ToF16>
__global__ void narrow_kernel(const void* x, int64_t n, uint8_t* out, bool vec) {
  for (int64_t e = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x); e < n;
       e += 4 * (int64_t)gridDim.x * blockDim.x) {
    float v[4];
    load4<T>(x, e, n, vec, v);
    uint16_t h[4];
    for (int i = 0; i < 4; ++i) h[i] = ToF16 ? f32_to_f16_bits(v[i]) : f32_to_bf16_bits(v[i]);
    uint8_t* o = out + 2 * e;
    if (vec && e + 4 <= n) {
      *reinterpret_cast<uint2*>(o) = make_uint2(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16);
    } else {
      for (int i = 0; i < 4 && e + i < n; ++i) st_u16(o + 2 * i, h[i]);
    }
  }
}

// Four decoded elements of a none/fp16/bf16 payload (0 beyond n).
template <Kind K>
__device__ __forceinline__ void decode4(const uint8_t* in, int64_t e, int64_t n, bool full, float v[4]) {
  if constexpr (K == Kind::None) {
    const uint8_t* p = in + 4 * e;
    if (full) {
      float4 q = *reinterpret_cast<const float4*>(p);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
      for (int i = 0; i < 4; ++i) v[i] = e + i < n ? u2f(ld_u32(p + 4 * i)) : 0.f;
    }
  } else {
    const uint8_t* p = in + 2 * e;
    uint16_t h[4];
    if (full) {
      uint2 q = *reinterpret_cast<const uint2*>(p);
      h[0] = (uint16_t)q.x, h[1] = (uint16_t)(q.x >> 16), h[2] = (uint16_t)q.y, h[3] = (uint16_t)(q.y >> 16);
    } else {
      for (int i = 0; i < 4; ++i) h[i] = e + i < n ? ld_u16(p + 2 * i) : 0;
    }
    for (int i = 0; i < 4; ++i) v[i] = K == Kind::Fp16 ? f16_bits_to_f32(h[i]) : bf16_bits_to_f32(h[i]);
  }
}

// out = / += decode of a none/fp16/bf16 payload; Res: out = x - decode (error feedback).
template <Kind K, bool Acc, bool Res = false>
__global__ void uncast_kernel(const uint8_t* in, int64_t n, float* out, bool vec, const float* x = nullptr) {
  for (int64_t e = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x); e < n;
       e += 4 * (int64_t)gridDim.x * blockDim.x) {
    float v[4];
    const bool full = vec && e + 4 <= n;
    decode4<K>(in, e, n, full, v);
    float* o = out + e;
    if constexpr (Res) {
      if (full) {
        float4 a = *reinterpret_cast<const float4*>(x + e);
        *reinterpret_cast<float4*>(o) =
            make_float4(rz_sub(a.x, v[0]), rz_sub(a.y, v[1]), rz_sub(a.z, v[2]), rz_sub(a.w, v[3]));
      } else {
        for (int i = 0; i < 4 && e + i < n; ++i) o[i] = rz_sub(x[e + i], v[i]);
      }
      continue;
    }
    if (full) {
      float4 r = make_float4(v[0], v[1], v[2], v[3]);
      if (Acc) {
        float4 a = *reinterpret_cast<float4*>(o);
        r = make_float4(rz_add(a.x, v[0]), rz_add(a.y, v[1]), rz_add(a.z, v[2]), rz_add(a.w, v[3]));
      }
      *reinterpret_cast<float4*>(o) = r;
    } else {
      for (int i = 0; i < 4 && e + i < n; ++i) o[i] = Acc ? rz_add(o[i], v[i]) : v[i];
    }
  }
}

unsigned blocks(int64_t n) { return grid_for((n + 3) / 4, kThreads, 1 << 15); }

// out = encode(local + decode(in)) in one pass (the reduce-scatter hop; codec.cc's generic path
// computes the same sum, local + value, then encodes it).
template <Kind K>
__global__ void dae_kernel(const uint8_t* in, const float* local, int64_t n, uint8_t* out, bool vec) {
  for (int64_t e = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x); e < n;
       e += 4 * (int64_t)gridDim.x * blockDim.x) {
    float v[4], l[4];
    const bool full = vec && e + 4 <= n;
    decode4<K>(in, e, n, full, v);
    load4<InType::F32>(local, e, n, full, l);
    for (int i = 0; i < 4; ++i) v[i] = rz_add(l[i], v[i]);
    if constexpr (K == Kind::None) {
      uint8_t* o = out + 4 * e;
      if (full) {
        *reinterpret_cast<float4*>(o) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        for (int i = 0; i < 4 && e + i < n; ++i) st_u32(o + 4 * i, f2u(v[i]));
      }
    } else {
      uint16_t h[4];
      for (int i = 0; i < 4; ++i) h[i] = K == Kind::Fp16 ? f32_to_f16_bits(v[i]) : f32_to_bf16_bits(v[i]);
      uint8_t* o = out + 2 * e;
      if (full) {
        *reinterpret_cast<uint2*>(o) = make_uint2(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16);
      } else {
        for (int i = 0; i < 4 && e + i < n; ++i) st_u16(o + 2 * i, h[i]);
      }
    }
  }
}

template <Kind K>
void dae(const Ctx& c, const uint8_t* in, const float* local, int64_t n, uint8_t* out) {
  const int a = K == Kind::None ? 16 : 8;
  const bool vec = aligned(in, a) && aligned(local, 16) && aligned(out, a);
  dae_kernel<K><<<blocks(n), kThreads, 0, c.stream>>>(in, local, n, out, vec);
  RZ_LAUNCH_CHECK("cast decode_add_encode kernel");
}

template <InType T>
void widen(const Ctx& c, const void* x, int64_t n, uint8_t* out) {
  bool vec = aligned(x, T == InType::F32 ? 16 : 8) && aligned(out, 16);
  widen_kernel<T><<<blocks(n), kThreads, 0, c.stream>>>(x, n, out, vec);
  RZ_LAUNCH_CHECK("widen_kernel");
}

template <bool ToF16>
void narrow(const Ctx& c, InType t, const void* x, int64_t n, uint8_t* out) {
  bool vec = aligned(x, t == InType::F32 ? 16 : 8) && aligned(out, 8);
  unsigned g = blocks(n);
  switch (t) {
    case InType::F32: narrow_kernel<InType::F32, ToF16><<<g, kThreads, 0, c.stream>>>(x, n, out, vec); break;
    case InType::F16: narrow_kernel<InType::F16, ToF16><<<g, kThreads, 0, c.stream>>>(x, n, out, vec); break;
    case InType::BF16: narrow_kernel<InType::BF16, ToF16><<<g, kThreads, 0, c.stream>>>(x, n, out, vec); break;
  }
  RZ_LAUNCH_CHECK("narrow_kernel");
}

template <Kind K>
void uncast(const Ctx& c, const uint8_t* in, int64_t n, float* out, bool acc, const float* x = nullptr) {
  bool vec = aligned(in, K == Kind::None ? 16 : 8) && aligned(out, 16) && (!x || aligned(x, 16));
  if (x)
    uncast_kernel<K, false, true><<<blocks(n), kThreads, 0, c.stream>>>(in, n, out, vec, x);
  else if (acc)
    uncast_kernel<K, true><<<blocks(n), kThreads, 0, c.stream>>>(in, n, out, vec);
  else
    uncast_kernel<K, false><<<blocks(n), kThreads, 0, c.stream>>>(in, n, out, vec);
  RZ_LAUNCH_CHECK("uncast_kernel");
}

}  // namespace

namespace detail {

void load_f32(const Ctx& c, InType t, const void* x, int64_t n, float* out) {
  if (n == 0) return;
  auto* o = reinterpret_cast<uint8_t*>(out);
  switch (t) {
    case InType::F32: RZ_CUDA_CHECK(cudaMemcpyAsync(out, x, 4 * n, cudaMemcpyDeviceToDevice, c.stream)); return;
    case InType::F16: return widen<InType::F16>(c, x, n, o);
    case InType::BF16: return widen<InType::BF16>(c, x, n, o);
  }
}

void cast_encode(const Ctx& c, const Spec& sp, InType t, const void* x, int64_t n, uint8_t* out) {
  switch (sp.kind) {
    case Kind::None:
      if (t == InType::F32) {
        RZ_CUDA_CHECK(cudaMemcpyAsync(out, x, 4 * n, cudaMemcpyDeviceToDevice, c.stream));
        return;
      }
      return t == InType::F16 ? widen<InType::F16>(c, x, n, out) : widen<InType::BF16>(c, x, n, out);
    case Kind::Fp16:
      if (t == InType::F16) {
        RZ_CUDA_CHECK(cudaMemcpyAsync(out, x, 2 * n, cudaMemcpyDeviceToDevice, c.stream));
        return;
      }
      return narrow<true>(c, t, x, n, out);
    case Kind::Bf16:
      if (t == InType::BF16) {
        RZ_CUDA_CHECK(cudaMemcpyAsync(out, x, 2 * n, cudaMemcpyDeviceToDevice, c.stream));
        return;
      }
      return narrow<false>(c, t, x, n, out);
    default: throw std::runtime_error("ringzip codec (cuda): cast_encode: not a cast codec");
  }
}

void cast_decode(const Ctx& c, const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc) {
  switch (sp.kind) {
    case Kind::None:
      if (!acc) {
        RZ_CUDA_CHECK(cudaMemcpyAsync(out, in, 4 * n, cudaMemcpyDeviceToDevice, c.stream));
        return;
      }
      return uncast<Kind::None>(c, in, n, out, acc);
    case Kind::Fp16: return uncast<Kind::Fp16>(c, in, n, out, acc);
    case Kind::Bf16: return uncast<Kind::Bf16>(c, in, n, out, acc);
    default: throw std::runtime_error("ringzip codec (cuda): cast_decode: not a cast codec");
  }
}

void cast_residual(const Ctx& c, const Spec& sp, const uint8_t* in, const float* x, int64_t n, float* r) {
  switch (sp.kind) {
    case Kind::None: return uncast<Kind::None>(c, in, n, r, false, x);
    case Kind::Fp16: return uncast<Kind::Fp16>(c, in, n, r, false, x);
    case Kind::Bf16: return uncast<Kind::Bf16>(c, in, n, r, false, x);
    default: throw std::runtime_error("ringzip codec (cuda): cast_residual: not a cast codec");
  }
}

void cast_decode_add_encode(const Ctx& c, const Spec& sp, const uint8_t* in, const float* local, int64_t n,
                            uint8_t* out) {
  switch (sp.kind) {
    case Kind::None: return dae<Kind::None>(c, in, local, n, out);
    case Kind::Fp16: return dae<Kind::Fp16>(c, in, local, n, out);
    case Kind::Bf16: return dae<Kind::Bf16>(c, in, local, n, out);
    default: throw std::runtime_error("ringzip codec (cuda): cast_decode_add_encode: not a cast codec");
  }
}

}  // namespace detail
}  // namespace ringzip::codec::cuda
