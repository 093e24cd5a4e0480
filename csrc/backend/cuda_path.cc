// RingzipBackend's CUDA path (see cuda_path.h): allreduce (compressed or exact), broadcast and
// allgather_into_tensor on CUDA tensors; other collectives keep host staging over Gloo.
#include "backend/cuda_path.h"

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "backend/backend.h"
#include "backend/compressed_run.h"
#include "backend/tensors.h"
#include "collective/compressed.h"
#include "collective/cuda_compute.h"
#include "common/check.h"

namespace ringzip {

// ---- Event ---------------------------------------------------------------------------------------

static void cuda_check(cudaError_t e, const char* what) {
  TORCH_CHECK(e == cudaSuccess, "ringzip (cuda): ", what, ": ", cudaGetErrorString(e));
}
Event::Event() { cuda_check(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate"); }
Event::~Event() {
  if (ev_) cudaEventDestroy(ev_);
}
void Event::record(const c10::cuda::CUDAStream& s) { cuda_check(cudaEventRecord(ev_, s.stream()), "cudaEventRecord"); }
void Event::block(const c10::cuda::CUDAStream& s) const {
  cuda_check(cudaStreamWaitEvent(s.stream(), ev_, 0), "cudaStreamWaitEvent");
}
bool Event::query() const {
  cudaError_t e = cudaEventQuery(ev_);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  cuda_check(e, "cudaEventQuery");
  return true;
}

// ---- CudaWork ------------------------------------------------------------------------------------

CudaWork::CudaWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs, uint64_t seq,
                   std::chrono::milliseconds timeout, c10::Device device)
    : c10d::Work(rank, type),
      name_(std::move(name)),
      outputs_(std::move(outputs)),
      seq_(seq),
      timeout_(timeout),
      device_(device),
      end_(std::make_shared<Event>()),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{device})) {}

void CudaWork::enqueued(const c10::cuda::CUDAStream& stream) {
  end_->record(stream);
  c10::cuda::CUDAStreamGuard g(stream);  // the future records its own event on this stream
  future_->markCompleted(c10::IValue(outputs_));
}

bool CudaWork::isCompleted() { return end_->query(); }
bool CudaWork::isSuccess() const { return true; }

bool CudaWork::wait(std::chrono::milliseconds) {
  // Like ProcessGroupNCCL: the caller's current stream waits; the host does not.
  end_->block(c10::cuda::getCurrentCUDAStream(device_.index()));
  return true;
}

void CudaWork::synchronize() { wait(); }

// ---- CudaPath ------------------------------------------------------------------------------------

CudaPath::Device& CudaPath::device(c10::DeviceIndex index) {
  auto it = devices_.find(index);
  if (it != devices_.end()) return it->second;
  c10::cuda::CUDAGuard g(index);
  auto stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, index);
  // Every rank creates its communicators in the same order, so the n-th one shares a key.
  const std::string key = "comm/" + std::to_string(next_comm_++);
  std::shared_ptr<NcclComm> comm;
  try {
    comm = std::make_shared<NcclComm>(store_, key, rank_, size_, index);
  } catch (const std::exception& e) {
    TORCH_CHECK_WITH(DistBackendError, false, "ringzip: could not create the NCCL communicator on cuda:", int(index),
                     " (NCCL ", nccl_runtime_version(), "): ", e.what(),
                     ". Several ranks on one GPU need NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1; "
                     "RINGZIP_TRANSPORT=gloo stages CUDA tensors through the host instead.");
  }
  return devices_.emplace(index, Device{stream, std::move(comm)}).first->second;
}

// ---- RingzipBackend hooks ------------------------------------------------------------------------

void RingzipBackend::enable_cuda(const c10::intrusive_ptr<c10d::Store>& store) {
  if (!cuda_) cuda_ = std::make_shared<CudaPath>(store, rank_, size_);
}

namespace {

// Runs `body` on the internal stream of t's device: the stream waits for the caller's current
// stream, every tensor is recorded on it, and the Work completes by event.
template <typename F>
c10::intrusive_ptr<c10d::Work> run_on_stream(CudaPath& path, int rank, c10d::OpType type, const char* name,
                                             const std::vector<at::Tensor>& tensors, std::vector<at::Tensor> outputs,
                                             uint64_t seq, std::chrono::milliseconds timeout, F body) {
  const c10::Device dev = tensors.at(0).device();
  std::lock_guard<std::mutex> lock(path.mutex());  // NCCL calls must be issued in one order
  auto& d = path.device(dev.index());
  c10::cuda::CUDAGuard dg(dev);
  Event ready;
  ready.record(c10::cuda::getCurrentCUDAStream(dev.index()));
  ready.block(d.stream);
  for (const auto& t : tensors)
    if (t.defined() && t.storage().data_ptr().get())
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), d.stream);
  auto work = c10::make_intrusive<CudaWork>(rank, type, name, std::move(outputs), seq, timeout, dev);
  {
    c10::cuda::CUDAStreamGuard sg(d.stream);
    NcclTransport net(d.comm, d.stream.stream());
    auto compute = make_cuda_compute(d.stream);
    Comm c{net, *compute, static_cast<uint32_t>(seq), std::chrono::steady_clock::now() + timeout, name};
    body(c, d);
    net.flush();
  }
  work->enqueued(d.stream);
  return work;
}

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kBool: return ncclUint8;
    default: return ncclUint8;
  }
}

