#pragma once
// ringzip's c10d::Backend. Argument checks run on the caller's thread (so bad input raises at
// the call and leaves the group usable); the collective itself runs on one worker thread per
// group, in call order, through the algorithms in collective/ over a Transport.
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "backend/work.h"
#include "backend/compression.h"
#include "backend/tensors.h"
#include "plan/plan.h"
#include "backend/fingerprint.h"
#include "backend/mismatch_watch.h"
#include "collective/algorithms.h"
#include "collective/hierarchy/layout.h"

namespace ringzip {

class CudaPath;     // backend/cuda_path.h (CUDA builds only)
struct CudaDevice;  // the internal stream and NCCL communicator of one device (cuda_path.h)

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
  // Applies every setting or none: the codec is parsed and each value checked first, so a
  // rejected change leaves the group as it was (set_options).
  void configure(AllreduceAlgo algorithm, CheckMode check, CompressionConfig cc,
                 HierarchyMode hierarchy = HierarchyMode::Auto);
  AllreduceAlgo algorithm() const { return planner_.algorithm(); }
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
  CheckMode check_mode() const { return check_.load(); }
  // Empty while the group is healthy; else why it is unusable (first failure).
  std::string broken_reason() const;
  // Compression settings apply to collectives issued after configure() (set_options).
  CompressionConfig compression() const { return planner_.compression(); }
  Compression& compression_state() { return comp_; }
  // The cost model's measurements and choices (algorithm="auto", codec="auto").
  Tuner& tuner() { return planner_.tuner(); }

  // ---- CUDA path (backend/cuda_path.cc, cuda_collectives.cc; CUDA builds only) ----------------
  // Once enabled, every collective on CUDA tensors runs on an internal stream over NCCL with the
  // CUDA kernels instead of host staging over Gloo, under the same checks as the host path
  // (fingerprint, sequence numbers, deadline enforced by a watchdog thread, poison, abort).
  // `store` carries the NCCL unique ids.
  void enable_cuda(const c10::intrusive_ptr<c10d::Store>& store);
  bool cuda_enabled() const { return cuda_ != nullptr; }
  // check="auto"/"on": stalled calls are diagnosed through `store` (backend/mismatch_watch.h).
  void enable_mismatch_watch(const c10::intrusive_ptr<c10d::Store>& store);

