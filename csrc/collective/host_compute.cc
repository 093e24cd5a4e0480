#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "collective/compute.h"
#include "collective/reduce.h"

namespace ringzip {
namespace {

// Scratch blocks are recycled: a fresh multi-megabyte allocation is fresh pages from the
// kernel, and faulting them in on every call cost a large all-reduce tens of milliseconds.
class BlockPool {
 public:
  std::shared_ptr<uint8_t> get(size_t bytes) {
    bytes = std::max<size_t>(bytes, 64);
    std::unique_ptr<uint8_t[]> block;
    size_t size = bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)  // smallest block that fits
        if (it->size >= bytes && (best == free_.end() || it->size < best->size)) best = it;
      if (best != free_.end()) {
        block = std::move(best->data);
        size = best->size;
        pooled_ -= size;
        free_.erase(best);
      }
    }
    if (!block) block.reset(new uint8_t[bytes]);
    uint8_t* raw = block.release();
    return std::shared_ptr<uint8_t>(raw, [this, size](uint8_t* p) { put(p, size); });
  }

 private:
  static constexpr size_t kMaxPooledBytes = size_t(512) << 20;
  static constexpr size_t kMaxBlocks = 64;
  struct Block {
    std::unique_ptr<uint8_t[]> data;
    size_t size;
  };
  // A full pool makes room by dropping the blocks returned longest ago: refusing the newest
  // instead let blocks of sizes no longer in use crowd out the current ones, and a sweep of
  // sizes then faulted in a 64 MiB all-reduce's scratch on every call (0.72x gloo; 1.02x when
  // the pool kept it).
  void put(uint8_t* p, size_t size) {
    std::unique_ptr<uint8_t[]> owned(p);
    if (size > kMaxPooledBytes) return;  // freed here
    std::vector<Block> dropped;          // freed after the lock is released
    std::lock_guard<std::mutex> lock(mu_);
    while (!free_.empty() && (free_.size() >= kMaxBlocks || pooled_ + size > kMaxPooledBytes)) {
      pooled_ -= free_.front().size;
      dropped.push_back(std::move(free_.front()));
      free_.erase(free_.begin());
    }
    pooled_ += size;
    free_.push_back({std::move(owned), size});
  }
  std::mutex mu_;
  std::vector<Block> free_;
  size_t pooled_ = 0;
};

class HostCompute final : public Compute {
 public:
  std::shared_ptr<uint8_t> alloc(size_t bytes) override { return pool_.get(bytes); }
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
    if (!codec::all_finite(r, static_cast<int64_t>(n))) std::memset(r, 0, n * sizeof(float));
  }
  void encode(const codec::Spec& s, codec::InType t, const void* x, int64_t n, int64_t off, const codec::RngKey& k,
              uint8_t* out) override {
    codec::encode(s, t, x, n, off, k, out);
  }
  void decode(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off, const codec::RngKey& k,
              float* out) override {
    codec::decode(s, in, bytes, n, off, k, out);
  }
  bool encode_feedback(const codec::Spec& s, const float* x, float* r, int64_t n, int64_t off, const codec::RngKey& k,
                       uint8_t* out, bool& finite) override {
    finite = codec::encode_feedback(s, x, r, n, off, k, out);
    return true;
  }
  bool topk_feedback(const codec::Spec& s, float* x, float* r, int64_t n, uint8_t* out, bool& finite) override {
    finite = codec::topk_feedback(s, x, r, n, out);
    return true;
  }
  bool decode_residual(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                       const codec::RngKey& k, const float* x, float* r) override {
    return codec::residual(s, in, bytes, x, n, off, k, r);
  }
  bool reduce_encode(const codec::Spec& s, const uint8_t* const* in, size_t bytes, int m, const codec::RngKey* dk,
                     float* acc, int64_t n, int64_t off, const codec::RngKey& ek, uint8_t* out, float* r) override {
    const bool quant = s.kind == codec::Kind::Q8 || s.kind == codec::Kind::Q4 || s.kind == codec::Kind::Q2 ||
                       s.kind == codec::Kind::Q1;  // fused; the casts take the steps
    return quant ? codec::reduce_encode(s, in, bytes, m, acc, n, off, ek, out, r)
                 : Compute::reduce_encode(s, in, bytes, m, dk, acc, n, off, ek, out, r);
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
    codec::randomk_to_values(payload, k, vals);
  }
  void randomk_from_values(const float* vals, size_t k, uint8_t* payload) override {
    codec::randomk_from_values(vals, k, payload);
  }

 private:
  BlockPool pool_;
};

