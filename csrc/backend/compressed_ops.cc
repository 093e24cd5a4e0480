// The compressed all-reduce and reduce-scatter on host tensors, as the planner planned them
// (plan/plan.h: float tensors with SUM / AVG / PREMUL_SUM and at least min_numel elements, when
// the group's codec is not "none"), and the exact run of one that codec="auto" keeps exact.
#include <chrono>

#include "backend/backend.h"
#include "backend/compressed_run.h"
#include "backend/tensors.h"
#include "collective/hierarchy/hierarchy.h"
#include "collective/reduce.h"
#include "common/check.h"

namespace ringzip {
namespace {

// Float32 working copy of t on the host (t itself when it already is one).
at::Tensor f32_work(const at::Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == at::kFloat) return t;
  return t.to(at::kCPU, at::kFloat, false, /*copy=*/true).contiguous();
}

// fp16 on the wire holds magnitudes up to 65504: larger values, or sums of values, become inf
// (the cast does not scale). When this rank's input was finite and the result is not, count the
// call and warn once per process. Two scans of the host buffers, on fp16 calls only; the CUDA
// path does not check (a device scan would need a host synchronization per call).
class Fp16Watch {
 public:
  Fp16Watch(const CompressionConfig& cc, const at::Tensor& x)
      : on_(cc.spec().kind == codec::Kind::Fp16),
        in_finite_(on_ && codec::all_finite(x.data_ptr<float>(), x.numel())) {}
  void after(Compression& comp, const CompressionConfig& cc, const at::Tensor& out) const {
    if (!in_finite_ || codec::all_finite(out.data_ptr<float>(), out.numel())) return;
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
  bool on_;
  bool in_finite_;
};

}  // namespace

void RingzipBackend::configure(AllreduceAlgo algorithm, CheckMode check, CompressionConfig cc,
                               HierarchyMode hierarchy) {
  planner_.configure(algorithm, hierarchy, std::move(cc));
  check_ = check;
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::compressed_allreduce_work(const at::Tensor& t,
                                                                         const c10d::AllreduceOptions& opts,
                                                                         const char* name,
                                                                         std::vector<at::Tensor> outputs, Call call,
                                                                         Plan plan, std::function<void()> after) {
  const auto red = to_reduction(opts.reduceOp, to_dtype(t.scalar_type(), name), size_, name);
  const at::Tensor x = f32_work(t);
  const uint64_t in_bytes = t.nbytes();
  const at::Tensor owner = outputs.at(0);
  const FpExtra fp = codec_fingerprint(plan.cc);
  return enqueue(
      c10d::OpType::ALLREDUCE, name, std::move(outputs), opts,
      [this, t, x, owner, red, in_bytes, after, call, plan](Comm& c) mutable {
        const int n = c.size();
        const Compression::Call which = comp_.begin_call(owner, t.numel(), plan.cc.feedback());
        planner_.settle(c, call, plan);
        const CompressionConfig& run = plan.run;
        const Fp16Watch fp16(run, x);
        auto finish = [&] {
          fp16.after(comp_, run, x);
          if (red.post != 1.0) x.mul_(red.post);
          if (!x.is_same(t)) t.copy_(x);
          if (after) after();
        };
        if (!run.enabled()) return exact_under_auto(c, x, which, red, in_bytes, plan, false, finish);
        const NodeLayout* nodes = plan.nodes;
        run_compressed(
            c, comp_, run, x, which, red, in_bytes, dense_factor_of(nodes, n, true),
            [&](const CompressedCall& cc) {
              planner_.timed(c, plan, [&] {
                if (nodes) return hierarchical_compressed_allreduce(c, *nodes, x.data_ptr<float>(), x.numel(), cc);
                compressed_allreduce(c, x.data_ptr<float>(), x.numel(), cc);
              });
            },
            finish);
      },
      1, fp);
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::compressed_reduce_scatter_work(
    const at::Tensor& out, const at::Tensor& flat_in, const c10d::ReduceScatterOptions& opts, const char* name,
    const at::Tensor& identity, Call call, Plan plan) {
  const auto red = to_reduction(opts.reduceOp, to_dtype(out.scalar_type(), name), size_, name);
  // A fresh float32 copy: the reduction runs in place and the caller's input stays intact.
  const at::Tensor x = flat_in.to(at::kCPU, at::kFloat, false, /*copy=*/true).contiguous().view({-1});
  const uint64_t in_bytes = flat_in.nbytes();
  const FpExtra fp = codec_fingerprint(plan.cc);
  return enqueue(
      c10d::OpType::REDUCE_SCATTER, name, {out}, opts,
      [this, out, x, identity, red, in_bytes, call, plan](Comm& c) mutable {
        const int n = c.size();
        const Compression::Call which = comp_.begin_call(identity, x.numel(), plan.cc.feedback());
        planner_.settle(c, call, plan);
        const CompressionConfig& run = plan.run;
        const Fp16Watch fp16(run, x);
        auto finish = [&] {
          const int64_t part = out.numel();
          auto mine = x.narrow(0, part * c.rank(), part);
          fp16.after(comp_, run, mine);
          if (red.post != 1.0) mine.mul_(red.post);
          out.copy_(mine.view(out.sizes()));
        };
        if (!run.enabled()) return exact_under_auto(c, x, which, red, in_bytes, plan, true, finish);
        const NodeLayout* nodes = plan.nodes;
        run_compressed(
            c, comp_, run, x, which, red, in_bytes, dense_factor_of(nodes, n, false),
            [&](const CompressedCall& cc) {
              planner_.timed(c, plan, [&] {
                float* data = x.data_ptr<float>();
                if (nodes) return hierarchical_compressed_reduce_scatter(c, *nodes, data, x.numel(), cc);
                compressed_reduce_scatter(c, data, x.numel(), cc);
              });
            },
            finish);
      },
      1, fp);
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
