#pragma once
// Work objects handed to torch: one completes on the backend's worker thread (collectives),
// the other wraps a transport request (point-to-point).
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <functional>

#include "transport/transport.h"

namespace ringzip {

class CollectiveWork final : public c10d::Work {
 public:
  CollectiveWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
                 std::chrono::milliseconds timeout);
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  uint64_t getSequencenumber() const override { return seq_.load(); }
  // Taken when the call starts.
  void set_sequence_number(uint64_t seq) {
    seq_.store(seq);
    started_.store(true);
  }
  // True when the calling thread runs a task of this work's group (a future callback on the
  // worker): a work queued behind that task cannot start before the callback returns.
  void set_blocked_check(std::function<bool()> blocked) { blocked_ = std::move(blocked); }
  std::chrono::milliseconds getTimeout() const { return timeout_; }  // virtual in torch >= 2.12 only
  void complete();
  void fail(std::exception_ptr e);
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::vector<at::Tensor> outputs_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> started_{false};
  std::function<bool()> blocked_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class P2PWork final : public c10d::Work {
 public:
  P2PWork(int rank, c10d::OpType type, std::unique_ptr<Request> req, std::vector<at::Tensor> keep,
          std::function<void()> on_done, std::chrono::milliseconds timeout);
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return keep_; }

 private:
  std::unique_ptr<Request> req_;
  std::vector<at::Tensor> keep_;  // owns the buffers the transport reads or writes
  std::function<void()> on_done_;
  std::chrono::milliseconds timeout_;
  int source_ = -1;
};

}  // namespace ringzip
