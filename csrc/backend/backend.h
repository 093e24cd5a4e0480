#pragma once
// ringzip's c10d::Backend. Argument checks run on the caller's thread (so bad input raises at
// the call and leaves the group usable); the collective itself runs on one worker thread per
// group, in call order, through the algorithms in collective/ over a Transport.
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "backend/device_path.h"
#include "backend/work.h"
#include "backend/compression.h"
#include "backend/tensors.h"
#include "plan/plan.h"
#include "backend/fingerprint.h"
#include "backend/mismatch_watch.h"
#include "collective/algorithms.h"
#include "collective/hierarchy/layout.h"

namespace ringzip {

struct Config {
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::string group_name;
};

class RingzipBackend final : public c10d::Backend {
 public:
  RingzipBackend(std::unique_ptr<Transport> net, Config cfg);
  ~RingzipBackend() override;

  const std::string getBackendName() const override { return "ringzip"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override { cfg_.timeout = timeout; }
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
  void setSequenceNumberForGroup() override {}
  // Breaks the transport (pending and later calls fail at once), then stops the worker.
  void abort() override;
  void shutdown() override;
  // dist.split_group / DeviceMesh on a device-bound group: a child backend over `ranks` (this
  // group's ranks, in the child's order), built as a new group would be, with this group's
  // settings; null where this rank is not among them. The builder is the Python creator's
  // (set_split_builder, python/ringzip/_registry.py).
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  // Builds a child: (store, rank, size, timeout, group name, parent) -> backend.
  using SplitBuilder = std::function<c10::intrusive_ptr<c10d::Backend>(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                                       std::chrono::milliseconds, const std::string&,
                                                                       const RingzipBackend&)>;
  static void set_split_builder(SplitBuilder build);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  const Config& config() const { return cfg_; }
  // Applies every setting or none: each is parsed and checked first (std::invalid_argument), so
  // a rejected change leaves the group as it was (set_options).
  void configure(const GroupOptions& o);
  // As the group is created, where its cost model needs nothing measured -- the link's rate was
  // given over a long link (plan/tuner.cc probe) --, its first agreement runs on the worker at
  // once, behind the job's own setup, not in the group's first call (a message delay there:
  // 50 ms of a 1 MiB call's 80 over a 100 ms round trip). Every rank of the group decides alike
  // (the options, and the longest round trip: Transport::round_trip), and so queues it as the
  // same call. A membership change calls it after seeding the figures (then it sends nothing).
  void agree_early();
  // The options applied last (ringzip.get_options reads them).
  GroupOptions group_options() const { return planner_.settings().options; }
  HierarchyMode hierarchy() const { return planner_.hierarchy(); }

  // ---- topology (backend/topology.cc) --------------------------------------------------------
  // The node of every rank (any labels; equal: one node). Where ranks share this rank's node,
  // `local` (shared memory) connects them, by their order in the group, and carries every
  // collective message between them; Gloo carries the rest and all user point-to-point. Called
  // once, by the creator, before the first collective.
  void set_topology(const std::vector<int>& node_of, std::unique_ptr<Transport> local);
  const NodeLayout& layout() const { return planner_.layout(); }
  // Why calls run flat although hierarchy is not "flat" (empty when they run node-aware).
  std::string flat_reason() const { return planner_.flat_reason(); }
  std::string transport_name() const { return net_->name(); }
  // Per group rank: how many connections carry this rank's messages to it (0 for this rank).
  std::vector<int> connections() const {
    std::vector<int> out(net_->size());
    for (int p = 0; p < net_->size(); ++p) out[p] = net_->connections(p);
    return out;
  }
  // How many of this rank's connections opened their windows when the group was created.
  int warmed_connections() const { return net_->warmed(); }
  CheckMode check_mode() const { return check_.load(); }
  // Empty while the group is healthy; else why it is unusable (first failure).
  std::string broken_reason() const;
  // Compression settings apply to collectives issued after configure() (set_options).
  CompressionConfig compression() const { return planner_.compression(); }
  Compression& compression_state() { return comp_; }
  // The cost model's measurements and choices (algorithm="auto", codec="auto").
  Tuner& tuner(Device d) { return planner_.tuner(d); }
  Planner& planner() { return planner_; }

  // ---- device paths (backend/device_path.h) ----------------------------------------------------
  // Once enabled, collectives on tensors of that device type run on its path (CUDA: an internal
  // stream over NCCL with the CUDA kernels instead of host staging over Gloo), under the same
  // checks as the host. `store` carries what the path agrees on (NCCL's unique ids). Throws when
  // this build has no path for the type.
  void enable_device(c10::DeviceType type, const c10::intrusive_ptr<c10d::Store>& store);
  bool device_enabled(c10::DeviceType type) const { return paths_.count(type) != 0; }
  // check="auto"/"on": stalled calls are diagnosed through `store` (backend/mismatch_watch.h).
  void enable_mismatch_watch(const c10::intrusive_ptr<c10d::Store>& store);

  // What a device path asks of the group when it issues a call on its own.
  // Raises (on the caller's thread) when the group was shut down or poisoned.
  void check_usable(const char* name) const;
  // The next `n` sequence numbers of the group's collectives.
  uint64_t take_seq(uint32_t n) { return seq_.fetch_add(n); }
  // The group's fingerprint check before a call that does not run through run_checked: check="on"
  // exchanges the fingerprints over the host transport now; check="auto" records the call for
  // the stall watch (returns true: the device's watchdog may ask stalled()). Throws on a
  // mismatch; `poison` says whether the group must be poisoned then.
  bool precheck(Fingerprint fp, uint64_t seq, CheckMode check, const std::string& op,
                std::chrono::steady_clock::time_point deadline, bool& poison);
  // The mismatch watch's verdict on a stalled call, or "".
  std::string stalled(uint64_t seq) const;
  // Marks the group unusable (first reason wins) and breaks the transport (and every device
  // path's: fails the works in flight, aborts the communicators).
  void poison(const std::string& why);

 private:
  // The path serving tensors on `device`, or null: the host (the group's worker over host memory).
  DevicePath* path_of(c10::Device device) const;
  DevicePath* path_of(const at::Tensor& t) const { return path_of(t.device()); }
  // Where a call's working tensors live on that path.
  static c10::Device working(const DevicePath* path, const at::Tensor& t) {
    return path ? t.device() : c10::Device(c10::kCPU);
  }
  // A checked call: its outputs (the Work's result), the tensors its body reads besides them,
  // its fingerprint (its tensors, reduce op and root) and `nseq` sequence numbers (coalesced ops
  // run one sub-collective per sequence number so their tags stay apart).
  template <typename O>
  Issue make_issue(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs, const O& opts,
                   std::vector<at::Tensor> inputs = {}, uint32_t nseq = 1, const FpExtra& extra = {}) const {
    Issue call{type, name, {}, std::move(inputs), effective(opts.timeout)};
    if constexpr (requires { opts.asyncOp; }) call.async = opts.asyncOp;  // torch >= 2.7
    call.fp = call_fingerprint(type, outputs, opts, nseq, extra);
    call.nseq = nseq;
    const at::Tensor* any = !outputs.empty() ? &outputs[0] : !call.inputs.empty() ? &call.inputs[0] : nullptr;
    if (any) call.device = any->device();
    call.outputs = std::move(outputs);
    return call;
  }
  // The one dispatch: the call's body on its device's path, or queued on the host's worker.
  c10::intrusive_ptr<c10d::Work> issue(DevicePath* path, Issue call, Body body);
  template <typename O>
  Fingerprint call_fingerprint(c10d::OpType type, const std::vector<at::Tensor>& outputs, const O& opts, uint32_t nseq,
                               const FpExtra& extra) const {
    Fingerprint fp = fingerprint(type, outputs, nseq, extra);
    if constexpr (requires { opts.reduceOp; }) fp.op = static_cast<uint8_t>(opts.reduceOp.op_);
    if constexpr (requires { opts.rootRank; }) fp.root = static_cast<int32_t>(opts.rootRank);
    return fp;
  }
  Fingerprint fingerprint(c10d::OpType type, const std::vector<at::Tensor>& outputs, uint32_t nseq,
                          const FpExtra& extra) const;
  // Runs the body under the group's mismatch check (tags keyed by the call's fingerprint,
  // the stall watch, and with check="on" the fingerprint exchange first); returns the failure,
  // if any. Unless the failure left the transport clean (a mismatch found before any payload),
  // the group is poisoned.
  std::exception_ptr run_checked(Comm& c, const Body& body, Fingerprint fp, uint64_t seq, CheckMode check);
  // Raises when the group was shut down or poisoned. Needs mu_ held.
  void check_usable_locked(const char* name) const;
  // fp.seq, and for compressed calls the RNG number they will take (it joins the fingerprint).
  void stamp(Fingerprint& fp, uint64_t seq) const;
  // Queues the call on the host's worker. A blocking call (async=false) that finds the worker
  // idle runs on the caller's thread: two thread hand-offs are most of a small message's latency
  // on a busy CPU.
  c10::intrusive_ptr<c10d::Work> submit(Issue call, Body body);
  using Finish = std::function<void()>;  // completes or fails the work: runs its future's callbacks
  using Task = std::function<Finish()>;
  void run_worker();
  void run_task(const Task& task);
  std::chrono::milliseconds effective(std::chrono::milliseconds t) const;

  // The planner's view of a call on t (numel elements of t's dtype) on `path`.
  Call planned_call(CallKind kind, const DevicePath* path, const at::Tensor& t, int64_t numel,
                    const c10d::ReduceOp& op = c10d::ReduceOp::SUM) const;
  // A compressed all-reduce (reduce_scatter false) or reduce-scatter of a planned call
  // (compressed_ops.cc): `flat` holds the input, `out` receives the result (all-reduce: flat's
  // shape; reduce-scatter: this rank's part); `owner` names the error-feedback residual;
  // `after` runs once the result is in place.
  c10::intrusive_ptr<c10d::Work> compressed_work(DevicePath* path, Issue issue, const at::Tensor& flat,
                                                 const at::Tensor& out, const at::Tensor& owner,
                                                 const c10d::ReduceOp& op, bool reduce_scatter, Call call, Plan plan,
                                                 std::function<void()> after = nullptr);
  // A compressed call (float32 working copy x) that codec="auto" keeps exact: pre-scale, add the
  // error-feedback residual owed (which becomes zero), the exact algorithm of the plan, finish().
  void exact_under_auto(Comm& c, const at::Tensor& x, const Compression::Call& which, const Reduction& red,
                        uint64_t in_bytes, const Plan& plan, bool reduce_scatter, const std::function<void()>& finish);
  // An exact all-reduce / reduce-scatter of a settled plan (scaled as red says) on working memory.
  void run_dense_allreduce(Comm& c, Buf b, const Reduction& red, const Plan& plan);
  static void run_reduce_scatter(Comm& c, Buf flat, const Reduction& red, const at::Tensor& out, const Plan& plan);

  std::map<c10::DeviceType, std::unique_ptr<DevicePath>> paths_;  // set before the first call

  std::unique_ptr<Transport> net_;
  Transport* p2p_ = nullptr;  // user point-to-point: the wide transport (Gloo), net_ or inside it
  Config cfg_;
  std::atomic<CheckMode> check_{CheckMode::Auto};
  std::mutex configure_mu_;
  Planner planner_;
  Compression comp_;
  std::atomic<uint64_t> seq_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  bool busy_ = false;   // a task runs, on the worker or inline
  std::string broken_;  // set once by poison(); guarded by mu_
  std::thread worker_;
  std::thread kernels_;  // the host kernels' speeds, measured once in the background (configure)
  std::unique_ptr<MismatchWatch> watch_;
};

}  // namespace ringzip
