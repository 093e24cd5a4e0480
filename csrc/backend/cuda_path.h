#pragma once
// The CUDA path of RingzipBackend: collectives on CUDA tensors run on the calling thread,
// enqueued on an internal stream per device (which first waits for the caller's current
// stream), over the NCCL transport with the CUDA kernels. No host synchronization: the Work's
// wait() makes the caller's stream wait for the end event; its future is CUDA-aware.
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <map>
#include <memory>
#include <mutex>

#include "transport/nccl/nccl_transport.h"

namespace ringzip {

// A CUDA event without timing (ATen's CUDAEvent pulls in cuSPARSE/cuBLAS headers that a
// CPU build machine's toolkit may lack).
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const c10::cuda::CUDAStream& s);
  void block(const c10::cuda::CUDAStream& s) const;  // s waits for the event (host does not)
  bool query() const;

 private:
  cudaEvent_t ev_ = nullptr;
};

class CudaWork final : public c10d::Work {
 public:
  CudaWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs, uint64_t seq,
           std::chrono::milliseconds timeout, c10::Device device);
  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  uint64_t getSequencenumber() const override { return seq_; }
  std::chrono::milliseconds getTimeout() const { return timeout_; }  // virtual in torch >= 2.12 only
  // Records the end event on `stream` and completes the future there.
  void enqueued(const c10::cuda::CUDAStream& stream);

 private:
  std::string name_;
  std::vector<at::Tensor> outputs_;
  uint64_t seq_;
  std::chrono::milliseconds timeout_;
  c10::Device device_;
  std::shared_ptr<Event> end_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class CudaPath {
 public:
  CudaPath(c10::intrusive_ptr<c10d::Store> store, int rank, int size) : store_(std::move(store)), rank_(rank), size_(size) {}
  struct Device {
    c10::cuda::CUDAStream stream;
    std::shared_ptr<NcclComm> comm;
  };
  // The internal stream and communicator of a device (created on first use, collectively).
  Device& device(c10::DeviceIndex index);
  std::mutex& mutex() { return mu_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, size_;
  int next_comm_ = 0;
  std::mutex mu_;
  std::map<c10::DeviceIndex, Device> devices_;
};

}  // namespace ringzip
