// algorithm="auto" and codec="auto" on the host path: the tuner's plan for a call (tuner.h),
// the exact run of a compressed call the plan keeps exact, and the measurements fed back.
#include <chrono>

#include "backend/backend.h"
#include "backend/compressed_run.h"
#include "backend/tensors.h"
#include "collective/compressed/layout.h"
#include "collective/hierarchy/hierarchy.h"
#include "collective/reduce.h"

namespace ringzip {
namespace {

// The problem the model solves for a call of `bytes` over c: node-aware calls choose for their
// inter-node step (one shard of the buffer among the nodes); the intra-node steps are exact
// and the same whatever the choice.
Tuner::Shape shape_of(const Comm& c, size_t bytes, bool reduce_scatter, const NodeLayout* nodes) {
  if (!nodes) return {bytes, c.size(), reduce_scatter};
  return {bytes / static_cast<size_t>(nodes->ranks_per_node()), nodes->nodes(), reduce_scatter, false};
}

}  // namespace

CompressionConfig RingzipBackend::plan_codec(Comm& c, const CompressionConfig& cc, AllreduceAlgo dense, size_t count,
                                             bool reduce_scatter, const NodeLayout* nodes, Tuner::Plan& plan) {
  if (!cc.autotune) {
    // A fixed codec's SRA call is planned too, as the one way of a one-candidate choice: its bits
    // are the codec's at any segment length, which the plan sets from the agreed figures as under
    // codec="auto" (8 MiB where the codec bounds the call, cost::sra_segment_elems); its time
    // calibrates the model like any other call's. Only where the length can matter: a call whose
    // parts (count/n elements; node-aware, the inter-node shard's parts are the same) fit one
    // segment runs alike either way, so it pays no probe and no agreements (~2 % of 256 KiB calls
    // on 4 ranks). Other algorithms have nothing to plan.
    const size_t n = static_cast<size_t>(c.size());
    if (n < 2 || (count + n - 1) / n <= compressed::kSegmentElems ||
        choose_compressed(cc.parsed, cc.algorithm) != CompressedAlgo::Sra)
      return cc;
    plan = tuner_.codec(c, shape_of(c, 4 * count, reduce_scatter, nodes), {{cc.codec, cc.parsed}},
                        CompressedAlgo::Sra, dense, cc.feedback());
    CompressionConfig run = cc;
    run.segment_elems = plan.segment_elems;
    return run;
  }
  plan = tuner_.codec(c, shape_of(c, 4 * count, reduce_scatter, nodes), cc.candidates, cc.algorithm, dense,
                      cc.feedback());
  CompressionConfig run = cc;
  run.autotune = false;
  run.codec = cc.candidates[plan.codec].name;
  run.named = run.codec;
  run.parsed = cc.candidates[plan.codec].spec;
  run.algorithm = plan.algo;
  run.segment_elems = plan.segment_elems;
  return run;
}

void RingzipBackend::exact_under_auto(Comm& c, const at::Tensor& x, const Compression::Call& which,
                                      const Reduction& red, uint64_t in_bytes, const Tuner::Plan& plan,
                                      const NodeLayout* nodes, bool reduce_scatter, const std::function<void()>& finish) {
  const auto t0 = std::chrono::steady_clock::now();
  if (red.pre != 1.0) x.mul_(red.pre);
  // What earlier compressed calls owe travels now, exactly: nothing is lost when the choice flips.
  if (which.residual.defined()) {
    x.add_(which.residual);
    which.residual.zero_();
  }
  const Buf b = buf_of(x);
  const int n = c.size();
  run_observed(nodes ? nullptr : &tuner_, plan, c, [&] {
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
  CodecStats d{1, in_bytes, c.bytes_sent, static_cast<uint64_t>(dense_factor_of(nodes, n, !reduce_scatter) * in_bytes),
               0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  d.bytes_intra_node = c.bytes_intra_node;
  comp_.record("none", d);
}

void RingzipBackend::run_dense_allreduce(Comm& c, Buf b, const Reduction& red, AllreduceAlgo algo,
                                         const NodeLayout* nodes) {
  if (red.pre != 1.0) scale_inplace(b.dtype, b.data, b.count, red.pre);
  if (algo == AllreduceAlgo::Auto && c.size() > 1) {
    const Tuner::Plan plan = tuner_.dense(c, shape_of(c, b.bytes(), false, nodes));
    run_observed(nodes ? nullptr : &tuner_, plan, c, [&] {
      if (nodes) return hierarchical_allreduce(c, *nodes, b, red.op, plan.dense);
      ringzip::allreduce(c, b, red.op, plan.dense);
    });
  } else if (nodes) {
    hierarchical_allreduce(c, *nodes, b, red.op, algo);
  } else {
    ringzip::allreduce(c, b, red.op, algo);
  }
  if (red.post != 1.0) scale_inplace(b.dtype, b.data, b.count, red.post);
}

}  // namespace ringzip
