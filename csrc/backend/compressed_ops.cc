// The compressed path of allreduce and reduce-scatter: float tensors with SUM / AVG /
// PREMUL_SUM and at least min_numel elements, when the group's codec is not "none".
#include <chrono>

#include "backend/backend.h"
#include "backend/compressed_run.h"
#include "backend/tensors.h"
#include "collective/hierarchy/hierarchy.h"
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
      : on_(cc.spec().kind == codec::Kind::Fp16), in_finite_(on_ && codec::all_finite(x.data_ptr<float>(), x.numel())) {}
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
  parse_codec(cc);  // throws on a bad codec string
  RZ_CHECK_VALUE(cc.bucket_size > 0, "bucket_size must be positive, got ", cc.bucket_size);
  RZ_CHECK_VALUE(cc.min_numel >= 0, "min_numel must be >= 0, got ", cc.min_numel);
  RZ_CHECK_VALUE(cc.topk_block >= 0, "topk_block must be >= 0, got ", cc.topk_block);
  std::lock_guard<std::mutex> lock(cfg_mu_);
  comp_cfg_ = std::move(cc);
  algorithm_ = algorithm;
  check_ = check;
  hierarchy_ = hierarchy;
}

CompressionConfig RingzipBackend::compression() const {
  std::lock_guard<std::mutex> lock(cfg_mu_);
  return comp_cfg_;
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::maybe_compressed_allreduce(
    const at::Tensor& t, const c10d::AllreduceOptions& opts, const char* name,
    std::vector<at::Tensor> outputs, std::function<void()> after) {
  const CompressionConfig cc = compression();
  if (!compressible(cc, t, opts.reduceOp)) return {};
  const auto red = to_reduction(opts.reduceOp, to_dtype(t.scalar_type(), name), size_, name);
  const at::Tensor x = f32_work(t);
  const uint64_t in_bytes = t.nbytes();
  const at::Tensor owner = outputs.at(0);
  const NodeLayout* nodes = node_aware(in_bytes, true);
  const AllreduceAlgo dense = algorithm_.load();  // an exact call under codec="auto" runs it (or the model's)
  return enqueue(c10d::OpType::ALLREDUCE, name, std::move(outputs), opts,
                 [this, t, x, owner, red, cc, in_bytes, after, nodes, dense](Comm& c) {
                   const int n = c.size();
                   const Compression::Call which = comp_.begin_call(owner, t.numel(), cc.feedback());
                   Tuner::Plan plan;
                   const CompressionConfig run = plan_codec(c, cc, dense, x.numel(), false, nodes, plan);
                   const Fp16Watch fp16(run, x);
                   auto finish = [&] {
                     fp16.after(comp_, run, x);
                     if (red.post != 1.0) x.mul_(red.post);
                     if (!x.is_same(t)) t.copy_(x);
                     if (after) after();
                   };
                   Tuner* observe = !plan.key.empty() && !nodes ? &tuner_ : nullptr;  // planned; node-aware calls: not observed
                   if (!run.enabled()) return exact_under_auto(c, x, which, red, in_bytes, plan, nodes, false, finish);
                   run_compressed(
                       c, comp_, run, x, which, red, in_bytes, dense_factor_of(nodes, n, true),
                       [&](const CompressedCall& call) {
                         run_observed(observe, plan, c, [&] {
                           if (nodes) return hierarchical_compressed_allreduce(c, *nodes, x.data_ptr<float>(), x.numel(), call);
                           compressed_allreduce(c, x.data_ptr<float>(), x.numel(), call);
                         });
                       },
                       finish);
                 }, 1, codec_fingerprint(cc));
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::maybe_compressed_reduce_scatter(
    const at::Tensor& out, const at::Tensor& flat_in, const c10d::ReduceScatterOptions& opts,
    const char* name, const at::Tensor& identity) {
  const CompressionConfig cc = compression();
  if (!compressible(cc, flat_in, opts.reduceOp)) return {};
  const auto red = to_reduction(opts.reduceOp, to_dtype(out.scalar_type(), name), size_, name);
  // A fresh float32 copy: the reduction runs in place and the caller's input stays intact.
  const at::Tensor x = flat_in.to(at::kCPU, at::kFloat, false, /*copy=*/true).contiguous().view({-1});
  const uint64_t in_bytes = flat_in.nbytes();
  const NodeLayout* nodes = node_aware(in_bytes, true);
  return enqueue(c10d::OpType::REDUCE_SCATTER, name, {out}, opts,
                 [this, out, x, identity, red, cc, in_bytes, nodes](Comm& c) {
                   const int n = c.size();
                   const Compression::Call which = comp_.begin_call(identity, x.numel(), cc.feedback());
                   Tuner::Plan plan;
                   const CompressionConfig run = plan_codec(c, cc, AllreduceAlgo::Ring, x.numel(), true, nodes, plan);
                   const Fp16Watch fp16(run, x);
                   auto finish = [&] {
                     const int64_t part = out.numel();
                     auto mine = x.narrow(0, part * c.rank(), part);
                     fp16.after(comp_, run, mine);
                     if (red.post != 1.0) mine.mul_(red.post);
                     out.copy_(mine.view(out.sizes()));
                   };
                   Tuner* observe = !plan.key.empty() && !nodes ? &tuner_ : nullptr;
                   if (!run.enabled()) return exact_under_auto(c, x, which, red, in_bytes, plan, nodes, true, finish);
                   run_compressed(
                       c, comp_, run, x, which, red, in_bytes, dense_factor_of(nodes, n, false),
                       [&](const CompressedCall& call) {
                         run_observed(observe, plan, c, [&] {
                           float* data = x.data_ptr<float>();
                           if (nodes) return hierarchical_compressed_reduce_scatter(c, *nodes, data, x.numel(), call);
                           compressed_reduce_scatter(c, data, x.numel(), call);
                         });
                       },
                       finish);
                 }, 1, codec_fingerprint(cc));
}

}  // namespace ringzip
