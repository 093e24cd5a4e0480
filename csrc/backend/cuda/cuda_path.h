#pragma once
// The CUDA path of RingzipBackend (CUDA builds only): the device glue behind the one dispatch.
//
// Every collective on CUDA tensors is issued on the calling thread, on an internal stream per
// device that first waits for the caller's current stream, over the NCCL transport with the
// CUDA kernels (CudaDevicePath::issue, cuda_device_path.cc, registered for CUDA tensors; the
// collectives' bodies are the host's: backend/collectives.cc). Nothing waits for the device on
// the hot path: a Work completes by event.
//
// The same checks as the host path, ProcessGroupNCCL-style: a watchdog thread per group
// (cuda_watchdog.cc) polls the end events of the works in flight and the communicators'
// asynchronous errors; a work past its deadline, or an NCCL error, fails the works in flight
// with a DistBackendError, aborts the communicators (ncclCommAbort) and poisons the group; a
// work pending on the device for a while is diagnosed by the group's mismatch watch, which
// gives the same message as on the host path. Semantics: docs/gpu.md.
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/device_path.h"
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
  bool query() const;                                // throws on a CUDA error (a failed kernel)

 private:
  cudaEvent_t ev_ = nullptr;
};

// A collective issued on an internal stream.
//
// wait(): without a timeout, like ProcessGroupNCCL's: the caller's current stream waits for the
// end event and the host does not, except for a barrier (blocking), whose wait blocks the host
// until the barrier completed or failed. With a timeout, the host waits at most that long for
// completion and raises DistBackendError if the work is still pending (the call itself stays in
// flight under its own deadline, enforced by the watchdog). Either way, a work the watchdog
// failed (deadline, NCCL error, mismatch, poisoned group) raises its DistBackendError.
// isCompleted / isSuccess / exception() tell the truth: completed = end event reached or failed.
// The future completes when the work is issued (CUDA-aware, on the internal stream), as
// ProcessGroupNCCL's does; it does not carry the watchdog's errors.
class CudaWork final : public c10d::Work {
 public:
  CudaWork(int rank, int size, c10d::OpType type, std::string name, std::string group, std::vector<at::Tensor> outputs,
           uint64_t seq, std::chrono::milliseconds timeout, c10::Device device, bool blocking);
  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  uint64_t getSequencenumber() const override { return seq_; }
  std::chrono::milliseconds getTimeout() const { return timeout_; }  // virtual in torch >= 2.12 only

  // Waits for `caller` on `internal` and marks the start there.
  void begin(const c10::cuda::CUDAStream& caller, const c10::cuda::CUDAStream& internal);
  // Records the end event on `stream` and completes the future there.
  void enqueued(const c10::cuda::CUDAStream& stream);
  // Watchdog side: whether the device reached the start / end event (query errors propagate);
  // a work is watched from before its first NCCL call, so it is not ended before enqueued().
  bool started() const { return start_->query(); }
  bool ended() const { return issued_all_.load() && end_->query(); }
  // Holds the call's body, and so every tensor it captured (staged copies made on the caller's
  // stream), until the work is done: the caching allocator must not reuse them while the
  // internal stream may still read them. Set before the work is tracked.
  void keep(Body body) { keep_ = std::move(body); }
  // Marks the work done (ok) or failed and drops what it kept; the first call wins.
  void done(std::exception_ptr error = nullptr);
  bool failed() const;
  // "allreduce (seq 5, rank 1 of 2) on group '0'" for messages.
  std::string describe() const;
  c10::Device device() const { return device_; }
  std::chrono::steady_clock::time_point issued() const { return issued_; }

 private:
  int size_;
  std::string name_, group_;
  std::vector<at::Tensor> outputs_;
  uint64_t seq_;
  std::chrono::milliseconds timeout_;
  c10::Device device_;
  bool blocking_;
  std::chrono::steady_clock::time_point issued_;
  std::shared_ptr<Event> start_, end_;
  std::atomic<bool> issued_all_{false};  // enqueued() ran: the end event is recorded
  std::atomic<bool> finished_{false};
  Body keep_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

struct CudaDevice {
  c10::cuda::CUDAStream stream;
  std::shared_ptr<NcclComm> comm;
};

class CudaPath {
 public:
  struct Hooks {
    std::function<void(const std::string&)> fail;   // poisons the group (which calls abort())
    std::function<std::string(uint64_t)> diagnose;  // mismatch watch: verdict for a stalled call, or ""
  };
  static constexpr std::chrono::milliseconds kPoll{100};        // watchdog period
  static constexpr std::chrono::milliseconds kStall{250};       // first diagnosis of a started, pending call
  static constexpr std::chrono::milliseconds kAbortLock{2000};  // abort waits this long for an issuing thread

  CudaPath(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::string group, Hooks hooks);
  ~CudaPath();

  // Held while a call is issued (one NCCL issue order per group); abort() takes it too unless
  // an issuing thread is stuck inside NCCL for kAbortLock (ncclCommAbort then unblocks it).
  std::timed_mutex& mutex() { return mu_; }
  // The internal stream and communicator of a device; the communicator is created on first use,
  // collectively: every rank joins through the store within `timeout`, or this throws. mu_ held.
  CudaDevice& device(c10::DeviceIndex index, std::chrono::milliseconds timeout, const std::string& op);
  // Watches `work` until its end event: deadline `timeout` after it was issued, NCCL errors of
  // `comm`, and (diagnosable) the mismatch watch's diagnosis while it stalls. Called before the
  // work's first NCCL call: an issuing thread blocked inside NCCL (connecting to a peer that
  // never comes) is unblocked by the abort at the deadline.
  void track(c10::intrusive_ptr<CudaWork> work, std::shared_ptr<NcclComm> comm, bool diagnosable);
  // Fails every work in flight with `why` and aborts every communicator (poison). Idempotent.
  void abort(const std::string& why);
  // Joins the watchdog, then releases the communicators: destroyed when idle, aborted when a work
  // is still in flight (which then fails). Called by the backend's shutdown(); idempotent.
  void stop();

 private:
  struct Pending {
    c10::intrusive_ptr<CudaWork> work;
    std::shared_ptr<NcclComm> comm;
    std::chrono::steady_clock::time_point deadline;
    bool diagnosable;
    std::chrono::steady_clock::time_point seen_start{};  // when the start event was first seen reached
    std::chrono::milliseconds next_diag{kStall};
  };
  void watch();
  void abort_comms();

  c10::intrusive_ptr<c10d::Store> store_;
  const int rank_, size_;
  const std::string group_;
  Hooks hooks_;
  int next_comm_ = 0;
  std::timed_mutex mu_;
  std::map<c10::DeviceIndex, CudaDevice> devices_;

  std::mutex wmu_;  // guards what follows
  std::condition_variable wcv_;
  std::deque<Pending> pending_;
  std::vector<std::shared_ptr<NcclComm>> comms_;
  bool aborted_ = false, stopped_ = false;
  std::thread thread_;
};

}  // namespace ringzip
