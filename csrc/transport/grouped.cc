#include "transport/grouped.h"

#include <c10/util/Exception.h>

namespace ringzip {
namespace {

class GroupedRequest final : public Request {
 public:
  explicit GroupedRequest(GroupedTransport* t) : t_(t) {}
  void wait(std::chrono::milliseconds timeout) override { t_->sync(timeout); }

 private:
  GroupedTransport* t_;
};

}  // namespace

std::unique_ptr<Request> GroupedTransport::post(Op op) {
  TORCH_CHECK_VALUE(op.peer >= 0 && op.peer < size() && op.peer != rank(), "ringzip (", name(), "): bad peer ",
                    op.peer);
  if (op.bytes == 0) return std::make_unique<DoneRequest>(op.peer);
  std::lock_guard<std::mutex> lock(mu_);
  (depth_ > 0 ? group_ : held_).push_back(op);
  return std::make_unique<GroupedRequest>(this);
}

std::unique_ptr<Request> GroupedTransport::isend(const void* data, size_t bytes, int peer, uint32_t) {
  return post(Op{true, const_cast<void*>(data), bytes, peer});
}

std::unique_ptr<Request> GroupedTransport::irecv(void* data, size_t bytes, int peer, uint32_t) {
  return post(Op{false, data, bytes, peer});
}

std::unique_ptr<Request> GroupedTransport::irecv_any(void*, size_t, uint32_t) {
  TORCH_CHECK(false, "ringzip (", name(), "): receive from any source is not supported on this transport");
}

void GroupedTransport::group_start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (depth_ == 0) flush_locked();
  ++depth_;
}

void GroupedTransport::group_end() {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(depth_ > 0, "ringzip (", name(), "): group_end without group_start");
  if (--depth_ > 0 || group_.empty()) return;
  std::vector<Op> ops;
  ops.swap(group_);
  issue(ops);
}

void GroupedTransport::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  flush_locked();
}

void GroupedTransport::sync(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  // Nothing of an open group is issued before its group_end: the wait would return before the
  // transfer ran (NCCL) or never (a stream-ordered fixture).
  TORCH_CHECK(depth_ == 0 || group_.empty(), "ringzip (", name(),
              "): a wait inside the group that posts the transfer (nothing is issued before group_end)");
  flush_locked();
  complete(timeout);
}

void GroupedTransport::flush_locked() {
  if (held_.empty() || depth_ > 0) return;
  std::vector<Op> ops;
  ops.swap(held_);
  issue(ops);
}

}  // namespace ringzip
