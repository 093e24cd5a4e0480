// RingzipBackend's CUDA path (see cuda_path.h): events, CudaWork, the per-device state, and
// run_cuda, through which every collective on CUDA tensors is issued (cuda_collectives.cc).
#include "backend/cuda_path.h"

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

// ---- RingzipBackend hooks ------------------------------------------------------------------------

void RingzipBackend::enable_cuda(const c10::intrusive_ptr<c10d::Store>& store) {
  if (cuda_) return;
  CudaPath::Hooks hooks;
  hooks.fail = [this](const std::string& why) { poison(why); };
  hooks.diagnose = [this](uint64_t seq) { return watch_ ? watch_->stalled(seq) : std::string(); };
  cuda_ = std::make_shared<CudaPath>(store, rank_, size_, cfg_.group_name, std::move(hooks));
}

void RingzipBackend::abort_cuda(const std::string& why) { cuda_->abort(why); }

void RingzipBackend::shutdown_cuda() { cuda_->stop(); }

c10::intrusive_ptr<c10d::Work> RingzipBackend::run_cuda(CudaCall call, const CudaBody& body) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_usable_locked(call.name);
  }
  const c10::Device dev = call.device;
  TORCH_CHECK(dev.is_cuda(), "ringzip: ", call.name, " on the CUDA path got a ", dev, " tensor");
  const std::string where = std::string(call.name) + " on group '" + cfg_.group_name + "'";
  c10::intrusive_ptr<CudaWork> work;
  std::shared_ptr<NcclComm> comm;
  bool diagnosable = false, poison_after = false;
  std::exception_ptr err;
  {
    std::unique_lock<std::timed_mutex> lock(cuda_->mutex());  // one issue order (NCCL matches by order)
    const uint64_t seq = call.p2p ? p2p_seq_.fetch_add(1) : seq_.fetch_add(call.nseq);
    const auto deadline = std::chrono::steady_clock::now() + call.timeout;
    try {
      if (!call.p2p) diagnosable = precheck(call.fp, seq, check_.load(), where, deadline, poison_after);
      poison_after = true;  // from here on a failure leaves the transport in an unknown state
      CudaDevice& d = cuda_->device(dev.index(), call.timeout, where);
      comm = d.comm;
      c10::cuda::CUDAGuard dg(dev);
      work = c10::make_intrusive<CudaWork>(rank_, size_, call.type, call.name, cfg_.group_name, call.outputs, seq,
                                           call.timeout, dev, call.blocking);
      work->begin(c10::cuda::getCurrentCUDAStream(dev.index()), d.stream);
      // The caching allocator must not hand these blocks to other streams before the work is done.
      for (const auto* list : {&call.inputs, &call.outputs})
        for (const auto& t : *list)
          if (t.defined() && t.is_cuda() && t.storage().data_ptr().get())
            c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), d.stream);
      cuda_->track(work, comm, diagnosable);  // its deadline runs from now on, even while issuing
      {
        c10::cuda::CUDAStreamGuard sg(d.stream);
        NcclTransport net(d.comm, d.stream.stream());
        auto compute = make_cuda_compute(d.stream);
        Comm c{net, *compute, static_cast<uint32_t>(seq), deadline, where};
        body(c, d);
        net.flush();
      }
      work->enqueued(d.stream);
    } catch (...) {
      err = std::current_exception();
    }
  }
  if (err) {
    // Raised on the caller's thread; a failure after the first NCCL call may have left peers
    // waiting for this rank, so the group is poisoned (their watchdogs fire at their deadlines).
    // A call the watchdog failed meanwhile (its abort unblocked an issue stuck in NCCL) raises
    // the watchdog's error.
    if (work && work->failed()) err = work->exception();
    if (poison_after) {
      std::string why;
      try {
        std::rethrow_exception(err);
      } catch (const c10::Error& e) {
        why = e.what_without_backtrace();
      } catch (const std::exception& e) {
        why = e.what();
      }
      poison(why);
      if (work) work->done(err);
    }
    std::rethrow_exception(err);
  }
  return work;
}

}  // namespace ringzip
