#include "transport/nccl/nccl_transport.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <cstring>

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

void NcclComm::check_async() const {
  ncclResult_t r = ncclSuccess;
  nccl_check(ncclCommGetAsyncError(comm_, &r), "ncclCommGetAsyncError");
  nccl_check(r, "an earlier NCCL operation");
}

void NcclComm::abort() {
  if (comm_) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

NcclTransport::NcclTransport(std::shared_ptr<NcclComm> comm, cudaStream_t stream)
    : comm_(std::move(comm)), stream_(stream) {}

NcclTransport::~NcclTransport() {
  try {
    flush();
  } catch (...) {
  }
}

// Completion is stream-ordered: a request's wait() only makes sure its group was issued.
void NcclTransport::issue(const std::vector<Op>& group) {
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (const auto& op : group) {
    if (op.send)
      nccl_check(ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm_->get(), stream_), "ncclSend");
    else
      nccl_check(ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm_->get(), stream_), "ncclRecv");
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

}  // namespace ringzip
