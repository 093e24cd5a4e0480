#include "transport/nccl/nccl_transport.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <exception>

namespace ringzip {

void nccl_check(ncclResult_t r, const char* what) {
  TORCH_CHECK_WITH(DistBackendError, r == ncclSuccess || r == ncclInProgress, "ringzip (nccl): ", what,
                   " failed: ", ncclGetErrorString(r), " (", static_cast<int>(r),
                   "); last error: ", ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "-");
}

int nccl_runtime_version() {
  int v = 0;
  nccl_check(ncclGetVersion(&v), "ncclGetVersion");
  return v;
}

NcclComm::NcclComm(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key, int rank, int size, int device)
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

NcclTransport::NcclTransport(std::shared_ptr<NcclComm> comm, cudaStream_t stream)
    : comm_(std::move(comm)), stream_(stream), unwinding_(std::uncaught_exceptions()) {}

NcclTransport::~NcclTransport() {
  if (std::uncaught_exceptions() == unwinding_) {  // a failed call issues nothing more
    try {
      flush();
    } catch (...) {}
  }
}

// Completion is stream-ordered: a request's wait() only makes sure its group was issued.
// NCCL's group depth belongs to the thread: a failure inside the group must not leave the
// thread's later NCCL calls inside a group that never ends.
void NcclTransport::issue(const std::vector<Op>& group) {
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  try {
    for (const auto& op : group) {
      if (op.send)
        nccl_check(ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm_->get(), stream_), "ncclSend");
      else
        nccl_check(ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm_->get(), stream_), "ncclRecv");
    }
  } catch (...) {
    (void)ncclGroupEnd();
    throw;
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

// ---- NCCL's own collectives -------------------------------------------------------------------

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I8: return ncclInt8;
    case DType::U8:
    case DType::Bool: return ncclUint8;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(RedOp op) {
  switch (op) {
    case RedOp::Sum: return ncclSum;
    case RedOp::Prod: return ncclProd;
    case RedOp::Min: return ncclMin;
    case RedOp::Max: return ncclMax;
    default: break;
  }
  TORCH_CHECK(false, "ringzip (nccl): ", redop_name(op), " is not one of NCCL's reductions");
}

}  // namespace

void NcclTransport::allreduce(void* data, size_t count, DType t, RedOp op) {
  flush();
  if (!count) return;
  nccl_check(ncclAllReduce(data, data, count, nccl_type(t), nccl_op(op), comm_->get(), stream_), "ncclAllReduce");
}

void NcclTransport::reduce(void* data, size_t count, DType t, RedOp op, int root) {
  flush();
  if (!count) return;
  nccl_check(ncclReduce(data, data, count, nccl_type(t), nccl_op(op), root, comm_->get(), stream_), "ncclReduce");
}

void NcclTransport::reduce_scatter(const void* in, void* out, size_t count, DType t, RedOp op) {
  flush();
  if (!count) return;
  nccl_check(ncclReduceScatter(in, out, count, nccl_type(t), nccl_op(op), comm_->get(), stream_), "ncclReduceScatter");
}

void NcclTransport::allgather(const void* in, void* out, size_t bytes) {
  flush();
  if (!bytes) return;
  nccl_check(ncclAllGather(in, out, bytes, ncclUint8, comm_->get(), stream_), "ncclAllGather");
}

void NcclTransport::broadcast(void* data, size_t bytes, int root) {
  flush();
  if (!bytes) return;
  nccl_check(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_->get(), stream_), "ncclBroadcast");
}

}  // namespace ringzip
