#include "backend/backend.h"

#include <optional>

#include "backend/tensors.h"
#include "common/check.h"

namespace ringzip {

namespace {
// The backend whose task (collective and completion) runs on this thread, if any.
thread_local const RingzipBackend* tl_running = nullptr;
}  // namespace

RingzipBackend::RingzipBackend(std::unique_ptr<Transport> net, Config cfg)
    : c10d::Backend(net->rank(), net->size()),
      net_(std::move(net)),
      p2p_(net_.get()),
      cfg_(std::move(cfg)),
      planner_(size_) {
  worker_ = std::thread([this] { run_worker(); });
}

RingzipBackend::~RingzipBackend() { shutdown(); }

c10::intrusive_ptr<c10d::Backend::Options> RingzipBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("ringzip", cfg_.timeout);
}

void RingzipBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.get_id() == std::this_thread::get_id()) {
    worker_.detach();  // destroyed from a future callback on the worker itself
  } else if (worker_.joinable()) {
    worker_.join();
  }
#ifdef RINGZIP_WITH_CUDA
  if (cuda_) shutdown_cuda();  // its watchdog asks the mismatch watch: joined first
#endif
  watch_.reset();  // joins the mismatch watch thread
  net_->close();   // threads and sockets go now, even while Python still holds the group
}

// A task is a collective and its completion: the future's callbacks (DDP comm hooks) run
// before the next queued collective starts, and a collective they issue runs at once, inline
// (PowerSGD's hook chains two all-reduces per bucket through callbacks). Sequence numbers are
// taken when a task starts, so every rank runs the same calls in the same order under the same
// numbers however its threads interleave: a callback's collective comes right after the one
// that completed, as with NCCL, whose futures complete when the work is enqueued.
void RingzipBackend::run_task(const Task& task) {
  const RingzipBackend* outer = tl_running;
  tl_running = this;
  Finish finish = task();
  finish();
  tl_running = outer;
}