// The CPU kernels, through the branches the CUDA compute takes (collective/cuda_compute.cc): no
// fused reduce-then-encode (the owner's SRA step runs Compute's unfused default), and no step
// that reports a residual free of NaN/Inf (a device would need a host sync to know), so the
// algorithms run their finiteness scans (drop_nonfinite) as on a GPU. Same bits as HostCompute.
class DeviceBranchesCompute final : public Compute {
 public:
  explicit DeviceBranchesCompute(Compute& host) : h_(host) {}
  std::shared_ptr<uint8_t> alloc(size_t bytes) override { return h_.alloc(bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { h_.copy(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override { h_.zero(dst, bytes); }
  void reduce_into(DType t, RedOp op, void* acc, const void* in, size_t n) override {
    h_.reduce_into(t, op, acc, in, n);
  }
  void scale(DType t, void* data, size_t n, double f) override { h_.scale(t, data, n, f); }
  void residual(float* r, const float* x, size_t n) override { h_.residual(r, x, n); }
  void drop_nonfinite(float* r, size_t n) override { h_.drop_nonfinite(r, n); }
  void encode(const codec::Spec& s, codec::InType t, const void* x, int64_t n, int64_t off, const codec::RngKey& k,
              uint8_t* out) override {
    h_.encode(s, t, x, n, off, k, out);
  }
  void decode(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off, const codec::RngKey& k,
              float* out) override {
    h_.decode(s, in, bytes, n, off, k, out);
  }
  void decode_accumulate(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                         const codec::RngKey& k, float* acc) override {
    h_.decode_accumulate(s, in, bytes, n, off, k, acc);
  }
  void decode_add_encode(const codec::Spec& s, const uint8_t* in, size_t bytes, const float* local, int64_t n,
                         int64_t off, const codec::RngKey& dk, const codec::RngKey& ek, uint8_t* out) override {
    h_.decode_add_encode(s, in, bytes, local, n, off, dk, ek, out);
  }
  bool decode_residual(const codec::Spec& s, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                       const codec::RngKey& k, const float* x, float* r) override {
    h_.decode_residual(s, in, bytes, n, off, k, x, r);
    return false;
  }
  bool encode_feedback(const codec::Spec& s, const float* x, float* r, int64_t n, int64_t off, const codec::RngKey& k,
                       uint8_t* out, bool& finite) override {
    h_.encode_feedback(s, x, r, n, off, k, out, finite);
    finite = false;
    return true;
  }
  bool topk_feedback(const codec::Spec& s, float* x, float* r, int64_t n, uint8_t* out, bool& finite) override {
    h_.topk_feedback(s, x, r, n, out, finite);
    finite = false;
    return true;
  }
  void randomk_to_values(const uint8_t* payload, size_t k, float* vals) override {
    h_.randomk_to_values(payload, k, vals);
  }
  void randomk_from_values(const float* vals, size_t k, uint8_t* payload) override {
    h_.randomk_from_values(vals, k, payload);
  }

 private:
  Compute& h_;
};

}  // namespace

Compute& host_compute() {
  static auto* c = new HostCompute;  // never destroyed: a background measurement may use it at exit
  return *c;
}

Compute& device_branches_compute() {
  static DeviceBranchesCompute c(host_compute());
  return c;
}

}  // namespace ringzip
