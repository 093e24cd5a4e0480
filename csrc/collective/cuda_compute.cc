// CudaCompute: the Compute interface on a CUDA stream. Codec work goes to the CUDA codec
// kernels (codec/*_cuda.cu); element-wise reductions and scaling use ATen ops on the same
// stream (their semantics match reduce.cc: NaN wins min/max, bool sum is OR, halves via float).
#include "collective/cuda_compute.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <vector>

#include "codec/codec_cuda.h"

namespace ringzip {
namespace {

at::ScalarType scalar_of(DType t) {
  switch (t) {
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::I32: return at::kInt;
    case DType::I64: return at::kLong;
    case DType::Bool: return at::kBool;
  }
  return at::kByte;
}

void check(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "ringzip (cuda): ", what, ": ", cudaGetErrorString(e));
}

class CudaCompute final : public Compute {
 public:
  explicit CudaCompute(c10::cuda::CUDAStream s) : s_(s) {}

  std::shared_ptr<uint8_t> alloc(size_t bytes) override {
    c10::cuda::CUDAStreamGuard g(s_);
    auto h = std::make_shared<c10::DataPtr>(c10::cuda::CUDACachingAllocator::get()->allocate(bytes ? bytes : 1));
    return std::shared_ptr<uint8_t>(h, static_cast<uint8_t*>(h->get()));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s_.stream()), "copy");
  }
  void to_device(void* dst, const void* host, size_t bytes) override {
    if (bytes) check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s_.stream()), "copy to the device");
  }
  void to_host(void* host, const void* src, size_t bytes) override {
    if (bytes) check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, s_.stream()), "copy to the host");
    sync();
  }
  void sync() override { check(cudaStreamSynchronize(s_.stream()), "stream synchronize"); }
  void zero(void* dst, size_t bytes) override {
    if (bytes) check(cudaMemsetAsync(dst, 0, bytes, s_.stream()), "zero");
  }
  void reduce_into(DType t, RedOp op, void* acc, const void* in, size_t n) override {
    if (!n) return;
    c10::cuda::CUDAStreamGuard g(s_);
    at::Tensor a = view(acc, n, t), b = view(const_cast<void*>(in), n, t);
    const bool boolean = t == DType::Bool;
    switch (op) {
      case RedOp::Sum: boolean ? (void)a.logical_or_(b) : (void)a.add_(b); break;
      case RedOp::Prod: boolean ? (void)a.logical_and_(b) : (void)a.mul_(b); break;
      case RedOp::Min: boolean ? (void)a.logical_and_(b) : (void)at::minimum_out(a, a, b); break;
      case RedOp::Max: boolean ? (void)a.logical_or_(b) : (void)at::maximum_out(a, a, b); break;
      case RedOp::BAnd: a.bitwise_and_(b); break;
      case RedOp::BOr: a.bitwise_or_(b); break;
      case RedOp::BXor: a.bitwise_xor_(b); break;
    }
  }
  void scale(DType t, void* data, size_t n, double f) override {
    if (!n) return;
    c10::cuda::CUDAStreamGuard g(s_);
    view(data, n, t).mul_(f);
  }
  void residual(float* r, const float* x, size_t n) override {
    if (!n) return;
    c10::cuda::CUDAStreamGuard g(s_);
    at::Tensor rt = view(r, n, DType::F32);
    at::sub_out(rt, view(const_cast<float*>(x), n, DType::F32), rt);
  }
  void drop_nonfinite(float* r, size_t n) override {
    if (!n) return;
    c10::cuda::CUDAStreamGuard g(s_);
    at::Tensor rt = view(r, n, DType::F32);
    // Device-side decision (no host sync): keep r where every element is finite, else zeros.
    rt.copy_(at::where(at::isfinite(rt).all(), rt, at::zeros({}, rt.options())));
  }
  void encode(const codec::Spec& sp, codec::InType t, const void* x, int64_t n, int64_t off, const codec::RngKey& k,
              uint8_t* out) override {
    Scratch sc(*this);
    codec::cuda::encode(sc.ctx, sp, t, x, n, off, k, out);
  }
  void decode(const codec::Spec& sp, const uint8_t* in, size_t bytes, int64_t n, int64_t off, const codec::RngKey& k,
              float* out) override {
    Scratch sc(*this);
    codec::cuda::decode(sc.ctx, sp, in, bytes, n, off, k, out);
  }
  void decode_accumulate(const codec::Spec& sp, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                         const codec::RngKey& k, float* acc) override {
    Scratch sc(*this);
    codec::cuda::decode_accumulate(sc.ctx, sp, in, bytes, n, off, k, acc);
  }
  void decode_add_encode(const codec::Spec& sp, const uint8_t* in, size_t bytes, const float* local, int64_t n,
                         int64_t off, const codec::RngKey& dk, const codec::RngKey& ek, uint8_t* out) override {
    Scratch sc(*this);
    codec::cuda::decode_add_encode(sc.ctx, sp, in, bytes, local, n, off, dk, ek, out);
  }
  // The fused error-feedback steps (codec_cuda.h): same payloads and residuals as the CPU's.
  // None of them reports a finite residual (that would take a host sync): callers then run
  // drop_nonfinite, a device-side scan.
  bool decode_residual(const codec::Spec& sp, const uint8_t* in, size_t bytes, int64_t n, int64_t off,
                       const codec::RngKey& k, const float* x, float* r) override {
    Scratch sc(*this);
    codec::cuda::residual(sc.ctx, sp, in, bytes, x, n, off, k, r);
    return false;
  }
  bool encode_feedback(const codec::Spec& sp, const float* x, float* r, int64_t n, int64_t off, const codec::RngKey& k,
                       uint8_t* out, bool& finite) override {
    Scratch sc(*this);
    codec::cuda::encode_feedback(sc.ctx, sp, x, r, n, off, k, out);
    finite = false;
    return true;
  }
  bool topk_feedback(const codec::Spec& sp, float* x, float* r, int64_t n, uint8_t* out, bool& finite) override {
    Scratch sc(*this);
    codec::cuda::topk_feedback(sc.ctx, sp, x, r, n, out);
    finite = false;
    return true;
  }
  void randomk_to_values(const uint8_t* payload, size_t k, float* vals) override {
    codec::cuda::randomk_to_values(s_.stream(), payload, k, vals);
  }
  void randomk_from_values(const float* vals, size_t k, uint8_t* payload) override {
    codec::cuda::randomk_from_values(s_.stream(), vals, k, payload);
  }

 private:
  // Scratch for one codec call: freed when the call returns, which is safe because the
  // caching allocator hands the blocks out again only to work queued later on the same stream.
  struct Scratch {
    std::vector<std::shared_ptr<uint8_t>> keep;
    codec::cuda::Ctx ctx;
    explicit Scratch(CudaCompute& c) {
      ctx.stream = c.s_.stream();
      ctx.scratch = [this, &c](size_t b) -> void* {
        keep.push_back(c.alloc(b));
        return keep.back().get();
      };
    }
    Scratch(const Scratch&) = delete;
  };

  at::Tensor view(void* p, size_t n, DType t) const {
    return at::from_blob(p, {static_cast<int64_t>(n)},
                         at::TensorOptions().dtype(scalar_of(t)).device(at::kCUDA, s_.device_index()));
  }

  c10::cuda::CUDAStream s_;
};

}  // namespace

std::unique_ptr<Compute> make_cuda_compute(c10::cuda::CUDAStream stream) {
  return std::make_unique<CudaCompute>(stream);
}

}  // namespace ringzip
