#pragma once
// The planning room: every per-call decision of a reducing collective, for host and CUDA
// tensors alike -- exact or compressed, which codec (named or "auto"), which algorithm (dense
// and compressed), node-aware or flat, NCCL's own kernel or a ringzip schedule. The backend
// asks plan() when a call is issued (what the call's fingerprint and dispatch depend on) and
// settle() when it starts on the group's worker (the measured choices under "auto", which
// agree figures with the other ranks through the call's Comm). Nothing else decides: the
// collective layer below runs the algorithms it is handed and includes nothing from here.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <mutex>
#include <string>

#include "collective/hierarchy/layout.h"
#include "plan/options.h"
#include "plan/tuner.h"

namespace ringzip {

enum class Device : uint8_t { Host, Cuda };
inline constexpr Named<Device> kDevices[] = {{"cpu", Device::Host}, {"cuda", Device::Cuda}};
// The collectives that have something to plan; the others run one schedule each. Broadcast and
// all-gather only choose between the transport's own kernel (NCCL's) and ringzip's schedule.
enum class CallKind : uint8_t { Allreduce, ReduceScatter, Reduce, Broadcast, Allgather };

// One call as the planner sees it when it is issued.
struct Call {
  CallKind kind = CallKind::Allreduce;
  Device device = Device::Host;
  at::ScalarType dtype = at::kFloat;
  c10d::ReduceOp::RedOpType op = c10d::ReduceOp::SUM;
  int64_t numel = 0;  // the whole buffer (reduce-scatter: every rank's parts)
  size_t bytes = 0;
  bool may_compress = true;  // false: a call kind the codecs do not serve (coalesced reduce-scatters)
};

// How a call runs. plan() fills what is known at issue; settle() the rest.
struct Plan {
  // Compressed: `cc` holds the group's codec settings at issue (the fingerprint's) and `run` what
  // settle() chose to run, which may be exact (codec="auto": run.enabled() false).
  bool compressed = false;
  CompressionConfig cc, run;
  AllreduceAlgo dense = AllreduceAlgo::Ring;  // the exact algorithm (concrete once settled)
  bool nccl = false;                          // CUDA: NCCL's own kernel runs the exact call (Transport::native)
  const NodeLayout* nodes = nullptr;          // node-aware over these nodes, else flat
  Tuner::Plan choice;                         // the tuner's decision (choice.key empty: none was asked)
  bool observed = false;                      // the call's time goes back to the tuner (Planner::timed)
  Device device = Device::Host;               // whose tuner chose (Planner::tuner)
};

// The calling thread's codec for the calls it issues (ringzip.exact(), ringzip.compress(...)):
// innermost first; "none" keeps them exact. Captured by Planner::plan when a call is issued, so an
// async call keeps it. push_call_codec checks the codec string (std::invalid_argument).
void push_call_codec(const std::string& codec);
void pop_call_codec();

class Planner {
 public:
  explicit Planner(int size);

  // The group's settings for the calls planned from now on (parse() checked them).
  void configure(const Settings& s);
  // The node of every rank (before the first call).
  void set_layout(NodeLayout layout) {
    layout_ = std::move(layout);
    host_tuner_.set_one_host(layout_.nodes() == 1);
  }
  const NodeLayout& layout() const { return layout_; }

  Settings settings() const;
  // Read on every call's fingerprint: the field alone, not a copy of the settings.
  AllreduceAlgo algorithm() const {
    std::lock_guard<std::mutex> lock(mu_);
    return settings_.algorithm;
  }
  HierarchyMode hierarchy() const {
    std::lock_guard<std::mutex> lock(mu_);
    return settings_.hierarchy;
  }
  CompressionConfig compression() const {
    std::lock_guard<std::mutex> lock(mu_);
    return settings_.cc;
  }
  // Why calls run flat although hierarchy is not "flat" (empty when they run node-aware).
  std::string flat_reason() const;

  // At issue: compressed or exact, node-aware or flat, NCCL's kernel or a schedule, and the
  // algorithms the options fix: a function of the call, the group's settings, the calling
  // thread's codec (push_call_codec) and torch's deterministic flag, which is what the call's
  // fingerprint compares across ranks.
  Plan plan(const Call& call) const;
  // At the call's start on the group's worker: the measured choices (algorithm="auto",
  // codec="auto", SRA's segment length); every rank settles alike (plan/tuner.h). After it,
  // p.dense and p.run.algorithm are concrete.
  void settle(Comm& c, const Call& call, Plan& p);
  // Runs f() (the algorithm of a settled plan) and, where the plan is observed, tells the tuner
  // how long it took.
  template <typename F>
  void timed(Comm& c, const Plan& p, F f) {
    run_observed(p.observed ? &tuner(p.device) : nullptr, p.choice, c, f);
  }

  // Each device path's calls have their own tuner: its link (NCCL's, or shared memory and TCP)
  // and its kernels' speeds are its own.
  Tuner& tuner(Device d) { return d == Device::Cuda || host_as_device_ ? device_tuner_ : host_tuner_; }
  // Test hook: host calls ask the device tuner, which measures and exchanges through the calls'
  // Compute as on a GPU (with the loopback's device-branches compute: what a GPU's tuner does,
  // on the host). Before the first call.
  void tune_host_as_device(bool on) { host_as_device_ = on; }

 private:
  const NodeLayout* node_aware(size_t bytes, bool compressed, HierarchyMode mode) const;

  int size_;
  NodeLayout layout_;
  mutable std::mutex mu_;  // the settings: configure() may run while calls are issued
  Settings settings_;
  Tuner host_tuner_, device_tuner_{true};
  bool host_as_device_ = false;
};

}  // namespace ringzip
