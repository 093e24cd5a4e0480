#pragma once
// NCCL transport: sends and receives of bytes as ncclSend/ncclRecv on one CUDA stream.
//
// A request's wait() does not block the host: the stream orders everything after it. Posts
// inside group_start()/group_end() go to NCCL inside one ncclGroupStart/End; posts outside a
// group are held back and issued together, as one group, at the next wait() or group_start(),
// so algorithms that post all their transfers before waiting can't deadlock on NCCL's
// blocking-on-the-GPU point-to-point semantics. Tags are not sent: NCCL matches sends and
// receives between two ranks in posting order, which every algorithm keeps (docs/gpu.md).
// A request's wait() takes no timeout of its own: the backend's CUDA watchdog enforces the
// call's deadline on the device, and its ncclCommAbort unblocks a post stuck inside NCCL (the
// first transfer to a peer connects to it, on the host, inside ncclGroupEnd).
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/transport.h"

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

class NcclTransport final : public Transport {
 public:
  NcclTransport(std::shared_ptr<NcclComm> comm, cudaStream_t stream);
  ~NcclTransport() override;
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string name() const override { return "nccl"; }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) override;
  void group_start() override;
  void group_end() override;
  // Issues the held-back posts (one NCCL group).
  void flush();

 private:
  struct Op {
    bool send;
    void* data;
    size_t bytes;
    int peer;
  };
  void issue(const Op& op);
  std::unique_ptr<Request> post(Op op);

  std::shared_ptr<NcclComm> comm_;
  cudaStream_t stream_;
  int depth_ = 0;
  std::vector<Op> pending_;
  int unwinding_;  // std::uncaught_exceptions() at construction
};

}  // namespace ringzip
