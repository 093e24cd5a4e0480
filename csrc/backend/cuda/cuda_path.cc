// RingzipBackend's CUDA path (see cuda_path.h): events, CudaWork and the per-device state.
#include "backend/cuda/cuda_path.h"

#include <ATen/core/ivalue.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <sstream>

#include "backend/backend.h"
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

CudaWork::CudaWork(int rank, int size, c10d::OpType type, std::string name, std::string group,
                   std::vector<at::Tensor> outputs, uint64_t seq, std::chrono::milliseconds timeout, c10::Device device,
                   bool blocking)
    : c10d::Work(rank, type),
      size_(size),
      name_(std::move(name)),
      group_(std::move(group)),
      outputs_(std::move(outputs)),
      seq_(seq),
      timeout_(timeout),
      device_(device),
      blocking_(blocking),
      issued_(std::chrono::steady_clock::now()),
      start_(std::make_shared<Event>()),
      end_(std::make_shared<Event>()),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::vector<c10::Device>{device})) {}

std::string CudaWork::describe() const {
  return name_ + " (seq " + std::to_string(seq_) + ", rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
         ") on group '" + group_ + "' on " + device_.str();
}

void CudaWork::begin(const c10::cuda::CUDAStream& caller, const c10::cuda::CUDAStream& internal) {
  Event ready;
  ready.record(caller);
  ready.block(internal);
  start_->record(internal);
}

void CudaWork::enqueued(const c10::cuda::CUDAStream& stream) {
  end_->record(stream);
  issued_all_.store(true);
  c10::cuda::CUDAStreamGuard g(stream);  // the future records its own event on this stream
  future_->markCompleted(c10::IValue(outputs_));
}

void CudaWork::done(std::exception_ptr error) {
  if (finished_.exchange(true)) return;
  finish(std::move(error));  // c10d::Work: completed_, exception_, wakes wait()ers
  keep_ = nullptr;
}

bool CudaWork::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_ != nullptr;
}

bool CudaWork::isCompleted() {
  if (failed()) return true;
  c10::cuda::CUDAGuard g(device_);
  return ended();
}

bool CudaWork::isSuccess() const {
  if (failed()) return false;
  c10::cuda::CUDAGuard g(device_);
  return ended();
}

bool CudaWork::wait(std::chrono::milliseconds timeout) {
  c10::cuda::CUDAGuard g(device_);
  if (timeout != kNoTimeout || blocking_) {
    // Host wait: until the end event, a failure (the watchdog fails a work at its deadline, so
    // a blocking wait without a timeout ends too), or `timeout`.
    const auto t0 = std::chrono::steady_clock::now();
    auto nap = std::chrono::microseconds(20);
    while (!failed() && !ended()) {
      if (timeout != kNoTimeout && std::chrono::steady_clock::now() - t0 >= timeout) {
        TORCH_CHECK_WITH(DistBackendError, false, "ringzip: wait(timeout=", timeout.count(), " ms) on ", describe(),
                         ": not completed yet; the call itself stays in flight under its own timeout of ",
                         timeout_.count(), " ms, which the CUDA watchdog enforces");
      }
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
  }
  // Like ProcessGroupNCCL: the caller's current stream waits; the host does not.
  end_->block(c10::cuda::getCurrentCUDAStream(device_.index()));
  return true;
}

void CudaWork::synchronize() { wait(); }

// ---- CudaPath ------------------------------------------------------------------------------------

CudaPath::CudaPath(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::string group, Hooks hooks)
    : rank_(rank), size_(size), group_(std::move(group)), hooks_(std::move(hooks)) {
  // Communicator keys of an earlier group on the same store (destroy_process_group, then init
  // again under the same name) must not be read as this one's (as in MismatchWatch).
  const int64_t joined = store->add("incarnations", 1);
  store_ = c10::make_intrusive<c10d::PrefixStore>(std::to_string((joined - 1) / size) + "/", std::move(store));
  thread_ = std::thread([this] { watch(); });
}

CudaPath::~CudaPath() { stop(); }

CudaDevice& CudaPath::device(c10::DeviceIndex index, std::chrono::milliseconds timeout, const std::string& op) {
  auto it = devices_.find(index);
  if (it != devices_.end()) return it->second;
  c10::cuda::CUDAGuard g(index);
  auto stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, index);
  // Every rank creates its communicators in the same order, so the n-th one shares a key. All
  // ranks first join through the store within the call's timeout: ncclCommInitRank itself
  // would wait forever for a rank that never makes a CUDA call.
  const std::string key = "comm/" + std::to_string(next_comm_++);
  store_->set(key + "/joined/" + std::to_string(rank_), std::vector<uint8_t>{1});
  std::vector<std::string> joined;
  for (int j = 0; j < size_; ++j) joined.push_back(key + "/joined/" + std::to_string(j));
  try {
    store_->wait(joined, timeout);
  } catch (const std::exception&) {
    std::ostringstream missing;
    try {
      for (int j = 0; j < size_; ++j)
        if (!store_->check({joined[j]})) missing << " " << j;
    } catch (...) {
      missing << " (unknown: the store failed)";
    }
    TORCH_CHECK_WITH(DistBackendError, false, "ringzip ", op, " (rank ", rank_, " of ", size_,
                     "): creating the NCCL communicator for cuda:", int(index), " timed out after ", timeout.count(),
                     " ms: rank(s)", missing.str(), " made no CUDA call on this group");
  }
  std::shared_ptr<NcclComm> comm;
  try {
    comm = std::make_shared<NcclComm>(store_, key, rank_, size_, index);
  } catch (const c10::Error& e) {
    TORCH_CHECK_WITH(DistBackendError, false, "ringzip: could not create the NCCL communicator on cuda:", int(index),
                     " (NCCL ", nccl_runtime_version(), "): ", e.what_without_backtrace(),
                     ". Several ranks on one GPU need NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1; "
                     "RINGZIP_TRANSPORT=gloo stages CUDA tensors through the host instead.");
  }
  {
    std::lock_guard<std::mutex> lock(wmu_);
    comms_.push_back(comm);
  }
  return devices_.emplace(index, CudaDevice{stream, std::move(comm)}).first->second;
}

}  // namespace ringzip
