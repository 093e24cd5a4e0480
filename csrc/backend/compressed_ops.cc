// The compressed all-reduce and reduce-scatter, on any device's path, as the planner planned them
// (plan/plan.h: float tensors with SUM / AVG / PREMUL_SUM and at least min_numel elements, when
// the call's codec is not "none"), and the exact run of one that codec="auto" keeps exact.
#include <chrono>

#include "backend/backend.h"
#include "backend/compressed_run.h"
#include "backend/tensors.h"
#include "collective/hierarchy/hierarchy.h"
#include "collective/reduce.h"
#include "common/check.h"

namespace ringzip {
namespace {

// fp16 on the wire holds magnitudes up to 65504: larger values, or sums of values, become inf
// (the cast does not scale). When this rank's input was finite and the result is not, count the
// call and warn once per process. Two scans of the host buffers, on fp16 calls only; device
// calls are not checked (a device scan would need a host synchronization per call).
class Fp16Watch {
 public:
  Fp16Watch(const CompressionConfig& cc, const at::Tensor& x)
      : on_(cc.spec().kind == codec::Kind::Fp16), in_finite_(on_ && finite(x)) {}
  void after(Compression& comp, const CompressionConfig& cc, const at::Tensor& out) const {
    if (!in_finite_ || finite(out)) return;
    CodecStats d;
    d.overflows = 1;
    comp.record(cc.codec, d);
    TORCH_WARN_ONCE(
        "ringzip: codec fp16: a compressed call on finite input returned Inf/NaN. fp16 on the wire holds "
        "magnitudes up to 65504 and ringzip does not scale it, so larger values or sums became inf (unless "
        "another rank's input already held Inf/NaN, e.g. an AMP overflow step). Use codec 'bf16' (float32's "
        "range) or a q-codec (per-bucket scales), or scale the values down. ringzip.stats()['fp16']['overflows'] "
        "counts such calls; this warning is shown once per process.");
  }

 private:
  // On a device: a reduction on the call's stream and a wait for its one byte (two per fp16
  // call, the price of a warning that names the overflow; the other codecs pay nothing).
  static bool finite(const at::Tensor& t) {
    return t.is_cpu() ? codec::all_finite(t.data_ptr<float>(), t.numel()) : at::isfinite(t).all().item<bool>();
  }