bool nccl_op(RedOp op, at::ScalarType t, ncclRedOp_t& out) {
  if (t == at::kBool) return false;
  switch (op) {
    case RedOp::Sum: out = ncclSum; return true;
    case RedOp::Prod: out = ncclProd; return true;
    case RedOp::Min: out = ncclMin; return true;
    case RedOp::Max: out = ncclMax; return true;
    default: return false;
  }
}


}  // namespace

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_allreduce(at::Tensor& t, const c10d::AllreduceOptions& opts) {
  const auto red = to_reduction(opts.reduceOp, to_dtype(t.scalar_type(), "allreduce"), size_, "allreduce");
  const CompressionConfig cc = compression();
  const auto timeout = effective(opts.timeout);
  const uint64_t seq = seq_.fetch_add(1);
  if (compressible(cc, t, opts.reduceOp)) {
    const Compression::Call which = comp_.begin_call(t, t.numel(), cc.feedback(), t.device());
    return run_on_stream(*cuda_, rank_, c10d::OpType::ALLREDUCE, "allreduce", {t}, {t}, seq, timeout,
                         [&](Comm& c, CudaPath::Device&) {
      at::Tensor x = (t.is_contiguous() && t.scalar_type() == at::kFloat) ? t : t.to(at::kFloat).contiguous();
      if (which.residual.defined())
        c10::cuda::CUDACachingAllocator::recordStream(which.residual.storage().data_ptr(),
                                                      c10::cuda::getCurrentCUDAStream());
      const int n = c.size();
      run_compressed(
          c, comp_, cc, x, which, red, t.nbytes(), 2.0 * (n - 1) / n,
          [&](const CompressedCall& call) { compressed_allreduce(c, x.data_ptr<float>(), x.numel(), call); },
          [&] {
            if (red.post != 1.0) x.mul_(red.post);
            if (!x.is_same(t)) t.copy_(x.view(t.sizes()));
          });
    });
  }
  const auto algo = algorithm_.load();
  return run_on_stream(*cuda_, rank_, c10d::OpType::ALLREDUCE, "allreduce", {t}, {t}, seq, timeout,
                       [&](Comm& c, CudaPath::Device& d) {
    at::Tensor w = t.is_contiguous() ? t : t.contiguous();
    if (red.pre != 1.0) w.mul_(red.pre);
    ncclRedOp_t op;
    if (algo == AllreduceAlgo::Auto && nccl_op(red.op, w.scalar_type(), op)) {
      nccl_check(ncclAllReduce(w.data_ptr(), w.data_ptr(), w.numel(), nccl_type(w.scalar_type()), op, d.comm->get(),
                               d.stream.stream()),
                 "ncclAllReduce");
    } else {
      ringzip::allreduce(c, buf_of(w), red.op, algo);
    }
    if (red.post != 1.0) w.mul_(red.post);
    if (!w.is_same(t)) t.copy_(w);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_broadcast(at::Tensor& t, const c10d::BroadcastOptions& opts) {
  const uint64_t seq = seq_.fetch_add(1);
  const int root = static_cast<int>(opts.rootRank);
  return run_on_stream(*cuda_, rank_, c10d::OpType::BROADCAST, "broadcast", {t}, {t}, seq, effective(opts.timeout),
                       [&](Comm&, CudaPath::Device& d) {
    at::Tensor w = t.is_contiguous() ? t : t.contiguous();
    nccl_check(ncclBroadcast(w.data_ptr(), w.data_ptr(), w.nbytes(), ncclUint8, root, d.comm->get(), d.stream.stream()),
               "ncclBroadcast");
    if (!w.is_same(t)) t.copy_(w);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_allgather_base(at::Tensor& out, at::Tensor& in,
                                                                   const c10d::AllgatherOptions& opts) {
  const uint64_t seq = seq_.fetch_add(1);
  return run_on_stream(*cuda_, rank_, c10d::OpType::_ALLGATHER_BASE, "allgather_into_tensor", {in, out}, {out}, seq,
                       effective(opts.timeout), [&](Comm&, CudaPath::Device& d) {
    at::Tensor i = in.contiguous();
    at::Tensor o = out.is_contiguous() ? out : at::empty_like(out, at::MemoryFormat::Contiguous);
    nccl_check(ncclAllGather(i.data_ptr(), o.data_ptr(), i.nbytes(), ncclUint8, d.comm->get(), d.stream.stream()),
               "ncclAllGather");
    if (!o.is_same(out)) out.copy_(o);
  });
}

}  // namespace ringzip
