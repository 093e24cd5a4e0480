// Dispatch of the CUDA codec interface (codec_cuda.h); mirrors codec.cc. Size checks run on the
// host from the arguments alone, so nothing here waits for the device.
#include <string>

#include "codec/codec_cuda.h"
#include "codec/cuda_util.cuh"
#include "codec/hd.h"

namespace ringzip::codec::cuda {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error("ringzip codec (cuda): " + msg); }

bool is_quant(Kind k) { return k == Kind::Q8 || k == Kind::Q4 || k == Kind::Q2 || k == Kind::Q1; }
bool is_cast(Kind k) { return k == Kind::None || k == Kind::Fp16 || k == Kind::Bf16; }
bool is_sparse(Kind k) { return k == Kind::TopK || k == Kind::RandomK; }

void check_n(int64_t n) {
  if (n < 0 || n > INT32_MAX) fail("element count " + std::to_string(n) + " out of range [0, 2^31)");
}

void check_bytes(const Spec& sp, size_t in_bytes, int64_t n) {
  size_t want = encoded_bytes(sp, n);
  if (in_bytes != want)
    fail(name(sp) + " payload of " + std::to_string(in_bytes) + " bytes for " + std::to_string(n) +
         " elements; expected " + std::to_string(want));
}

// r = x - r (random-k's residual after its decode; codec.cc's generic step).
__global__ void sub_from_kernel(const float* x, float* r, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    r[i] = rz_sub(x[i], r[i]);
}

// s = x + r.
__global__ void add_kernel(const float* x, const float* r, float* s, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    s[i] = rz_add(x[i], r[i]);
}

const float* as_f32(const Ctx& c, InType t, const void* x, int64_t n) {
  if (t == InType::F32) return static_cast<const float*>(x);
  auto* tmp = static_cast<float*>(c.scratch(4 * n + 16));
  detail::load_f32(c, t, x, n, tmp);
  return tmp;
}

void decode_impl(const Ctx& c, const Spec& sp, const uint8_t* in, size_t in_bytes, int64_t n, int64_t off,
                 const RngKey& key, float* out, bool acc) {
  check_n(n);
  check_bytes(sp, in_bytes, n);
  if (n == 0) return;
  switch (sp.kind) {
    case Kind::None:
    case Kind::Fp16:
    case Kind::Bf16: return detail::cast_decode(c, sp, in, n, out, acc);
    case Kind::Q8:
    case Kind::Q4:
    case Kind::Q2:
    case Kind::Q1: return detail::quant_decode(c, sp, in, n, out, acc);
    case Kind::TopK: return detail::topk_decode(c, sp, in, n, out, acc);
    case Kind::RandomK: return detail::randomk_decode(c, sp, in, n, off, key, out, acc);
  }
}

}  // namespace

void residual(const Ctx& c, const Spec& sp, const uint8_t* in, size_t in_bytes, const float* x, int64_t n, int64_t off,
              const RngKey& key, float* r) {
  check_n(n);
  check_bytes(sp, in_bytes, n);
  if (n == 0) return;
  switch (sp.kind) {
    case Kind::None:
    case Kind::Fp16:
    case Kind::Bf16: return detail::cast_residual(c, sp, in, x, n, r);
    case Kind::Q8:
    case Kind::Q4:
    case Kind::Q2:
    case Kind::Q1: return detail::quant_residual(c, sp, in, x, n, r);
    case Kind::TopK: return detail::topk_residual(c, sp, in, x, n, r);
    case Kind::RandomK:
      detail::randomk_decode(c, sp, in, n, off, key, r, false);
      sub_from_kernel<<<grid_for(n, 256 * 4, 1 << 15), 256, 0, c.stream>>>(x, r, n);
      RZ_LAUNCH_CHECK("residual sub_from_kernel");
      return;
  }
}

void encode_feedback(const Ctx& c, const Spec& sp, const float* x, float* r, int64_t n, int64_t off, const RngKey& key,
                     uint8_t* out) {
  check_n(n);
  if (n == 0 && !is_sparse(sp.kind)) return;
  if (is_quant(sp.kind)) return detail::quant_encode_feedback(c, sp, x, r, n, off, key, out);
  // The other codecs: the same steps, unfused (as codec.cc).
  auto* s = static_cast<float*>(c.scratch(4 * n + 16));
  if (n) {
    add_kernel<<<grid_for(n, 256 * 4, 1 << 15), 256, 0, c.stream>>>(x, r, s, n);
    RZ_LAUNCH_CHECK("encode_feedback add_kernel");
  }
  encode(c, sp, InType::F32, s, n, off, key, out);
  residual(c, sp, out, encoded_bytes(sp, n), s, n, off, key, r);
}

void topk_feedback(const Ctx& c, const Spec& sp, float* x, float* r, int64_t n, uint8_t* out) {
  check_n(n);
  if (sp.kind != Kind::TopK) fail("topk_feedback: not a top-k codec");
  detail::topk_feedback(c, sp, x, r, n, out);
}

void encode(const Ctx& c, const Spec& sp, InType t, const void* x, int64_t n, int64_t off, const RngKey& key,
            uint8_t* out) {
  check_n(n);
  if (n == 0 && !is_sparse(sp.kind)) return;
  switch (sp.kind) {
    case Kind::None:
    case Kind::Fp16:
    case Kind::Bf16: return detail::cast_encode(c, sp, t, x, n, out);
    case Kind::Q8:
    case Kind::Q4:
    case Kind::Q2:
    case Kind::Q1: return detail::quant_encode(c, sp, t, x, n, off, key, out);
    case Kind::TopK: return detail::topk_encode(c, sp, as_f32(c, t, x, n), n, out);
    case Kind::RandomK: return detail::randomk_encode(c, sp, as_f32(c, t, x, n), n, off, key, out);
  }
}

void decode(const Ctx& c, const Spec& sp, const uint8_t* in, size_t in_bytes, int64_t n, int64_t off, const RngKey& key,
            float* out) {
  decode_impl(c, sp, in, in_bytes, n, off, key, out, false);
}

void decode_accumulate(const Ctx& c, const Spec& sp, const uint8_t* in, size_t in_bytes, int64_t n, int64_t off,
                       const RngKey& key, float* acc) {
  decode_impl(c, sp, in, in_bytes, n, off, key, acc, true);
}

void decode_add_encode(const Ctx& c, const Spec& sp, const uint8_t* in, size_t in_bytes, const float* local, int64_t n,
                       int64_t off, const RngKey& dec_key, const RngKey& enc_key, uint8_t* out) {
  check_n(n);
  check_bytes(sp, in_bytes, n);
  if (n == 0 && !is_sparse(sp.kind)) return;
  if (is_quant(sp.kind)) return detail::quant_decode_add_encode(c, sp, in, local, n, off, enc_key, out);
  if (is_cast(sp.kind)) return detail::cast_decode_add_encode(c, sp, in, local, n, out);
  // Generic path: dense float32 sum, then encode (as codec.cc).
  auto* sum = static_cast<float*>(c.scratch(4 * n + 16));
  if (n) RZ_CUDA_CHECK(cudaMemcpyAsync(sum, local, 4 * n, cudaMemcpyDeviceToDevice, c.stream));
  decode_impl(c, sp, in, in_bytes, n, off, dec_key, sum, true);
  encode(c, sp, InType::F32, sum, n, off, enc_key, out);
}

}  // namespace ringzip::codec::cuda
