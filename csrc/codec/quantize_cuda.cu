// q8 / q4 / q2 / q1 codecs on the GPU, byte-identical to quantize_cpu.cc (shared numerics in
// quantize_math.h / philox.h). Layout: nb float32 scales, then the codes packed LSB-first.
//
// Encode (and the fused decode-add-encode) runs one warp per bucket: pass 1 finds the scale
// (max |x| with a warp max; q1: the mean |x| in the documented 8-lane order, summed serially by
// lanes 0..7), pass 2 writes codes, each lane 8 consecutive elements = `bits` bytes, with one
// Philox block per 16 elements (one byte of dither each: bytes8). Buckets of up to 512 elements
// are held in registers between the passes (read once); larger ones are read again in pass 2.
// Decode is element-parallel: each thread 8 elements, one scale load, vector stores.
// Error feedback (codec.h's encode_feedback / residual) reuses both kernels: the encode kernel
// reads x + r and writes r = x + r - value(code) while the codes are still in registers; the
// decode kernel's residual mode writes r = x - value(code).
#include "codec/codec_cuda.h"
#include "codec/cast_math.h"
#include "codec/cuda_util.cuh"
#include "codec/quantize_math.h"

namespace ringzip::codec::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFull = 0xffffffffu;

// ---- sources of the values to encode ----------------------------------------------------------

// kSlowAt: at(b, e) costs more than a load (SrcDecAdd decodes one element from its byte), so
// q1's serial mean reads the bucket from shared memory instead (measured on an H200: q1
// decode-add-encode 0.25 -> 0.37 x copy; plain encode 0.54 -> 0.41, so only there).
template <InType T>
struct SrcIn {
  static constexpr bool kSlowAt = false;
  const void* x;
  bool vec;
  struct B {};
  __device__ B bucket(int64_t) const { return {}; }
  __device__ float at(const B&, int64_t e) const {
    if constexpr (T == InType::F32)
      return static_cast<const float*>(x)[e];
    else if constexpr (T == InType::F16)
      return f16_bits_to_f32(static_cast<const uint16_t*>(x)[e]);
    else
      return bf16_bits_to_f32(static_cast<const uint16_t*>(x)[e]);
  }
  // v[i] = element e + i for i < cnt, 0 beyond.
  __device__ void load8(const B& b, int64_t e, int cnt, float v[8]) const {
    if (vec && cnt == 8) {
      if constexpr (T == InType::F32) {
        const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(x) + e);
        float4 a = p[0], c = p[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
      } else {
        uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + e);
        uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          uint16_t h = (uint16_t)(w[i / 2] >> (16 * (i & 1)));
          v[i] = T == InType::F16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
        }
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = i < cnt ? at(b, e + i) : 0.f;
  }
};

