#pragma once
// The posting discipline of stream-ordered transports (NCCL), shared by NcclTransport and the
// loopback transport's grouped mode (the CPU tests' NCCL): posts inside group_start()/group_end() are issued as one
// group at the outermost group_end(); posts outside a group are held back and issued together,
// as one group, at the next wait() or group_start(), so a sequence of posts followed by waits
// can't deadlock on blocking point-to-point semantics. Tags are not used: the subclass matches
// the transfers between two ranks in posting order, which the schedule executor keeps
// (collective/schedule.h). eager_receives() is false: schedules run one group per step.
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/transport.h"

namespace ringzip {

class GroupedTransport : public Transport {
 public:
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) override;
  void group_start() override;
  void group_end() override;
  bool eager_receives() const override { return false; }
  // Issues the held-back posts (one group).
  void flush();
  // flush(), then complete(timeout): what a request's wait() does.
  void sync(std::chrono::milliseconds timeout);

 protected:
  struct Op {
    bool send;
    void* data;
    size_t bytes;
    int peer;
  };
  // Issues one group of posts, in posting order (called with the transport's lock held).
  virtual void issue(const std::vector<Op>& group) = 0;
  // Completion of everything issued, as far as the host waits for it (lock held); NCCL: none,
  // the stream orders what comes later.
  virtual void complete(std::chrono::milliseconds) {}

 private:
  std::unique_ptr<Request> post(Op op);
  void flush_locked();

  std::mutex mu_;
  int depth_ = 0;
  std::vector<Op> held_, group_;
};

}  // namespace ringzip
