#include "backend/work.h"

#include <ATen/core/ivalue.h>

#include "common/check.h"

namespace ringzip {

CollectiveWork::CollectiveWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
                               std::chrono::milliseconds timeout)
    : c10d::Work(rank, type),
      name_(std::move(name)),
      outputs_(std::move(outputs)),
      timeout_(timeout),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

// The future completes before wait() returns, so a caller that waited can read its value.
void CollectiveWork::complete() {
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

void CollectiveWork::fail(std::exception_ptr e) {
  future_->setError(e);
  finish(e);
}

bool CollectiveWork::wait(std::chrono::milliseconds timeout) {
  // Waiting, inside a callback of the group's running task, for a call queued behind that task
  // would wait forever: say so instead (README, "semantics").
  if (!started_.load() && blocked_ && blocked_()) {
    TORCH_CHECK_WITH(DistBackendError, false, "ringzip: wait() on ", name_,
                     " from a future callback of the same group: the call was queued by another thread and "
                     "runs only after this callback returns, so it would wait forever. Issue the collective "
                     "from the callback itself (it then runs at once) or wait for it outside the callback");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    TORCH_CHECK_WITH(DistBackendError, false, "ringzip: wait() on ", name_, " (seq ", seq_.load(), ") timed out after ",
                     timeout.count(), " ms");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

P2PWork::P2PWork(int rank, c10d::OpType type, std::unique_ptr<Request> req, std::vector<at::Tensor> keep,
                 std::function<void()> on_done, std::chrono::milliseconds timeout)
    : c10d::Work(rank, type),
      req_(std::move(req)),
      keep_(std::move(keep)),
      on_done_(std::move(on_done)),
      timeout_(timeout) {}

bool P2PWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (completed_) {
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  try {
    req_->wait(timeout == kNoTimeout ? timeout_ : timeout);
    if (opType_ != c10d::OpType::SEND) source_ = req_->source();
    if (on_done_) on_done_();
  } catch (const std::exception& e) {
    try {
      TORCH_CHECK_WITH(DistBackendError, false, "ringzip: point-to-point ", c10d::opTypeToString(opType_),
                       " failed: ", e.what());
    } catch (...) {
      exception_ = std::current_exception();
    }
  }
  completed_ = true;
  cv_.notify_all();
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

int P2PWork::sourceRank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return source_;
}

}  // namespace ringzip