// x + r, element by element (error feedback on an encode: codec.h's encode_feedback).
struct SrcFeedback {
  static constexpr bool kSlowAt = false;
  const float* x;
  const float* r;
  bool vec;  // x and r 16-byte aligned
  struct B {};
  __device__ B bucket(int64_t) const { return {}; }
  __device__ float at(const B&, int64_t e) const { return rz_add(x[e], r[e]); }
  __device__ void load8(const B& b, int64_t e, int cnt, float v[8]) const {
    if (vec && cnt == 8) {
      const float4* p = reinterpret_cast<const float4*>(x + e);
      const float4* q = reinterpret_cast<const float4*>(r + e);
      float4 a = p[0], c = p[1], ra = q[0], rc = q[1];
      v[0] = rz_add(a.x, ra.x), v[1] = rz_add(a.y, ra.y), v[2] = rz_add(a.z, ra.z), v[3] = rz_add(a.w, ra.w);
      v[4] = rz_add(c.x, rc.x), v[5] = rz_add(c.y, rc.y), v[6] = rz_add(c.z, rc.z), v[7] = rz_add(c.w, rc.w);
      return;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = i < cnt ? at(b, e + i) : 0.f;
  }
};

// decode(in) + local, bucket by bucket (the fused reduce-scatter hop).
template <int BITS>
struct SrcDecAdd {
  static constexpr bool kSlowAt = true;
  const uint8_t* scales;  // in payload
  const uint8_t* codes;
  const float* local;
  bool vec;
  struct B {
    float scale, step;
  };
  __device__ B bucket(int64_t b) const {
    float sc = u2f(ld_u32(scales + 4 * b));
    return {sc, BITS > 1 ? quant_step(sc, quant_levels(BITS)) : 0.f};
  }
  __device__ float value(const B& b, uint32_t code) const {
    if constexpr (BITS == 1)
      return q1_value(code, b.scale);
    else
      return quant_value(code, b.step, quant_levels(BITS));
  }
  __device__ float at(const B& b, int64_t e) const {
    uint32_t code = (codes[e * BITS / 8] >> ((e * BITS) & 7)) & ((1u << BITS) - 1);
    return rz_add(value(b, code), local[e]);
  }
  __device__ void load8(const B& b, int64_t e, int cnt, float v[8]) const {
    uint64_t packed = ld_bytes(codes + e * BITS / 8, (cnt * BITS + 7) / 8);
    float l[8];
    if (vec && cnt == 8) {
      const float4* p = reinterpret_cast<const float4*>(local + e);
      float4 a = p[0], c = p[1];
      l[0] = a.x, l[1] = a.y, l[2] = a.z, l[3] = a.w, l[4] = c.x, l[5] = c.y, l[6] = c.z, l[7] = c.w;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) l[i] = i < cnt ? local[e + i] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = i < cnt ? rz_add(value(b, (uint32_t)(packed >> (i * BITS)) & ((1u << BITS) - 1)), l[i]) : 0.f;
  }
};

// ---- dither bytes of 8 consecutive elements (codec version 2: philox.h's philox_byte) ----------

// Bytes of elements g0 .. g0 + 7: bytes g0 % 16 .. g0 % 16 + 7 of blocks g0 / 16 and, only when
// the 8 elements cross a 16-element boundary (g0 % 16 > 8), g0 / 16 + 1. Groups start at
// elem_offset + multiples of 8, so with elem_offset % 8 == 0 every lane computes one block.
__device__ __forceinline__ void bytes8(const RngKey& key, uint64_t g0, uint32_t d[8]) {
  const int sh = (int)(g0 & 15);
  const U32x4 a = philox_block(key, g0 >> 4);
  U32x4 b = a;
  if (sh > 8) b = philox_block(key, (g0 >> 4) + 1);
  uint32_t w0, w1, w2;  // words sh / 4 .. sh / 4 + 2 of the 8 words of a, b
  switch (sh >> 2) {
    case 0: w0 = a.v[0], w1 = a.v[1], w2 = a.v[2]; break;
    case 1: w0 = a.v[1], w1 = a.v[2], w2 = a.v[3]; break;
    case 2: w0 = a.v[2], w1 = a.v[3], w2 = b.v[0]; break;
    default: w0 = a.v[3], w1 = b.v[0], w2 = b.v[1]; break;
  }
  const uint32_t r = 8u * (uint32_t)(sh & 3);
  const uint32_t lo = __funnelshift_r(w0, w1, r), hi = __funnelshift_r(w1, w2, r);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    d[i] = (lo >> (8 * i)) & 0xffu;
    d[4 + i] = (hi >> (8 * i)) & 0xffu;
  }
}

__device__ __forceinline__ uint32_t warp_max(uint32_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    uint32_t u = __shfl_xor_sync(kFull, v, o);
    v = u > v ? u : v;
  }
  return v;
}

// ---- kernels ---------------------------------------------------------------------------------------