 private:
  using Body = std::function<void(Comm&)>;
  // Queues `body` on the worker; `nseq` sequence numbers are reserved for it (coalesced ops
  // run one sub-collective per sequence number so their tags stay apart).
  // A blocking call (async=false) that finds the worker idle runs on the caller's thread:
  // two thread hand-offs are most of a small message's latency on a busy CPU.
  template <typename O>
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                         const O& opts, Body body, uint32_t nseq = 1, const FpExtra& extra = {}) {
    bool async = true;
    if constexpr (requires { opts.asyncOp; }) async = opts.asyncOp;  // torch >= 2.7
    Fingerprint fp = call_fingerprint(type, outputs, opts, nseq, extra);
    return submit(type, name, std::move(outputs), opts.timeout, async, std::move(body), nseq, fp);
  }
  // The call's fingerprint (host and CUDA path alike): its tensors, reduce op and root.
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
  // Marks the group unusable (first reason wins) and breaks the transport (and, on the CUDA
  // path, fails the works in flight and aborts the NCCL communicators).
  void poison(const std::string& why);
  // Raises (on the caller's thread) when the group was shut down or poisoned. Needs mu_ held.
  void check_usable_locked(const char* name) const;
  // The group's fingerprint check before a call that does not run through run_checked (CUDA
  // path): check="on" exchanges the fingerprints over the host transport now; check="auto"
  // records the call for the stall watch (returns true: the CUDA watchdog may ask for a
  // diagnosis). Throws on a mismatch; `poison` says whether the group must be poisoned then.
  bool precheck(Fingerprint fp, uint64_t seq, CheckMode check, const std::string& op,
                std::chrono::steady_clock::time_point deadline, bool& poison);
  // fp.seq, and for compressed calls the RNG number they will take (it joins the fingerprint).
  void stamp(Fingerprint& fp, uint64_t seq) const;
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                        std::chrono::milliseconds timeout, bool async, Body body, uint32_t nseq,
                                        const Fingerprint& fp);
  using Finish = std::function<void()>;  // completes or fails the work: runs its future's callbacks
  using Task = std::function<Finish()>;
  void run_worker();
  void run_task(const Task& task);
  std::chrono::milliseconds effective(std::chrono::milliseconds t) const;

  // The planner's view of a reducing call on t (numel elements of t's dtype).
  Call planned_call(CallKind kind, const at::Tensor& t, int64_t numel, const c10d::ReduceOp& op) const;
  // The compressed all-reduce / reduce-scatter of a planned call (compressed_ops.cc).
  c10::intrusive_ptr<c10d::Work> compressed_allreduce_work(const at::Tensor& t, const c10d::AllreduceOptions& opts,
                                                           const char* name, std::vector<at::Tensor> outputs, Call call,
                                                           Plan plan, std::function<void()> after = nullptr);
  c10::intrusive_ptr<c10d::Work> compressed_reduce_scatter_work(const at::Tensor& out, const at::Tensor& flat_in,
                                                                const c10d::ReduceScatterOptions& opts,
                                                                const char* name, const at::Tensor& identity, Call call,
                                                                Plan plan);
  // A compressed call (float32 working copy x) that codec="auto" keeps exact: pre-scale, add the
  // error-feedback residual owed (which becomes zero), the exact algorithm of the plan, finish().
  void exact_under_auto(Comm& c, const at::Tensor& x, const Compression::Call& which, const Reduction& red,
                        uint64_t in_bytes, const Plan& plan, bool reduce_scatter, const std::function<void()>& finish);
  // An exact all-reduce of a settled plan (scaled as red says).
  void run_dense_allreduce(Comm& c, Buf b, const Reduction& red, const Plan& plan);

  bool use_cuda(const at::Tensor& t) const { return cuda_ && t.is_cuda(); }
  // One CUDA call (cuda_path.cc): what run_cuda needs besides its body.
  struct CudaCall {
    c10d::OpType type;
    const char* name;
    c10::Device device;
    std::vector<at::Tensor> inputs;   // recorded on the internal stream with the outputs
    std::vector<at::Tensor> outputs;  // the Work's result()
    std::chrono::milliseconds timeout;
    Fingerprint fp;
    uint32_t nseq = 1;
    bool p2p = false;       // point-to-point: no group sequence number, no fingerprint
    bool blocking = false;  // wait() blocks the host (barrier)
  };
  template <typename O>
  CudaCall cuda_call(c10d::OpType type, const char* name, const at::Tensor& on, std::vector<at::Tensor> inputs,
                     std::vector<at::Tensor> outputs, const O& opts, uint32_t nseq = 1, const FpExtra& extra = {}) {
    Fingerprint fp = call_fingerprint(type, outputs, opts, nseq, extra);
    return CudaCall{type, name, on.device(), std::move(inputs), std::move(outputs), effective(opts.timeout), fp, nseq};
  }
  using CudaBody = std::function<void(Comm&, CudaDevice&)>;
  // Issues `body` on the internal stream of call.device (which first waits for the caller's
  // current stream), over the NCCL transport with the CUDA compute, under the group's checks;
  // the Work completes by event and is watched until then (deadline, NCCL errors, stalls).
  c10::intrusive_ptr<c10d::Work> run_cuda(CudaCall call, const CudaBody& body);
  // The collectives on CUDA tensors (cuda_collectives.cc); arguments are checked by the
  // callers (collectives.cc, exchanges.cc, backend.cc), as on the host path.
  c10::intrusive_ptr<c10d::Work> cuda_allreduce(at::Tensor& t, const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceCoalescedOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_broadcast(at::Tensor& t, const c10d::BroadcastOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_reduce(at::Tensor& t, const c10d::ReduceOptions& opts);
  // Reduce-scatter of `parts` (one tensor holding every rank's part, or one tensor per rank).
  c10::intrusive_ptr<c10d::Work> cuda_reduce_scatter(at::Tensor& out, std::vector<at::Tensor> parts,
                                                     const c10d::ReduceScatterOptions& opts, c10d::OpType type,
                                                     const char* name);
  c10::intrusive_ptr<c10d::Work> cuda_reduce_scatter_coalesced(std::vector<at::Tensor>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::ReduceScatterOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_allgather(std::vector<at::Tensor>& outs, at::Tensor& in,
                                                const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_allgather_base(at::Tensor& out, at::Tensor& in,
                                                     const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_gather(std::vector<at::Tensor> outs, at::Tensor& in,
                                             const c10d::GatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_scatter(at::Tensor& out, std::vector<at::Tensor> ins,
                                              const c10d::ScatterOptions& opts);
  // All-to-all of byte blocks: send_bytes[i] from `in` (consecutive) to rank i, recv_bytes[i] into `out`.
  c10::intrusive_ptr<c10d::Work> cuda_alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<size_t> send_bytes,
                                                    std::vector<size_t> recv_bytes, const c10d::AllToAllOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                               const c10d::AllToAllOptions& opts);
  c10::intrusive_ptr<c10d::Work> cuda_p2p(at::Tensor& t, int peer, bool send);
  c10::intrusive_ptr<c10d::Work> cuda_barrier(c10::Device device, const c10d::BarrierOptions& opts);
  // Fails the CUDA works in flight and aborts the communicators (poison); joins the watchdog
  // and releases the communicators (shutdown).
  void abort_cuda(const std::string& why);
  void shutdown_cuda();
  std::shared_ptr<CudaPath> cuda_;
  std::atomic<uint64_t> p2p_seq_{0};  // CUDA point-to-point calls (their own numbering)

  std::unique_ptr<Transport> net_;
  Transport* p2p_ = nullptr;  // user point-to-point: the wide transport (Gloo), net_ or inside it
  Config cfg_;
  std::atomic<CheckMode> check_{CheckMode::Auto};
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
  std::unique_ptr<MismatchWatch> watch_;
};

}  // namespace ringzip
