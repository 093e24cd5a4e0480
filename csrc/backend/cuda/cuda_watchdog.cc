// The CUDA path's watchdog (ProcessGroupNCCL's design, see cuda_path.h): one thread per group
// polls, every kPoll, the end events of the works in flight and the communicators' asynchronous
// errors. A work past its deadline (its timeout, counted from when it was issued, as NCCL's
// watchdog counts it) or an NCCL error fails that work with a DistBackendError naming op,
// group, sequence number and rank, then poisons the group through the backend, which fails
// every other work in flight and aborts the communicators (abort()). The oldest diagnosable
// work that the device has started but not finished is handed to the mismatch watch at
// kStall, 2 kStall, 4 kStall ... after its start: a mismatch found there poisons the group with
// the same message on every rank.
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "backend/cuda/cuda_path.h"

namespace ringzip {
namespace {

std::exception_ptr dist_error(const std::string& msg) {
  try {
    TORCH_CHECK_WITH(DistBackendError, false, msg);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// An exception's message without torch's C++ backtrace.
std::string brief(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

}  // namespace

void CudaPath::track(c10::intrusive_ptr<CudaWork> work, std::shared_ptr<NcclComm> comm, bool diagnosable) {
  std::exception_ptr late;
  {
    std::lock_guard<std::mutex> lock(wmu_);
    if (aborted_ || stopped_) {
      late = dist_error("ringzip: " + work->describe() + ": the group failed or was shut down while it was issued");
    } else {
      pending_.push_back(Pending{work, std::move(comm), work->issued() + work->getTimeout(), diagnosable});
    }
  }
  if (late) work->done(late);
}

void CudaPath::watch() {
  std::unique_lock<std::mutex> lock(wmu_);
  while (!stopped_) {
    wcv_.wait_for(lock, kPoll);
    if (stopped_) break;
    const auto now = std::chrono::steady_clock::now();
    std::string failure;
    c10::intrusive_ptr<CudaWork> culprit;
    std::optional<uint64_t> diagnose;
    bool first_diagnosable = true;
    std::unordered_set<NcclComm*> seen;
    std::vector<std::shared_ptr<NcclComm>> to_check;
    for (auto it = pending_.begin(); it != pending_.end();) {
      CudaWork& w = *it->work;
      bool ended = false, started = false;
      try {
        c10::cuda::CUDAGuard g(w.device());
        ended = w.ended();
        started = ended || w.started();
      } catch (const std::exception& e) {  // a kernel failed: the CUDA context is broken
        failure = "ringzip: " + w.describe() + " failed on the device: " + brief(e);
        culprit = it->work;
        break;
      }
      if (ended) {
        w.done();
        it = pending_.erase(it);
        continue;
      }
      if (now >= it->deadline) {
        failure = "ringzip: " + w.describe() + " did not complete within its timeout of " +
                  std::to_string(w.getTimeout().count()) +
                  " ms (CUDA watchdog; counted from the call): a peer did not make the matching call, or failed. "
                  "The NCCL communicator was aborted and the group is unusable: destroy it and create a new "
                  "process group";
        culprit = it->work;
        break;
      }
      if (it->diagnosable && first_diagnosable) {
        first_diagnosable = false;  // only the oldest: later calls wait behind it on the stream
        if (started && it->seen_start == std::chrono::steady_clock::time_point{}) it->seen_start = now;
        if (it->seen_start != std::chrono::steady_clock::time_point{} && now - it->seen_start >= it->next_diag) {
          it->next_diag *= 2;
          diagnose = w.getSequencenumber();
        }
      }
      if (seen.insert(it->comm.get()).second) to_check.push_back(it->comm);
      ++it;
    }
    if (culprit) {
      pending_.erase(std::find_if(pending_.begin(), pending_.end(),
                                  [&](const Pending& p) { return p.work.get() == culprit.get(); }));
    }
    lock.unlock();
    // NCCL's asynchronous errors (a peer's connection failed, an internal error): every
    // communicator with work in flight.
    for (const auto& comm : to_check) {
      if (!failure.empty()) break;
      try {
        comm->check_async();
      } catch (const std::exception& e) {
        failure = std::string("ringzip: NCCL reported an error on group '") + group_ + "' (rank " +
                  std::to_string(rank_) + " of " + std::to_string(size_) + ", cuda:" + std::to_string(comm->device()) +
                  "): " + brief(e) + ". The communicator was aborted and the group is unusable";
      }
    }
    if (culprit) culprit->done(dist_error(failure));
    if (!failure.empty()) {
      hooks_.fail(failure);  // poisons the group, which calls abort(): the others fail too
    } else if (diagnose && hooks_.diagnose) {
      hooks_.diagnose(*diagnose);  // a mismatch found there poisons the group (on_verdict)
    }
    lock.lock();
  }
}

void CudaPath::abort(const std::string& why) {
  std::deque<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(wmu_);
    aborted_ = true;
    pending.swap(pending_);
  }
  for (auto& p : pending)
    p.work->done(dist_error("ringzip: " + p.work->describe() + ": not completed, the group failed: " + why));
  abort_comms();
}

void CudaPath::abort_comms() {
  std::vector<std::shared_ptr<NcclComm>> comms;
  {
    std::lock_guard<std::mutex> lock(wmu_);
    comms = comms_;
  }
  // Under the issue lock, so no thread issues on a communicator being freed; but a thread stuck
  // inside NCCL (a connection to a peer that never comes) holds it: ncclCommAbort from here is
  // what unblocks it (NCCL supports aborting from another thread).
  std::unique_lock<std::timed_mutex> issue(mu_, std::defer_lock);
  (void)issue.try_lock_for(kAbortLock);
  for (auto& c : comms) c->abort();
}

void CudaPath::stop() {
  {
    std::lock_guard<std::mutex> lock(wmu_);
    if (stopped_) return;
    stopped_ = true;
  }
  wcv_.notify_all();
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();  // shut down from the watchdog's own hook
    else
      thread_.join();
  }
  // Works still in flight at shutdown: finished ones complete; the others fail, and their
  // communicators are aborted (ncclCommDestroy would wait for them, maybe forever).
  std::deque<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(wmu_);
    pending.swap(pending_);
  }
  bool busy = false;
  for (auto& p : pending) {
    bool ended = false;
    try {
      c10::cuda::CUDAGuard g(p.work->device());
      ended = p.work->ended();
    } catch (...) {}
    if (ended) {
      p.work->done();
    } else {
      busy = true;
      p.work->done(dist_error("ringzip: " + p.work->describe() +
                              ": not completed, the process group was shut down (destroy_process_group or abort)"));
    }
  }
  if (busy) abort_comms();
  std::lock_guard<std::timed_mutex> issue(mu_);
  std::lock_guard<std::mutex> lock(wmu_);
  comms_.clear();
  devices_.clear();  // idle communicators: ncclCommDestroy
}

}  // namespace ringzip
