#include <cmath>
#include <algorithm>
#include <cstring>

#include "collective/compute.h"
#include "collective/reduce.h"

namespace ringzip {
namespace {

class HostCompute final : public Compute {
 public:
  std::shared_ptr<uint8_t> alloc(size_t bytes) override {
    return std::shared_ptr<uint8_t>(new uint8_t[bytes ? bytes : 1], std::default_delete<uint8_t[]>());
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void reduce_into(DType t, RedOp op, void* acc, const void* in, size_t n) override {
    ringzip::reduce_into(t, op, acc, in, n);
  }
  void scale(DType t, void* data, size_t n, double f) override { scale_inplace(t, data, n, f); }
  void residual(float* r, const float* x, size_t n) override {
    for (size_t i = 0; i < n; ++i) r[i] = x[i] - r[i];
  }
  void drop_nonfinite(float* r, size_t n) override {
    uint32_t worst = 0;  // max over exponent fields; all ones means NaN/Inf
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, r + i, 4);
      worst = std::max(worst, u & 0x7f800000u);
    }
    if (worst == 0x7f800000u) std::memset(r, 0, n * sizeof(float));
  }
  void encode(const codec::Spec& s, codec::InType t, const void* x, int64_t n, int64_t off,
              const codec::RngKey& k, uint8_t* out) override {
    codec::encode(s, t, x, n, off, k, out);
  }
  void decode(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
              const codec::RngKey& k, float* out) override {
    codec::decode(s, in, bytes, n, off, k, out);
  }
  void decode_accumulate(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                         const codec::RngKey& k, float* acc) override {
    codec::decode_accumulate(s, in, bytes, n, off, k, acc);
  }
  void decode_add_encode(const codec::Spec& s, const uint8_t* in, size_t bytes, const float* local, int64_t n,
                         int64_t off, const codec::RngKey& dk, const codec::RngKey& ek, uint8_t* out) override {
    codec::decode_add_encode(s, in, bytes, local, n, off, dk, ek, out);
  }
  void randomk_to_values(const uint8_t* payload, size_t k, float* vals) override {
    uint32_t flags;
    std::memcpy(&flags, payload + 4, 4);
    vals[0] = flags ? std::nanf("") : 0.f;
    std::memcpy(vals + 1, payload + 8, k * sizeof(float));
  }
  void randomk_from_values(const float* vals, size_t k, uint8_t* payload) override {
    const uint32_t flags = std::isnan(vals[0]) ? 1u : 0u;
    std::memcpy(payload + 4, &flags, 4);
    std::memcpy(payload + 8, vals + 1, k * sizeof(float));
  }
};

}  // namespace

Compute& host_compute() {
  static HostCompute c;
  return c;
}

}  // namespace ringzip
