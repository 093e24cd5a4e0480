// The codec interface the collectives call: torch-free, raw pointers, one call per chunk.
//
// A chunk is n consecutive elements of a larger tensor; elem_offset is the index of its first
// element in that tensor, so RNG counters (and random-k index draws) depend on the element's
// global position and any chunking of a tensor gives the same bits. Buckets (q-codecs) are
// counted from the chunk's first element. The byte layout of every codec is in
// docs/wire-format.md; encoded_bytes() is exact (no padding beyond what it reports).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/philox.h"

namespace ringzip::codec {

// Version of the codecs' bits. 2: stochastic q8/q4/q2 take one Philox byte per element
// (philox.h, quantize_math.h's dither_from_byte) instead of one 32-bit word (version 1). Ranks
// compare it through the mismatch check's codec hash (backend/compressed_run.h); the
// error-feedback state records it (python/ringzip/api.py).
constexpr int kCodecVersion = 2;

// The codec settings' defaults (ringzip.Options reads them from here: plan/options.h).
constexpr int64_t kBucketSize = 512;              // q-codecs: elements per scale
constexpr int64_t kTopkBlock = int64_t(1) << 20;  // top-k: elements per selection block

enum class Kind { None, Fp16, Bf16, Q8, Q4, Q2, Q1, TopK, RandomK };
// Element type of the caller's buffer; F16/BF16 are passed as uint16 bit patterns.
enum class InType { F32, F16, BF16 };

struct Spec {
  Kind kind = Kind::None;
  int bits = 32;                 // bits per element on the wire (q-codecs: 8/4/2/1; casts: 16)
  double ratio = 1.0;            // topk/randomk: fraction of elements kept
  int64_t bucket = kBucketSize;  // q-codecs: elements per scale
  bool stochastic = true;        // q8/q4/q2: stochastic (unbiased) vs round-to-nearest
};

// "none","fp16","bf16","q8","q4","q2","q1","topk:R","randomk:R" (0 < R <= 1).
// Throws std::invalid_argument with a message naming the bad part.
Spec parse(const std::string& s, int64_t bucket = kBucketSize, bool stochastic = true);
std::string name(const Spec& spec);
// The fused q8/q4/q2/q1 kernels this process uses: "avx512", "avx2" or "portable" (quantize_fused.h;
// RINGZIP_QUANT_KERNELS picks one). Throws if that variable names one this CPU cannot run.
const char* quant_kernels();
bool biased(const Spec& spec);
// Sparse codecs: elements kept out of n: max(1, ceil(ratio * n)) for n > 0, 0 for n == 0.
int64_t k_for(const Spec& spec, int64_t n);
// Exact payload size for n elements, header included.
size_t encoded_bytes(const Spec& spec, int64_t n);

void encode(const Spec& spec, InType t, const void* x, int64_t n, int64_t elem_offset, const RngKey& key, uint8_t* out);
// out = decode(in). Throws std::runtime_error if in_bytes or a header field is inconsistent.
void decode(const Spec& spec, const uint8_t* in, size_t in_bytes, int64_t n, int64_t elem_offset, const RngKey& key,
            float* out);
// acc += decode(in).
void decode_accumulate(const Spec& spec, const uint8_t* in, size_t in_bytes, int64_t n, int64_t elem_offset,
                       const RngKey& key, float* acc);
// Error feedback: r = x - decode(in), what x lost on the wire (in must be x's encoding).
// Returns true when r is known to hold no NaN/Inf (checked on the way; top-k: not checked).
bool residual(const Spec& spec, const uint8_t* in, size_t in_bytes, const float* x, int64_t n, int64_t elem_offset,
              const RngKey& key, float* r);
// Whether x holds no NaN/Inf.
bool all_finite(const float* x, int64_t n);
// Error feedback for the encode of a part sent to another rank: out = encode(x + r), then
// r = x + r - decode(out), x unchanged; bucket by bucket in cache for the q-codecs (one trip
// through memory instead of add, encode, decode, subtract). Same payload and residual as those
// steps. Returns whether r is finite (no NaN/Inf: callers need not scan it).
bool encode_feedback(const Spec& spec, const float* x, float* r, int64_t n, int64_t elem_offset, const RngKey& key,
                     uint8_t* out);
// Top-k with error feedback in one pass over memory: r += x (the value sent), x = 0 (ready to
// accumulate the sparse sum), out = encode(r), then r -= decode(out). Same payload and residual
// as adding r to x, encode and residual() would give. Returns whether every x + r was finite
// (then r is finite too: callers need not scan it for NaN/Inf).
bool topk_feedback(const Spec& spec, float* x, float* r, int64_t n, uint8_t* out);
// random-k all-reduce (collective/compressed/randomk.cc): every rank encodes the same k
// indices, so payloads add as k+1 floats -- the k values, and the payload's non-finite flag as
// NaN in slot 0 (a NaN in any rank's slot survives the sum). Payload -> values and back; the
// CUDA twins are codec::cuda::randomk_to_values/from_values.
void randomk_to_values(const uint8_t* payload, size_t k, float* vals);
void randomk_from_values(const float* vals, size_t k, uint8_t* payload);
// The owner's step of SRA for the q-codecs, bucket by bucket in cache: where r is given acc += r
// (what earlier calls owe), then acc += decode(in[j]) for j = 0 .. m-1 in that order (each
// payload in_bytes long), out = encode(acc), then r = acc - decode(out) where r is given, and
// acc = decode(out). Same bytes as those steps (which
// Compute::reduce_encode runs for the other codecs). Returns whether r is known free of NaN/Inf
// (true without r). Throws for a codec that is not q8/q4/q2/q1.
bool reduce_encode(const Spec& spec, const uint8_t* const* in, size_t in_bytes, int m, float* acc, int64_t n,
                   int64_t elem_offset, const RngKey& key, uint8_t* out, float* r);
// Fused reduce-scatter hop: out = encode(decode(in) + local).
void decode_add_encode(const Spec& spec, const uint8_t* in, size_t in_bytes, const float* local, int64_t n,
                       int64_t elem_offset, const RngKey& dec_key, const RngKey& enc_key, uint8_t* out);

}  // namespace ringzip::codec
