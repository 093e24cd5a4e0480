// ringzip._C.cuda: the CUDA codec kernels on CUDA tensors (current stream), top-k selection for
// benchmarks, the NCCL version, and switching a backend's CUDA path on.
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/utils/pybind.h>

#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "codec/codec_cuda.h"
#include "collective/cuda_compute.h"
#include "python/bindings.h"
#include "python/tensor_args.h"
#include "transport/nccl/nccl_transport.h"

namespace py = pybind11;
namespace cd = ringzip::codec;

namespace ringzip {
namespace {

constexpr const char* kModule = "ringzip.cuda";
[[noreturn]] void bad(const std::string& msg) { pyargs::bad(kModule, msg); }
void check_cuda_contig(const at::Tensor& t, const char* what) { pyargs::check_contiguous_on(kModule, t, what, true); }
cd::InType in_type(const at::Tensor& x) { return pyargs::in_type(kModule, x); }

// Codec context on the current stream of t's device; scratch lives until the call returns.
struct Call {
  c10::cuda::CUDAGuard guard;
  std::vector<c10::DataPtr> keep;
  cd::cuda::Ctx ctx;
  explicit Call(const at::Tensor& t) : guard(t.device()) {
    ctx.stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
    ctx.scratch = [this](size_t b) -> void* {
      keep.push_back(c10::cuda::CUDACachingAllocator::get()->allocate(b ? b : 1));
      return keep.back().get();
    };
  }
};

cd::RngKey key_of(uint64_t seed, uint32_t seq, uint32_t stream) { return cd::RngKey{seed, seq, stream}; }

at::Tensor encode(const std::string& spec, const at::Tensor& x, uint64_t seed, uint32_t seq, uint32_t stream,
                  int64_t off, int64_t bucket, bool stochastic) {
  cd::Spec sp = cd::parse(spec, bucket, stochastic);
  check_cuda_contig(x, "x");
  if (off < 0) bad("elem_offset must be >= 0");
  Call c(x);
  at::Tensor out = at::empty({(int64_t)cd::encoded_bytes(sp, x.numel())}, x.options().dtype(at::kByte));
  cd::cuda::encode(c.ctx, sp, in_type(x), x.data_ptr(), x.numel(), off, key_of(seed, seq, stream),
                   out.data_ptr<uint8_t>());
  return out;
}

at::Tensor decode(const std::string& spec, const at::Tensor& p, int64_t n, uint64_t seed, uint32_t seq, uint32_t stream,
                  int64_t off, int64_t bucket) {
  cd::Spec sp = cd::parse(spec, bucket, true);
  check_cuda_contig(p, "payload");
  if (n < 0 || off < 0) bad("n and elem_offset must be >= 0");
  Call c(p);
  at::Tensor out = at::empty({n}, p.options().dtype(at::kFloat));
  cd::cuda::decode(c.ctx, sp, p.data_ptr<uint8_t>(), p.numel(), n, off, key_of(seed, seq, stream),
                   out.data_ptr<float>());
  return out;
}

void decode_accumulate(const std::string& spec, const at::Tensor& p, at::Tensor& acc, uint64_t seed, uint32_t seq,
                       uint32_t stream, int64_t off, int64_t bucket) {
  cd::Spec sp = cd::parse(spec, bucket, true);
  check_cuda_contig(p, "payload");
  check_cuda_contig(acc, "acc");
  if (acc.scalar_type() != at::kFloat) bad("acc must be float32");
  Call c(p);
  cd::cuda::decode_accumulate(c.ctx, sp, p.data_ptr<uint8_t>(), p.numel(), acc.numel(), off, key_of(seed, seq, stream),
                              acc.data_ptr<float>());
}

at::Tensor decode_add_encode(const std::string& spec, const at::Tensor& p, const at::Tensor& local, uint64_t seed,
                             uint32_t seq, uint32_t dec_stream, uint32_t enc_stream, int64_t off, int64_t bucket,
                             bool stochastic) {
  cd::Spec sp = cd::parse(spec, bucket, stochastic);
  check_cuda_contig(p, "payload");
  check_cuda_contig(local, "local");
  if (local.scalar_type() != at::kFloat) bad("local must be float32");
  Call c(p);
  at::Tensor out = at::empty({(int64_t)cd::encoded_bytes(sp, local.numel())}, p.options().dtype(at::kByte));
  cd::cuda::decode_add_encode(c.ctx, sp, p.data_ptr<uint8_t>(), p.numel(), local.data_ptr<float>(), local.numel(), off,
                              key_of(seed, seq, dec_stream), key_of(seed, seq, enc_stream), out.data_ptr<uint8_t>());
  return out;
}

// The fused error-feedback ops as the CUDA path runs them: through its Compute
// (collective/cuda_compute.cc) on the current stream. r is updated in place; the flags say
// whether r is known to be finite (never, on the device: see codec_cuda.h).
void check_f32_cuda(const at::Tensor& t, const char* what) { pyargs::check_f32_on(kModule, t, what, true); }

std::unique_ptr<Compute> compute_on(const at::Tensor& t) {
  return make_cuda_compute(c10::cuda::getCurrentCUDAStream(t.device().index()));
}

std::tuple<at::Tensor, bool> encode_feedback(const std::string& spec, const at::Tensor& x, at::Tensor& r, uint64_t seed,
                                             uint32_t seq, uint32_t stream, int64_t off, int64_t bucket,
                                             bool stochastic) {
  cd::Spec sp = cd::parse(spec, bucket, stochastic);
  pyargs::check_feedback_args(kModule, x, r, true);
  if (off < 0) bad("elem_offset must be >= 0");
  c10::cuda::CUDAGuard g(x.device());
  at::Tensor out = at::empty({(int64_t)cd::encoded_bytes(sp, x.numel())}, x.options().dtype(at::kByte));
  bool finite = false;
  if (!compute_on(x)->encode_feedback(sp, x.data_ptr<float>(), r.data_ptr<float>(), x.numel(), off,
                                      key_of(seed, seq, stream), out.data_ptr<uint8_t>(), finite))
    bad("encode_feedback is not fused for " + spec);
  return {out, finite};
}

std::tuple<at::Tensor, bool> residual(const std::string& spec, const at::Tensor& p, const at::Tensor& x, uint64_t seed,
                                      uint32_t seq, uint32_t stream, int64_t off, int64_t bucket) {
  cd::Spec sp = cd::parse(spec, bucket, true);
  check_cuda_contig(p, "payload");
  check_f32_cuda(x, "x");
  if (off < 0) bad("elem_offset must be >= 0");
  c10::cuda::CUDAGuard g(x.device());
  at::Tensor r = at::empty_like(x);
  const bool finite =
      compute_on(x)->decode_residual(sp, p.data_ptr<uint8_t>(), p.numel(), x.numel(), off, key_of(seed, seq, stream),
                                     x.data_ptr<float>(), r.data_ptr<float>());
  return {r, finite};
}

at::Tensor topk_feedback(const std::string& spec, at::Tensor& x, at::Tensor& r) {
  const cd::Spec sp = pyargs::topk_spec(kModule, spec);
  pyargs::check_feedback_args(kModule, x, r, true);
  c10::cuda::CUDAGuard g(x.device());
  at::Tensor out = at::empty({(int64_t)cd::encoded_bytes(sp, x.numel())}, x.options().dtype(at::kByte));
  bool finite = false;
  if (!compute_on(x)->topk_feedback(sp, x.data_ptr<float>(), r.data_ptr<float>(), x.numel(), out.data_ptr<uint8_t>(),
                                    finite))
    bad("topk_feedback is not fused on CUDA");
  return out;
}

at::Tensor topk_indices(const at::Tensor& x, int64_t k) {
  check_cuda_contig(x, "x");
  if (x.scalar_type() != at::kFloat) bad("x must be float32");
  if (k < 0 || k > x.numel()) bad("k out of range");
  Call c(x);
  at::Tensor idx = at::empty({k}, x.options().dtype(at::kInt));
  cd::cuda::topk_indices(c.ctx, x.data_ptr<float>(), x.numel(), k, idx.data_ptr<int32_t>());
  return idx;
}

}  // namespace

void bind_cuda(py::module_& m) {
  py::module_ c = m.def_submodule("cuda", "ringzip CUDA kernels and the NCCL transport");
  using namespace py::literals;
  c.def("encode", &encode, "spec"_a, "x"_a, "seed"_a, "seq"_a, "stream"_a, "elem_offset"_a = 0,
        "bucket"_a = cd::kBucketSize, "stochastic"_a = true);
  c.def("decode", &decode, "spec"_a, "payload"_a, "n"_a, "seed"_a, "seq"_a, "stream"_a, "elem_offset"_a = 0,
        "bucket"_a = cd::kBucketSize);
  c.def("decode_accumulate", &decode_accumulate, "spec"_a, "payload"_a, "acc"_a, "seed"_a, "seq"_a, "stream"_a,
        "elem_offset"_a = 0, "bucket"_a = cd::kBucketSize);
  c.def("decode_add_encode", &decode_add_encode, "spec"_a, "payload"_a, "local"_a, "seed"_a, "seq"_a, "dec_stream"_a,
        "enc_stream"_a, "elem_offset"_a = 0, "bucket"_a = cd::kBucketSize, "stochastic"_a = true);
  c.def("encode_feedback", &encode_feedback, "spec"_a, "x"_a, "r"_a, "seed"_a, "seq"_a, "stream"_a, "elem_offset"_a = 0,
        "bucket"_a = cd::kBucketSize, "stochastic"_a = true);
  c.def("residual", &residual, "spec"_a, "payload"_a, "x"_a, "seed"_a, "seq"_a, "stream"_a, "elem_offset"_a = 0,
        "bucket"_a = cd::kBucketSize);
  c.def("topk_feedback", &topk_feedback, "spec"_a, "x"_a, "r"_a);
  c.def("topk_indices", &topk_indices, "x"_a, "k"_a);
  c.def("nccl_version", [] { return nccl_runtime_version(); });
  c.def(
      "enable",
      [](RingzipBackend& b, const c10::intrusive_ptr<c10d::Store>& store) { b.enable_device(c10::kCUDA, store); },
      "backend"_a, "store"_a);
  c.def("enabled", [](const RingzipBackend& b) { return b.device_enabled(c10::kCUDA); }, "backend"_a);
}

}  // namespace ringzip