// FB: also writes resid[e] = v - value(code) for every element v it encodes (error feedback;
// resid may be the buffer Src reads: each lane overwrites only the group it has just read, after
// the warp's scale pass has read the whole bucket).
template <int BITS, typename Src, bool FB = false>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    encode_kernel(Src src, int64_t n, int64_t bucket, int64_t nb, int64_t off, RngKey key, bool stochastic,
                  uint8_t* out, float* resid = nullptr) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  constexpr int s = BITS > 1 ? (1 << (BITS - 1)) - 1 : 1;
  uint8_t* codes = out + 4 * nb;
  for (int64_t b = warp; b < nb; b += nwarps) {
    const int64_t begin = b * bucket;
    const int64_t L = n - begin < bucket ? n - begin : bucket;
    const auto bs = src.bucket(b);
    auto count_at = [&](int64_t j0) { return (int)(L - j0 < 8 ? L - j0 : 8); };
    // A lane's first two groups of 8 (a whole bucket of up to 512) stay in registers between
    // the scale pass and the code pass, so the bucket is read from memory once; groups beyond
    // (larger buckets) are read again in the second pass.
    const int64_t ja = 8 * lane, jb = ja + 256;
    float va[8], vb[8];
    uint32_t am = 0;
    if (ja < L) src.load8(bs, begin + ja, count_at(ja), va);
    if (jb < L) src.load8(bs, begin + jb, count_at(jb), vb);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (ja < L) am = max(am, abs_bits(va[i]));
      if (jb < L) am = max(am, abs_bits(vb[i]));
    }
    for (int64_t j0 = ja + 512; j0 < L; j0 += 256) {
      float v[8];
      src.load8(bs, begin + j0, count_at(j0), v);
#pragma unroll
      for (int i = 0; i < 8; ++i) am = max(am, abs_bits(v[i]));
    }
    am = warp_max(am);
    const bool finite = abs_bits_finite(am);
    float scale;
    if (!finite) {
      scale = u2f(kQuantNaN);
    } else if constexpr (BITS == 1) {
      // The bucket's lane sums of |x| * f, combined (f = 1: exactly |x|; kQ1Down: the overflow
      // path of quantize_math.h's q1_rescaled).
      auto lane_sums = [&](float f) {
        float sum = 0.f;
        if constexpr (Src::kSlowAt) {
          // The documented order (lane i sums elements i, i + 8, ... serially) from the
          // register-cached groups, through shared memory.
          __shared__ float held[kWarpsPerBlock][512];
          float* h = held[threadIdx.x >> 5];
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            if (ja + i < L) h[ja + i] = fabsf(va[i]);
            if (jb + i < L) h[jb + i] = fabsf(vb[i]);
          }
          __syncwarp();
          if (lane < kSumLanes) {
            const int64_t Lh = L < 512 ? L : 512;
#pragma unroll 8
            for (int64_t j = lane; j < Lh; j += kSumLanes) sum = rz_add(sum, rz_mul(h[j], f));
            for (int64_t j = 512 + lane; j < L; j += kSumLanes)
              sum = rz_add(sum, rz_mul(fabsf(src.at(bs, begin + j)), f));
          }
          __syncwarp();  // h is rewritten by this warp's next bucket
        } else if (lane < kSumLanes) {
#pragma unroll 8
          for (int64_t j = lane; j < L; j += kSumLanes) sum = rz_add(sum, rz_mul(fabsf(src.at(bs, begin + j)), f));
        }
        float l[kSumLanes];
#pragma unroll
        for (int i = 0; i < kSumLanes; ++i) l[i] = __shfl_sync(kFull, sum, i);
        return q1_combine(l);
      };
      scale = rz_div(lane_sums(1.f), (float)L);
      if (!abs_bits_finite(abs_bits(scale))) scale = q1_rescaled(lane_sums(kQ1Down), (float)L);  // warp-uniform
    } else {
      scale = u2f(am);
    }
    if (lane == 0) st_u32(out + 4 * b, f2u(scale));
    const float inv = BITS > 1 ? quant_inv(scale, s) : 0.f;
    const float step = BITS > 1 ? quant_step(scale, s) : 0.f;  // the decoder's (FB only)
    auto emit = [&](int64_t j0, const float (&v)[8]) {         // codes of the group at j0
      const int cnt = count_at(j0);
      uint64_t packed = 0;
      uint32_t c[8] = {};
      if (finite) {
        if constexpr (BITS == 1) {
#pragma unroll
          for (int i = 0; i < 8; ++i) c[i] = v[i] >= 0.0f ? 1u : 0u;
        } else if (stochastic) {
          uint32_t d[8];
          bytes8(key, (uint64_t)(off + begin + j0), d);
#pragma unroll
          for (int i = 0; i < 8; ++i) c[i] = quant_code_stoch(v[i], inv, dither_from_byte(d[i]), s);
        } else {
#pragma unroll
          for (int i = 0; i < 8; ++i) c[i] = quant_code_nearest(v[i], inv, s);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) packed |= (uint64_t)(i < cnt ? c[i] : 0u) << (i * BITS);
      }
      st_bytes(codes + (begin + j0) * BITS / 8, packed, (cnt * BITS + 7) / 8);
      if constexpr (FB) {
        // As quantize_cpu.cc: r = v - value(code); a non-finite bucket (scale NaN) gives NaN.
        float rv[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float q = BITS == 1 ? q1_value(c[i], scale) : quant_value(c[i], step, s);
          rv[i] = rz_sub(v[i], finite ? q : scale);
        }
        float* o = resid + begin + j0;
        if (cnt == 8 && aligned(o, 16)) {
          reinterpret_cast<float4*>(o)[0] = make_float4(rv[0], rv[1], rv[2], rv[3]);
          reinterpret_cast<float4*>(o)[1] = make_float4(rv[4], rv[5], rv[6], rv[7]);
        } else {
          for (int i = 0; i < cnt; ++i) o[i] = rv[i];
        }
      }
    };
    if (ja < L) emit(ja, va);
    if (jb < L) emit(jb, vb);
    for (int64_t j0 = ja + 512; j0 < L; j0 += 256) {
      float v[8];
      src.load8(bs, begin + j0, count_at(j0), v);
      emit(j0, v);
    }
  }
}