void RingzipBackend::run_worker() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !busy_ && (stop_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    run_task(task);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

std::chrono::milliseconds RingzipBackend::effective(std::chrono::milliseconds t) const {
  return t == c10d::kUnsetTimeout ? cfg_.timeout : t;
}

void RingzipBackend::check_usable_locked(const char* name) const {
  RZ_CHECK(!stop_, name, ": the process group was shut down or aborted");
  TORCH_CHECK_WITH(DistBackendError, broken_.empty(), "ringzip: ", name, " on group '", cfg_.group_name, "' (rank ",
                   rank_, "): the group is unusable after an earlier failure: ", broken_,
                   " -- destroy it and create a new process group");
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::submit(c10d::OpType type, const char* name,
                                                      std::vector<at::Tensor> outputs,
                                                      std::chrono::milliseconds timeout, bool async, Body body,
                                                      uint32_t nseq, const Fingerprint& fp) {
  const auto to = effective(timeout);
  auto work = c10::make_intrusive<CollectiveWork>(rank_, type, name, std::move(outputs), to);
  work->set_blocked_check([this] { return tl_running == this; });
  Task task = [this, work, body = std::move(body), nseq, to, name, fp, check = check_.load()]() -> Finish {
    const uint64_t seq = seq_.fetch_add(nseq);
    work->set_sequence_number(seq);
    Comm c{*net_, host_compute(), static_cast<uint32_t>(seq), std::chrono::steady_clock::now() + to,
           std::string(name) + " on group '" + cfg_.group_name + "'"};
    std::exception_ptr err = run_checked(c, body, fp, seq, check);
    if (err) return [work, err] { work->fail(err); };
    return [work] { work->complete(); };
  };
  const bool nested = tl_running == this;  // issued by a callback of this group's running task
  {
    std::unique_lock<std::mutex> lock(mu_);
    check_usable_locked(name);
    if (!nested && (async || busy_ || !queue_.empty())) {
      queue_.push_back(std::move(task));
      lock.unlock();
      cv_.notify_all();
      return work;
    }
    if (!nested) busy_ = true;
  }
  run_task(task);
  if (!nested) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
  return work;
}

namespace {

// The device a group was bound to (init_process_group(device_id=...)), where torch has it.
template <typename B>
std::optional<c10::Device> bound_device(const B& b) {
  if constexpr (requires { b.getBoundDeviceId(); }) {
    return b.getBoundDeviceId();
  } else {
    return std::nullopt;
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> RingzipBackend::barrier(const c10d::BarrierOptions& opts) {
#ifdef RINGZIP_WITH_CUDA
  // A barrier on a device runs on that device's internal stream, like ProcessGroupNCCL's:
  // dist.barrier(device_ids=[i]) passes the device; a group bound to a CUDA device gets its
  // barriers there (torch's dist.barrier() picks that device then). Otherwise dist.barrier()
  // on a group that serves CPU tensors stays on the host transport.
  if (cuda_) {
    std::optional<c10::Device> dev;
    if (!opts.device_ids.empty()) {
      dev = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(opts.device_ids.front()));
    } else if (auto b = bound_device(*this); b && b->is_cuda()) {
      dev = b;
    }
    if (dev) return cuda_barrier(*dev, opts);
  }
#endif
  return enqueue(c10d::OpType::BARRIER, "barrier", {}, opts, [](Comm& c) { ringzip::barrier(c); });
}

// Point-to-point bypasses the worker (like gloo): it must not queue behind collectives, and
// a posted receive must not block them.
static void check_p2p(const std::vector<at::Tensor>& ts, int peer, int self, int world, int tag, const char* op) {
  check_single(ts, op);
  check_rank(peer, world, op, "peer");
  RZ_CHECK_VALUE(peer != self, op, ": peer rank ", peer, " is this process's own rank");
  RZ_CHECK_VALUE(tag >= 0 && tag < (1 << 30), op, ": tag ", tag, " outside [0, 2^30)");
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_p2p(tensors, dst, rank_, size_, tag, "send");
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(tensors[0])) return cuda_p2p(tensors[0], dst, /*send=*/true);
#endif
  auto s = Staged::in(tensors[0]);
  auto req = p2p_->isend(s.work.data_ptr(), s.work.nbytes(), dst, static_cast<uint32_t>(tag));
  return c10::make_intrusive<P2PWork>(rank_, c10d::OpType::SEND, std::move(req), std::vector<at::Tensor>{s.work},
                                      nullptr, cfg_.timeout);
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_p2p(tensors, src, rank_, size_, tag, "recv");
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(tensors[0])) return cuda_p2p(tensors[0], src, /*send=*/false);
#endif
  auto s = Staged::out(tensors[0]);
  auto req = p2p_->irecv(s.work.data_ptr(), s.work.nbytes(), src, static_cast<uint32_t>(tag));
  return c10::make_intrusive<P2PWork>(
      rank_, c10d::OpType::RECV, std::move(req), std::vector<at::Tensor>{s.work}, [s] { s.finish(); }, cfg_.timeout);
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  check_single(tensors, "recv");
  RZ_CHECK_VALUE(tag >= 0 && tag < (1 << 30), "recv: tag ", tag, " outside [0, 2^30)");
  RZ_CHECK_VALUE(!use_cuda(tensors[0]),
                 "recv: a receive from any source is not supported for CUDA tensors on the "
                 "NCCL transport (NCCL needs the peer); pass src, or use Options(transport=\"gloo\")");
  auto s = Staged::out(tensors[0]);
  auto req = p2p_->irecv_any(s.work.data_ptr(), s.work.nbytes(), static_cast<uint32_t>(tag));
  return c10::make_intrusive<P2PWork>(
      rank_, c10d::OpType::RECVANYSOURCE, std::move(req), std::vector<at::Tensor>{s.work}, [s] { s.finish(); },
      cfg_.timeout);
}

}  // namespace ringzip
