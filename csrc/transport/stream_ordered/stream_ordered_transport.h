#pragma once
// A test fixture: NCCL's point-to-point semantics on top of a host transport, so that the
// grouped execution of every schedule (collective/schedule.h) runs in CPU tests.
//
// It posts as NcclTransport does (transport/grouped.h: groups, held-back posts, no lookahead),
// ignores tags and matches the transfers between two ranks in posting order (each direction of
// each pair gets its own running count as the inner transport's tag), and completes a group as
// a whole before the next one starts -- one stream. A schedule that posted a receive before its
// send's group existed, or in another order than its peer, hangs or fails here as on NCCL.
#include <chrono>
#include <memory>
#include <vector>

#include "transport/grouped.h"

namespace ringzip {

class StreamOrderedTransport final : public GroupedTransport {
 public:
  StreamOrderedTransport(std::unique_ptr<Transport> inner, std::chrono::milliseconds timeout);
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name() + "+stream-ordered"; }
  void abort() override { inner_->abort(); }
  void close() override { inner_->close(); }

 private:
  void issue(const std::vector<Op>& group) override;
  void complete(std::chrono::milliseconds timeout) override;

  std::unique_ptr<Transport> inner_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Request>> running_;  // the group on the "stream"
  std::vector<uint32_t> sent_, received_;          // per peer: the running counts used as tags
};

}  // namespace ringzip