  bool on_;
  bool in_finite_;
};

}  // namespace

void RingzipBackend::configure(const GroupOptions& o) {
  const Settings s = parse(o);
  std::lock_guard<std::mutex> lock(configure_mu_);  // the planner's settings and check_ change together
  planner_.configure(s);
  check_ = s.check;
  net_->pace(o.link_gbit * 1e9);
  // What a tuner's first call would otherwise wait for: the host kernels' speeds (once per
  // process; ~120 ms for codec="auto"'s four codecs, twice that where ranks share cores), now
  // measured in the background, behind the job's own setup before that call. Only for a group
  // that tunes: a named algorithm without a codec asks for none of them.
  const bool tunes = s.algorithm == AllreduceAlgo::Auto || s.cc.enabled();
  if (!kernels_.joinable() && size_ > 1 && tunes) {
    std::vector<codec::Spec> codecs;
    for (const CodecCandidate& c : s.cc.candidates)
      if (c.spec.kind != codec::Kind::None) codecs.push_back(c.spec);
    if (!s.cc.autotune && s.cc.enabled()) codecs.push_back(s.cc.parsed);
    kernels_ = std::thread([codecs] { measure_host_kernels(codecs); });
  }
}

void RingzipBackend::agree_early() {
  if (size_ < 2 || !(net_->peer_rate() > 0) || !net_->long_link()) return;
  const Settings s = planner_.settings();
  if (s.algorithm != AllreduceAlgo::Auto && !s.cc.enabled()) return;  // no call asks the cost model
  // The codecs the calls will ask about (as Planner::settle does): all of codec="auto"'s, or the
  // one named; none for exact calls.
  std::optional<std::vector<CodecCandidate>> candidates;
  if (s.cc.autotune) {
    candidates = s.cc.candidates;
  } else if (s.cc.enabled()) {
    const CompressionConfig named = as_named(s.cc);
    candidates = std::vector<CodecCandidate>{{named.codec, named.parsed}};
  }
  Issue call = make_issue(c10d::OpType::BARRIER, "auto-tuning agreement", {}, c10d::BarrierOptions{});
  call.async = true;  // queued: the creator goes on
  submit(std::move(call), [this, candidates](Comm& c) {
    planner_.tuner(Device::Host).prepare(c, candidates ? &*candidates : nullptr);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::compressed_work(DevicePath* path, Issue issue_, const at::Tensor& flat,
                                                               const at::Tensor& out, const at::Tensor& owner,
                                                               const c10d::ReduceOp& op, bool reduce_scatter, Call call,
                                                               Plan plan, std::function<void()> after) {
  const char* name = issue_.name;
  const auto red = to_reduction(op, to_dtype(out.scalar_type(), name), size_, name);
  const c10::Device where = working(path, flat);
  // The float32 working copy is reduced in place: an all-reduce's own float32 tensor is it; a
  // reduce-scatter reads a copy, so the caller's input stays intact.
  const bool in_place =
      !reduce_scatter && flat.device() == where && flat.is_contiguous() && flat.scalar_type() == at::kFloat;
  const at::Tensor x = in_place ? flat : Staged::copy(flat, where, at::kFloat);
  const uint64_t in_bytes = flat.nbytes();
  return issue(path, std::move(issue_),
               [this, x, out, owner, red, in_bytes, after, call, plan, reduce_scatter](Comm& c) mutable {
                 const int n = c.size();
                 const Compression::Call which = comp_.begin_call(owner, x.numel(), plan.cc.feedback(), x.device());
                 planner_.settle(c, call, plan);
                 const CompressionConfig& run = plan.run;
                 const Fp16Watch fp16(run, x);
                 auto finish = [&] {
                   // A reduce-scatter's result is this rank's part of x.
                   at::Tensor mine = reduce_scatter ? x.view({-1}).narrow(0, out.numel() * c.rank(), out.numel()) : x;
                   fp16.after(comp_, run, mine);
                   if (red.post != 1.0) mine.mul_(red.post);
                   if (!mine.is_same(out)) out.copy_(mine.view(out.sizes()));
                   if (after) after();
                 };
                 if (!run.enabled()) return exact_under_auto(c, x, which, red, in_bytes, plan, reduce_scatter, finish);
                 const NodeLayout* nodes = plan.nodes;
                 run_compressed(
                     c, comp_, run, x, which, red, in_bytes, dense_factor_of(nodes, n, !reduce_scatter),
                     [&](const CompressedCall& cc) {
                       planner_.timed(c, plan, [&] {
                         float* data = x.data_ptr<float>();
                         if (reduce_scatter) {
                           if (nodes) return hierarchical_compressed_reduce_scatter(c, *nodes, data, x.numel(), cc);
                           return compressed_reduce_scatter(c, data, x.numel(), cc);
                         }
                         if (nodes) return hierarchical_compressed_allreduce(c, *nodes, data, x.numel(), cc);
                         compressed_allreduce(c, data, x.numel(), cc);
                       });
                     },
                     finish);
               });
}

void RingzipBackend::exact_under_auto(Comm& c, const at::Tensor& x, const Compression::Call& which,
                                      const Reduction& red, uint64_t in_bytes, const Plan& plan, bool reduce_scatter,
                                      const std::function<void()>& finish) {
  const auto t0 = std::chrono::steady_clock::now();
  if (red.pre != 1.0) x.mul_(red.pre);
  // What earlier compressed calls owe travels now, exactly: nothing is lost when the choice flips.
  if (which.residual.defined()) {
    x.add_(which.residual);
    which.residual.zero_();
  }
  const Buf b = buf_of(x);
  const int n = c.size();
  const NodeLayout* nodes = plan.nodes;
  planner_.timed(c, plan, [&] {
    if (reduce_scatter) {
      if (nodes) return hierarchical_reduce_scatter(c, *nodes, b, RedOp::Sum);
      return ring_reduce_scatter(c, b, RedOp::Sum, even_parts(b.count, n));
    }
    if (nodes) return hierarchical_allreduce(c, *nodes, b, RedOp::Sum, plan.dense);
    ringzip::allreduce(c, b, RedOp::Sum, plan.dense);
  });
  finish();
  // As run_compressed counts: node-aware calls file the bytes between nodes as bytes_wire and the
  // exact steps inside the node as bytes_intra_node.
  CodecStats d{1,
               in_bytes,
               c.bytes_sent,
               static_cast<uint64_t>(dense_factor_of(nodes, n, !reduce_scatter) * in_bytes),
               0,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  d.bytes_intra_node = c.bytes_intra_node;
  comp_.record("none", d);
}

}  // namespace ringzip
