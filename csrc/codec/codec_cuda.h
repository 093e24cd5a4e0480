// CUDA twins of codec.h: the same codecs, the same bytes, on device pointers and a stream.
//
// Every call only enqueues kernels on ctx.stream (no host synchronization); pointers are device
// memory. Scratch memory comes from ctx.scratch, which must return memory usable by work queued
// on ctx.stream until that work finished (the torch caching allocator on the current stream does).
// Payload sizes are checked on the host as in codec.h; payload *contents* are not validated on
// the device (that would need a host sync): a corrupt payload gives garbage values, never an
// out-of-bounds write. Decoded NaNs may differ from the CPU's in payload bits (GPU arithmetic
// produces the canonical NaN), never in being NaN.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "codec/codec.h"

namespace ringzip::codec::cuda {

struct Ctx {
  cudaStream_t stream = nullptr;
  std::function<void*(size_t)> scratch;  // device memory, alive until the call's work finished
};

void encode(const Ctx&, const Spec&, InType t, const void* x, int64_t n, int64_t elem_offset, const RngKey& key,
            uint8_t* out);
void decode(const Ctx&, const Spec&, const uint8_t* in, size_t in_bytes, int64_t n, int64_t elem_offset,
            const RngKey& key, float* out);
void decode_accumulate(const Ctx&, const Spec&, const uint8_t* in, size_t in_bytes, int64_t n, int64_t elem_offset,
                       const RngKey& key, float* acc);
void decode_add_encode(const Ctx&, const Spec&, const uint8_t* in, size_t in_bytes, const float* local, int64_t n,
                       int64_t elem_offset, const RngKey& dec_key, const RngKey& enc_key, uint8_t* out);

// Error feedback (codec.h's residual, encode_feedback and topk_feedback): the same payloads and
// residuals. Unlike the CPU versions they do not report whether r is finite (that would need a
// host synchronization): callers that need to know scan r on the device (Compute::drop_nonfinite).
// r = x - decode(in), in being x's encoding. One pass for every codec but random-k.
void residual(const Ctx&, const Spec&, const uint8_t* in, size_t in_bytes, const float* x, int64_t n,
              int64_t elem_offset, const RngKey& key, float* r);
// out = encode(x + r), r = x + r - decode(out), x unchanged. q-codecs: one kernel (the residual
// is written while the codes are in registers); the others: add, encode, residual.
void encode_feedback(const Ctx&, const Spec&, const float* x, float* r, int64_t n, int64_t elem_offset,
                     const RngKey& key, uint8_t* out);
// Top-k only: r += x, x = 0, out = encode(r), r -= decode(out) (add pass, selection on r, then
// the k sent elements of r cleared).
void topk_feedback(const Ctx&, const Spec&, float* x, float* r, int64_t n, uint8_t* out);

// random-k all-reduce helpers (see Compute::randomk_to_values).
void randomk_to_values(cudaStream_t, const uint8_t* payload, size_t k, float* vals);
void randomk_from_values(cudaStream_t, const float* vals, size_t k, uint8_t* payload);

// Top-k selection alone (benchmarks): the k indices with the largest |x| (NaN > Inf > finite,
// ties to the lower index), ascending, written to idx (k int32).
void topk_indices(const Ctx&, const float* x, int64_t n, int64_t k, int32_t* idx);

namespace detail {
// Per-family entry points (quantize_cuda.cu, cast_cuda.cu, sparse_cuda.cu).
void cast_encode(const Ctx&, const Spec&, InType, const void* x, int64_t n, uint8_t* out);
void cast_decode(const Ctx&, const Spec&, const uint8_t* in, int64_t n, float* out, bool acc);
void load_f32(const Ctx&, InType, const void* x, int64_t n, float* out);
void cast_residual(const Ctx&, const Spec&, const uint8_t* in, const float* x, int64_t n, float* r);
void cast_decode_add_encode(const Ctx&, const Spec&, const uint8_t* in, const float* local, int64_t n, uint8_t* out);

void quant_encode(const Ctx&, const Spec&, InType, const void* x, int64_t n, int64_t off, const RngKey&, uint8_t* out);
void quant_decode(const Ctx&, const Spec&, const uint8_t* in, int64_t n, float* out, bool acc);
void quant_decode_add_encode(const Ctx&, const Spec&, const uint8_t* in, const float* local, int64_t n, int64_t off,
                             const RngKey& enc_key, uint8_t* out);
void quant_residual(const Ctx&, const Spec&, const uint8_t* in, const float* x, int64_t n, float* r);
void quant_encode_feedback(const Ctx&, const Spec&, const float* x, float* r, int64_t n, int64_t off, const RngKey&,
                           uint8_t* out);

void topk_encode(const Ctx&, const Spec&, const float* x, int64_t n, uint8_t* out);
void topk_decode(const Ctx&, const Spec&, const uint8_t* in, int64_t n, float* out, bool acc);
void topk_residual(const Ctx&, const Spec&, const uint8_t* in, const float* x, int64_t n, float* r);
void topk_feedback(const Ctx&, const Spec&, float* x, float* r, int64_t n, uint8_t* out);
void randomk_encode(const Ctx&, const Spec&, const float* x, int64_t n, int64_t off, const RngKey&, uint8_t* out);
void randomk_decode(const Ctx&, const Spec&, const uint8_t* in, int64_t n, int64_t off, const RngKey&, float* out,
                    bool acc);
}  // namespace detail

}  // namespace ringzip::codec::cuda
