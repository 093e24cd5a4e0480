#pragma once
// Where an algorithm's buffers live and how its element-wise work runs there. Algorithms
// call only these (and the Transport), so the same algorithm runs on host memory with the CPU
// kernels and on device memory with the CUDA twins on a stream.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "codec/codec.h"
#include "common/types.h"

namespace ringzip {

class Compute {
 public:
  virtual ~Compute() = default;
  // Scratch memory in the compute's address space, freed when the pointer is dropped (for a
  // device, not before the work queued on it has used it).
  virtual std::shared_ptr<uint8_t> alloc(size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Between host memory and the compute's: small exchanges (the tuner's agreement) and sample
  // data. to_host returns once the bytes are there.
  virtual void to_device(void* dst, const void* host, size_t bytes) { copy(dst, host, bytes); }
  virtual void to_host(void* host, const void* src, size_t bytes) { copy(host, src, bytes); }
  // Returns once the work queued so far has run. A device queues kernels and transfers on a
  // stream and the calling thread returns at once; whoever times a call on it waits here.
  virtual void sync() {}
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void reduce_into(DType t, RedOp op, void* acc, const void* in, size_t n) = 0;
  virtual void scale(DType t, void* data, size_t n, double factor) = 0;
  // r[i] = x[i] - r[i] (error feedback: r held decode(encode(x))).
  virtual void residual(float* r, const float* x, size_t n) = 0;
  // Zeroes r when any element is NaN/Inf: a non-finite step (AMP skips it) must not poison
  // the residual of later steps.
  virtual void drop_nonfinite(float* r, size_t n) = 0;

  virtual void encode(const codec::Spec& s, codec::InType t, const void* x, int64_t n, int64_t off,
                      const codec::RngKey& k, uint8_t* out) = 0;
  virtual void decode(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                      const codec::RngKey& k, float* out) = 0;
  virtual void decode_accumulate(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                                 const codec::RngKey& k, float* acc) = 0;
  virtual void decode_add_encode(const codec::Spec& s, const uint8_t* in, size_t bytes, const float* local, int64_t n,
                                 int64_t off, const codec::RngKey& dk, const codec::RngKey& ek, uint8_t* out) = 0;
  // The owner's step of SRA (codec::reduce_encode): where r is given acc += r (what earlier
  // calls owe), acc += decode(in[j]) for j = 0 .. m-1 in order (keys dk[j]), out = encode(acc)
  // (key ek), r = acc - decode(out) where r is given, acc = decode(out). Returns whether r is
  // known free of NaN/Inf. These steps, unless fused (the host's q-codecs: codec::reduce_encode).
  virtual bool reduce_encode(const codec::Spec& s, const uint8_t* const* in, size_t bytes, int m,
                             const codec::RngKey* dk, float* acc, int64_t n, int64_t off, const codec::RngKey& ek,
                             uint8_t* out, float* r) {
    if (r) reduce_into(DType::F32, RedOp::Sum, acc, r, n);
    for (int j = 0; j < m; ++j) decode_accumulate(s, in[j], bytes, n, off, dk[j], acc);
    encode(s, codec::InType::F32, acc, n, off, ek, out);
    const size_t out_bytes = codec::encoded_bytes(s, n);
    const bool finite = !r || decode_residual(s, out, out_bytes, n, off, ek, acc, r);
    decode(s, out, out_bytes, n, off, ek, acc);
    return finite;
  }
  // Error feedback: r = x - decode(in), in being x's encoding (what x lost on the wire).
  // Returns true when r is known to hold no NaN/Inf (false: unknown).
  virtual bool decode_residual(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                               const codec::RngKey& k, const float* x, float* r) {
    decode(s, in, bytes, n, off, k, r);
    residual(r, x, n);
    return false;
  }
  // Error feedback on the encode of a part sent away (codec::encode_feedback): out =
  // encode(x + r), r = x + r - decode(out), x unchanged; `finite`: no NaN/Inf in r. Returns
  // false, touching nothing, where not fused.
  virtual bool encode_feedback(const codec::Spec&, const float* /*x*/, float* /*r*/, int64_t /*n*/, int64_t /*off*/,
                               const codec::RngKey&, uint8_t* /*out*/, bool& /*finite*/) {
    return false;
  }
  // Top-k with error feedback fused into one pass (codec::topk_feedback): r += x, x = 0,
  // out = encode(r), r -= decode(out); `finite`: no NaN/Inf in r afterwards. Returns false,
  // touching nothing, where not fused.
  virtual bool topk_feedback(const codec::Spec&, float* /*x*/, float* /*r*/, int64_t /*n*/, uint8_t* /*out*/,
                             bool& /*finite*/) {
    return false;
  }
  // random-k: moves the k values (and the non-finite flag, as NaN in slot 0) of a payload
  // into k+1 summable floats, and back (codec::randomk_to_values and its CUDA twin).
  virtual void randomk_to_values(const uint8_t* payload, size_t k, float* vals) = 0;
  virtual void randomk_from_values(const float* vals, size_t k, uint8_t* payload) = 0;
};

// The CPU implementation (kernels in codec/*_cpu.cc and collective/reduce.cc).
Compute& host_compute();
// The CPU kernels through the CUDA compute's branches (unfused steps, no finiteness reported):
// what tests run the schedules with to cover a GPU's code paths on the host.
Compute& device_branches_compute();

}  // namespace ringzip
