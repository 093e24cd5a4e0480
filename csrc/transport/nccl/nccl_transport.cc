#include "transport/nccl/nccl_transport.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <exception>

namespace ringzip {

void nccl_check(ncclResult_t r, const char* what) {
  TORCH_CHECK_WITH(DistBackendError, r == ncclSuccess || r == ncclInProgress, "ringzip (nccl): ", what,
                   " failed: ", ncclGetErrorString(r), " (", static_cast<int>(r), "); last error: ",
                   ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "-");
}

int nccl_runtime_version() {
  int v = 0;
  nccl_check(ncclGetVersion(&v), "ncclGetVersion");
  return v;
}

NcclComm::NcclComm(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key, int rank, int size,
                   int device)
    : rank_(rank), size_(size), device_(device) {
  ncclUniqueId id;
  if (rank == 0) {
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<uint8_t> v(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof(id));
    store->set(key, v);
  } else {
    auto v = store->get(key);
    TORCH_CHECK_WITH(DistBackendError, v.size() == sizeof(id), "ringzip (nccl): bad unique id under '", key, "'");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  nccl_check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
}

NcclComm::~NcclComm() {
  if (comm_) {
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device_));
    ncclCommDestroy(comm_);  // errors at teardown are not actionable
  }
}

ncclComm_t NcclComm::get() const {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK_WITH(DistBackendError, comm_ != nullptr, "ringzip (nccl): the communicator on cuda:", device_,
                   " was aborted after an earlier failure");
  return comm_;
}

void NcclComm::check_async() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!comm_) return;  // aborted: its failure was reported then
  ncclResult_t r = ncclSuccess;
  nccl_check(ncclCommGetAsyncError(comm_, &r), "ncclCommGetAsyncError");
  nccl_check(r, "an earlier NCCL operation (asynchronous error)");
}

void NcclComm::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_) {
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device_));
    ncclCommAbort(comm_);  // its result is not actionable: the communicator is gone either way
    comm_ = nullptr;
  }
}

bool NcclComm::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return comm_ == nullptr;
}

namespace {

// Completion is stream-ordered: waiting means "make sure it was issued".
class NcclRequest final : public Request {
 public:
  explicit NcclRequest(NcclTransport* t) : t_(t) {}
  void wait(std::chrono::milliseconds) override { t_->flush(); }

 private:
  NcclTransport* t_;
};

}  // namespace

NcclTransport::NcclTransport(std::shared_ptr<NcclComm> comm, cudaStream_t stream)
    : comm_(std::move(comm)), stream_(stream), unwinding_(std::uncaught_exceptions()) {}

NcclTransport::~NcclTransport() {
  if (std::uncaught_exceptions() == unwinding_) {  // a failed call issues nothing more
    try {
      flush();
    } catch (...) {
    }
  }
  // NCCL's group depth belongs to the thread: a failure inside group_start()/group_end() must
  // not leave the thread's later NCCL calls (a new group's) inside a group that never ends.
  while (depth_ > 0) {
    --depth_;
    (void)ncclGroupEnd();
  }
}

void NcclTransport::issue(const Op& op) {
  if (op.send)
    nccl_check(ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm_->get(), stream_), "ncclSend");
  else
    nccl_check(ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm_->get(), stream_), "ncclRecv");
}

std::unique_ptr<Request> NcclTransport::post(Op op) {
  TORCH_CHECK_VALUE(op.peer >= 0 && op.peer < size() && op.peer != rank(), "ringzip (nccl): bad peer ", op.peer);
  if (op.bytes == 0) return std::make_unique<DoneRequest>(op.peer);
  if (depth_ > 0)
    issue(op);
  else
    pending_.push_back(op);
  return std::make_unique<NcclRequest>(this);
}

std::unique_ptr<Request> NcclTransport::isend(const void* data, size_t bytes, int peer, uint32_t) {
  return post(Op{true, const_cast<void*>(data), bytes, peer});
}

std::unique_ptr<Request> NcclTransport::irecv(void* data, size_t bytes, int peer, uint32_t) {
  return post(Op{false, data, bytes, peer});
}

std::unique_ptr<Request> NcclTransport::irecv_any(void*, size_t, uint32_t) {
  TORCH_CHECK(false, "ringzip (nccl): receive from any source is not supported on the NCCL transport");
}

void NcclTransport::group_start() {
  if (depth_ == 0) flush();
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  ++depth_;
}

void NcclTransport::group_end() {
  TORCH_CHECK(depth_ > 0, "ringzip (nccl): group_end without group_start");
  --depth_;
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclTransport::flush() {
  if (pending_.empty() || depth_ > 0) return;
  std::vector<Op> ops;
  ops.swap(pending_);
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  try {
    for (const auto& op : ops) issue(op);
  } catch (...) {
    (void)ncclGroupEnd();  // the thread's group depth, as in the destructor
    throw;
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

}  // namespace ringzip