// Acc: out += value; Res: out = x - value (error feedback: what x lost on the wire); else out = value.
template <int BITS, bool Acc, bool Res = false>
__global__ void decode_kernel(const uint8_t* in, int64_t n, int64_t bucket, int64_t nb, float* out, bool vec,
                              const float* x = nullptr) {
  constexpr int s = BITS > 1 ? (1 << (BITS - 1)) - 1 : 1;
  const uint8_t* codes = in + 4 * nb;
  const int64_t groups = (n + 7) / 8;
  const int32_t gpb = (int32_t)(bucket / 8);  // groups per bucket
  for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
    const int64_t e = 8 * g;
    const int cnt = (int)(n - e < 8 ? n - e : 8);
    const int32_t b = (int32_t)g / gpb;
    const float scale = u2f(ld_u32(in + 4 * (int64_t)b));
    const float step = BITS > 1 ? quant_step(scale, s) : 0.f;
    const uint64_t packed = ld_bytes(codes + e * BITS / 8, (cnt * BITS + 7) / 8);
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t c = (uint32_t)(packed >> (i * BITS)) & ((1u << BITS) - 1);
      v[i] = BITS == 1 ? q1_value(c, scale) : quant_value(c, step, s);
    }
    float* o = out + e;
    if constexpr (Res) {
      if (vec && cnt == 8) {
        const float4* px = reinterpret_cast<const float4*>(x + e);
        float4 a = px[0], c = px[1];
        float4* p = reinterpret_cast<float4*>(o);
        p[0] = make_float4(rz_sub(a.x, v[0]), rz_sub(a.y, v[1]), rz_sub(a.z, v[2]), rz_sub(a.w, v[3]));
        p[1] = make_float4(rz_sub(c.x, v[4]), rz_sub(c.y, v[5]), rz_sub(c.z, v[6]), rz_sub(c.w, v[7]));
      } else {
        for (int i = 0; i < cnt; ++i) o[i] = rz_sub(x[e + i], v[i]);
      }
      continue;
    }
    if (vec && cnt == 8) {
      float4* p = reinterpret_cast<float4*>(o);
      if (Acc) {
        float4 a = p[0], c = p[1];
        p[0] = make_float4(rz_add(a.x, v[0]), rz_add(a.y, v[1]), rz_add(a.z, v[2]), rz_add(a.w, v[3]));
        p[1] = make_float4(rz_add(c.x, v[4]), rz_add(c.y, v[5]), rz_add(c.z, v[6]), rz_add(c.w, v[7]));
      } else {
        p[0] = make_float4(v[0], v[1], v[2], v[3]);
        p[1] = make_float4(v[4], v[5], v[6], v[7]);
      }
    } else {
      for (int i = 0; i < cnt; ++i) o[i] = Acc ? rz_add(o[i], v[i]) : v[i];
    }
  }
}

// ---- launchers -------------------------------------------------------------------------------------

unsigned enc_blocks(int64_t nb) { return grid_for(nb, kWarpsPerBlock, 1 << 16); }

template <typename Src>
void launch_encode(const Ctx& c, int bits, const Src& src, int64_t n, const Spec& sp, int64_t off, const RngKey& key,
                   uint8_t* out) {
  const int64_t nb = (n + sp.bucket - 1) / sp.bucket;
  const unsigned g = enc_blocks(nb), t = kWarpsPerBlock * 32;
  switch (bits) {
    case 8: encode_kernel<8><<<g, t, 0, c.stream>>>(src, n, sp.bucket, nb, off, key, sp.stochastic, out); break;
    case 4: encode_kernel<4><<<g, t, 0, c.stream>>>(src, n, sp.bucket, nb, off, key, sp.stochastic, out); break;
    case 2: encode_kernel<2><<<g, t, 0, c.stream>>>(src, n, sp.bucket, nb, off, key, sp.stochastic, out); break;
    default: encode_kernel<1><<<g, t, 0, c.stream>>>(src, n, sp.bucket, nb, off, key, sp.stochastic, out); break;
  }
  RZ_LAUNCH_CHECK("quantize encode_kernel");
}

template <int BITS>
void launch_dae(const Ctx& c, const Spec& sp, const uint8_t* in, const float* local, int64_t n, int64_t off,
                const RngKey& key, uint8_t* out) {
  const int64_t nb = (n + sp.bucket - 1) / sp.bucket;
  SrcDecAdd<BITS> src{in, in + 4 * nb, local, aligned(local, 16)};
  encode_kernel<BITS>
      <<<enc_blocks(nb), kWarpsPerBlock * 32, 0, c.stream>>>(src, n, sp.bucket, nb, off, key, sp.stochastic, out);
  RZ_LAUNCH_CHECK("quantize decode_add_encode kernel");
}

