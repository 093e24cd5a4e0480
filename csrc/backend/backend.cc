#include "backend/backend.h"

#include <algorithm>
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

namespace {
RingzipBackend::SplitBuilder& split_builder() {
  static RingzipBackend::SplitBuilder b;
  return b;
}
}  // namespace

void RingzipBackend::set_split_builder(SplitBuilder build) { split_builder() = std::move(build); }

c10::intrusive_ptr<c10d::Backend> RingzipBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                        const std::vector<int>& ranks,
                                                        const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  for (int r : ranks) check_rank(r, size_, "split", "member");
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  RZ_CHECK(split_builder() != nullptr, "split: ringzip's Python package has not registered its builder");
  const auto timeout = opts ? opts->timeout : cfg_.timeout;
  const std::string name = opts && !opts->group_name.empty() ? opts->group_name : cfg_.group_name + "/split";
  return split_builder()(store, static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()), timeout, name,
                         *this);
}

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
  if (kernels_.joinable()) kernels_.join();
  for (auto& [type, path] : paths_) path->shutdown();  // a watchdog asks the mismatch watch: joined first
  watch_.reset();                                      // joins the mismatch watch thread
  net_->close();  // threads and sockets go now, even while Python still holds the group
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

void RingzipBackend::check_usable(const char* name) const {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable_locked(name);
}

void RingzipBackend::enable_device(c10::DeviceType type, const c10::intrusive_ptr<c10d::Store>& store) {
  if (paths_.count(type)) return;
  const DevicePathFactory* make = device_path_factory(type);
  RZ_CHECK(make != nullptr, "ringzip was built without a path for ", c10::DeviceTypeName(type),
           " tensors (a CPU-only build stages them through the host)");
  paths_.emplace(type, (*make)(*this, store));
}

DevicePath* RingzipBackend::path_of(c10::Device device) const {
  auto it = paths_.find(device.type());
  return it == paths_.end() ? nullptr : it->second.get();
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::issue(DevicePath* path, Issue call, Body body) {
  if (path) return path->issue(std::move(call), std::move(body));
  return submit(std::move(call), std::move(body));
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::submit(Issue call, Body body) {
  const auto to = call.timeout;
  const char* name = call.name;
  auto work = c10::make_intrusive<CollectiveWork>(rank_, call.type, name, std::move(call.outputs), to);
  work->set_blocked_check([this] { return tl_running == this; });
  Task task = [this, work, body = std::move(body), nseq = call.nseq, to, name, fp = call.fp,
               check = check_.load()]() -> Finish {
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
    if (!nested && (call.async || busy_ || !queue_.empty())) {
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

// A barrier on a device runs on that device's path, like ProcessGroupNCCL's:
// dist.barrier(device_ids=[i]) passes the device; a group bound to a device (init_process_group(
// device_id=...)) gets its barriers there. Otherwise it runs on the host.
c10::intrusive_ptr<c10d::Work> RingzipBackend::barrier(const c10d::BarrierOptions& opts) {
  std::optional<c10::Device> dev;
  if (!opts.device_ids.empty()) {
    dev = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(opts.device_ids.front()));
  } else if (auto b = bound_device(*this)) {
    dev = b;
  }
  DevicePath* path = dev ? path_of(*dev) : nullptr;
  Issue call = make_issue(c10d::OpType::BARRIER, "barrier", {}, opts);
  if (path) {
    call.device = *dev;
    call.blocking = true;  // wait() blocks the host, as dist.barrier() expects
  }
  return issue(path, std::move(call), [](Comm& c) { ringzip::barrier(c); });
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
  if (DevicePath* path = path_of(tensors[0])) return path->p2p(tensors[0], dst, /*send=*/true);
  auto s = Staged::in(tensors[0], c10::kCPU);
  auto req = p2p_->isend(s.work.data_ptr(), s.work.nbytes(), dst, static_cast<uint32_t>(tag));
  return c10::make_intrusive<P2PWork>(rank_, c10d::OpType::SEND, std::move(req), std::vector<at::Tensor>{s.work},
                                      nullptr, cfg_.timeout);
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_p2p(tensors, src, rank_, size_, tag, "recv");
  if (DevicePath* path = path_of(tensors[0])) return path->p2p(tensors[0], src, /*send=*/false);
  auto s = Staged::out(tensors[0], c10::kCPU);
  auto req = p2p_->irecv(s.work.data_ptr(), s.work.nbytes(), src, static_cast<uint32_t>(tag));
  return c10::make_intrusive<P2PWork>(
      rank_, c10d::OpType::RECV, std::move(req), std::vector<at::Tensor>{s.work}, [s] { s.finish(); }, cfg_.timeout);
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  check_single(tensors, "recv");
  RZ_CHECK_VALUE(tag >= 0 && tag < (1 << 30), "recv: tag ", tag, " outside [0, 2^30)");
  RZ_CHECK_VALUE(path_of(tensors[0]) == nullptr, "recv: a receive from any source is not supported for ",
                 tensors[0].device().type(),
                 " tensors on the device's transport (NCCL needs the peer); pass src, or use "
                 "Options(transport=\"gloo\")");
  // Gloo's transport matches a receive from any source by the bytes that arrive: an empty one
  // has none to match (its own check fails deep inside), and no sender could be reported.
  RZ_CHECK_VALUE(tensors[0].numel() > 0,
                 "recv: a receive from any source needs a non-empty tensor (an empty message carries "
                 "nothing to tell its sender by); pass src for an empty tensor");
  auto s = Staged::out(tensors[0], c10::kCPU);
  auto req = p2p_->irecv_any(s.work.data_ptr(), s.work.nbytes(), static_cast<uint32_t>(tag));
  return c10::make_intrusive<P2PWork>(
      rank_, c10d::OpType::RECVANYSOURCE, std::move(req), std::vector<at::Tensor>{s.work}, [s] { s.finish(); },
      cfg_.timeout);
}

}  // namespace ringzip
