#pragma once
// NCCL transport: sends and receives of bytes as ncclSend/ncclRecv on one CUDA stream.
//
// A request's wait() does not block the host: the stream orders everything after it. Posts
// are grouped as transport/grouped.h describes: each group goes to NCCL inside one
// ncclGroupStart/End. Tags are not sent: NCCL matches sends and receives between two ranks in
// posting order, which the schedule executor keeps by posting each step's transfers as one
// group in tag order (collective/schedule.h, docs/gpu.md). A request's wait() takes no timeout
// of its own: the backend's CUDA watchdog enforces the call's deadline on the device, and its
// ncclCommAbort unblocks a post stuck inside NCCL (the first transfer to a peer connects to it,
// on the host, inside ncclGroupEnd).
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/grouped.h"
#include "transport/native.h"

namespace ringzip {

void nccl_check(ncclResult_t r, const char* what);

// The NCCL version of the loaded library, e.g. 23007 for 2.30.7.
int nccl_runtime_version();

// One communicator of a group on one device, created collectively (the unique id travels
// through the store under `key`). Thread-safe: a watchdog may check or abort it while another
// thread issues work on it.
class NcclComm {
 public:
  NcclComm(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key, int rank, int size, int device);
  ~NcclComm();  // ncclCommDestroy unless aborted
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  // The communicator; throws DistBackendError once aborted.
  ncclComm_t get() const;
  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  // Throws if NCCL reported an asynchronous error (a peer failed, a network error).
  void check_async() const;
  // ncclCommAbort: operations in flight on it end (without completing); later get() throws.
  // Idempotent.
  void abort();
  bool aborted() const;

 private:
  mutable std::mutex mu_;
  ncclComm_t comm_ = nullptr;
  int rank_, size_, device_;
};

// NCCL's collectives (NativeCollectives) first issue the posts held back, so they keep their
// place in the stream's order.
class NcclTransport final : public GroupedTransport, public NativeCollectives {
 public:
  NcclTransport(std::shared_ptr<NcclComm> comm, cudaStream_t stream);
  ~NcclTransport() override;
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string name() const override { return "nccl"; }
  NativeCollectives* native() override { return this; }

  void allreduce(void* data, size_t count, DType t, RedOp op) override;
  void reduce(void* data, size_t count, DType t, RedOp op, int root) override;
  void reduce_scatter(const void* in, void* out, size_t count, DType t, RedOp op) override;
  void allgather(const void* in, void* out, size_t bytes) override;
  void broadcast(void* data, size_t bytes, int root) override;

 private:
  void issue(const std::vector<Op>& group) override;

  std::shared_ptr<NcclComm> comm_;
  cudaStream_t stream_;
  int unwinding_;  // std::uncaught_exceptions() at construction
};

}  // namespace ringzip