template <int BITS>
void launch_feedback(const Ctx& c, const Spec& sp, const float* x, float* r, int64_t n, int64_t off, const RngKey& key,
                     uint8_t* out) {
  const int64_t nb = (n + sp.bucket - 1) / sp.bucket;
  SrcFeedback src{x, r, aligned(x, 16) && aligned(r, 16)};
  encode_kernel<BITS, SrcFeedback, true>
      <<<enc_blocks(nb), kWarpsPerBlock * 32, 0, c.stream>>>(src, n, sp.bucket, nb, off, key, sp.stochastic, out, r);
  RZ_LAUNCH_CHECK("quantize encode_feedback kernel");
}

// x: with a residual, out = x - decode(in) instead.
template <int BITS>
void launch_decode(const Ctx& c, const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc,
                   const float* x = nullptr) {
  const int64_t nb = (n + sp.bucket - 1) / sp.bucket;
  const unsigned g = grid_for((n + 7) / 8, 256, 1 << 16);
  const bool vec = aligned(out, 16) && (!x || aligned(x, 16));
  if (x)
    decode_kernel<BITS, false, true><<<g, 256, 0, c.stream>>>(in, n, sp.bucket, nb, out, vec, x);
  else if (acc)
    decode_kernel<BITS, true><<<g, 256, 0, c.stream>>>(in, n, sp.bucket, nb, out, vec);
  else
    decode_kernel<BITS, false><<<g, 256, 0, c.stream>>>(in, n, sp.bucket, nb, out, vec);
  RZ_LAUNCH_CHECK("quantize decode_kernel");
}

}  // namespace

namespace detail {

void quant_encode(const Ctx& c, const Spec& sp, InType t, const void* x, int64_t n, int64_t off, const RngKey& key,
                  uint8_t* out) {
  switch (t) {
    case InType::F32: return launch_encode(c, sp.bits, SrcIn<InType::F32>{x, aligned(x, 16)}, n, sp, off, key, out);
    case InType::F16: return launch_encode(c, sp.bits, SrcIn<InType::F16>{x, aligned(x, 16)}, n, sp, off, key, out);
    case InType::BF16: return launch_encode(c, sp.bits, SrcIn<InType::BF16>{x, aligned(x, 16)}, n, sp, off, key, out);
  }
}

void quant_decode(const Ctx& c, const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc) {
  switch (sp.bits) {
    case 8: return launch_decode<8>(c, sp, in, n, out, acc);
    case 4: return launch_decode<4>(c, sp, in, n, out, acc);
    case 2: return launch_decode<2>(c, sp, in, n, out, acc);
    default: return launch_decode<1>(c, sp, in, n, out, acc);
  }
}

void quant_residual(const Ctx& c, const Spec& sp, const uint8_t* in, const float* x, int64_t n, float* r) {
  switch (sp.bits) {
    case 8: return launch_decode<8>(c, sp, in, n, r, false, x);
    case 4: return launch_decode<4>(c, sp, in, n, r, false, x);
    case 2: return launch_decode<2>(c, sp, in, n, r, false, x);
    default: return launch_decode<1>(c, sp, in, n, r, false, x);
  }
}

void quant_encode_feedback(const Ctx& c, const Spec& sp, const float* x, float* r, int64_t n, int64_t off,
                           const RngKey& key, uint8_t* out) {
  switch (sp.bits) {
    case 8: return launch_feedback<8>(c, sp, x, r, n, off, key, out);
    case 4: return launch_feedback<4>(c, sp, x, r, n, off, key, out);
    case 2: return launch_feedback<2>(c, sp, x, r, n, off, key, out);
    default: return launch_feedback<1>(c, sp, x, r, n, off, key, out);
  }
}

void quant_decode_add_encode(const Ctx& c, const Spec& sp, const uint8_t* in, const float* local, int64_t n,
                             int64_t off, const RngKey& key, uint8_t* out) {
  switch (sp.bits) {
    case 8: return launch_dae<8>(c, sp, in, local, n, off, key, out);
    case 4: return launch_dae<4>(c, sp, in, local, n, off, key, out);
    case 2: return launch_dae<2>(c, sp, in, local, n, off, key, out);
    default: return launch_dae<1>(c, sp, in, local, n, off, key, out);
  }
}

}  // namespace detail
}  // namespace ringzip::codec::cuda
