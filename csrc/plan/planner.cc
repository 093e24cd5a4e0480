#include "plan/plan.h"

#include "collective/compressed/layout.h"
#include "common/check.h"

namespace ringzip {
namespace {

thread_local std::vector<std::string> call_codecs;  // push_call_codec's stack

bool floating(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

bool summing(c10d::ReduceOp::RedOpType op) {
  return op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG || op == c10d::ReduceOp::PREMUL_SUM;
}

// Whether NCCL reduces `op` on `t` exactly as ringzip would (AVG and PREMUL_SUM are sums
// scaled around it; bitwise ops and bool are not NCCL's).
bool nccl_reduces(c10d::ReduceOp::RedOpType op, at::ScalarType t) {
  if (t == at::kBool) return false;
  return summing(op) || op == c10d::ReduceOp::PRODUCT || op == c10d::ReduceOp::MIN || op == c10d::ReduceOp::MAX;
}

// The problem the model solves for a call of `bytes` over c: node-aware calls choose for their
// inter-node step (one shard of the buffer among the nodes); the intra-node steps are exact
// and the same whatever the choice.
Tuner::Shape shape_of(const Comm& c, size_t bytes, bool reduce_scatter, const NodeLayout* nodes) {
  if (!nodes) return {bytes, c.size(), reduce_scatter};
  return {bytes / static_cast<size_t>(nodes->ranks_per_node()), nodes->nodes(), reduce_scatter, false};
}

// The working copy of a compressed call holds float32 (Call::numel of them).
size_t f32_bytes(const Call& call) { return 4 * static_cast<size_t>(call.numel); }

}  // namespace

void push_call_codec(const std::string& codec) {
  CompressionConfig cc;
  cc.codec = codec;
  parse_codec(cc);  // throws on a bad string, at the context's start
  call_codecs.push_back(codec);
}

void pop_call_codec() {
  if (!call_codecs.empty()) call_codecs.pop_back();
}

Planner::Planner(int size) : size_(size) { set_layout(NodeLayout(std::vector<int>(size, 0))); }

void Planner::configure(const Settings& s) {
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = s;
  settings_.cc.values_rule = &rule_dense;  // every call planned from these settings hands the rule down
}

Settings Planner::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

std::string Planner::flat_reason() const {
  if (hierarchy() == HierarchyMode::Flat) return "hierarchy='flat'";
  return layout_.unsuitable();
}

const NodeLayout* Planner::node_aware(size_t bytes, bool compressed, HierarchyMode mode) const {
  if (mode == HierarchyMode::Flat || !layout_.unsuitable().empty()) return nullptr;
  // Below this, a dense call is latency-bound: three steps of messages cost more than the bytes
  // the node-aware path keeps off the slow link (the flat choice then is star or direct).
  constexpr size_t kDenseMinBytes = 1 << 20;
  if (mode == HierarchyMode::Auto && !compressed && bytes < kDenseMinBytes) return nullptr;
  return &layout_;
}

Plan Planner::plan(const Call& call) const {
  Plan p;
  p.device = call.device;
  if (call.kind == CallKind::Broadcast || call.kind == CallKind::Allgather) {
    p.nccl = call.device == Device::Cuda;  // NCCL's own moves the same bytes with no reduction to order
    return p;
  }
  std::lock_guard<std::mutex> lock(mu_);
  p.dense = settings_.algorithm;
  // A codec the calling thread set for its calls replaces the group's, with the group's other
  // settings (bucket size, rounding, seed, min_numel ...).
  CompressionConfig cc = settings_.cc;
  if (!call_codecs.empty() && call_codecs.back() != cc.codec) {
    cc.codec = call_codecs.back();
    parse_codec(cc);
  }
  // A group of one rank has nothing to exchange: its reductions are the identity, exactly.
  p.compressed = size_ > 1 && call.may_compress && call.kind != CallKind::Reduce && cc.enabled() &&
                 floating(call.dtype) && summing(call.op) && call.numel >= cc.min_numel;
  if (p.compressed) {
    // Under torch.use_deterministic_algorithms(True), codec="auto" runs its named codec: the
    // tuner's choice between codecs rests on measured times and would change the bits run to run.
    // The fingerprint then names that codec, so ranks that disagree on the flag are caught.
    p.cc = cc.autotune && at::globalContext().deterministicAlgorithms() ? as_named(cc) : cc;
    p.run = p.cc;
    if (call.kind == CallKind::ReduceScatter) p.dense = AllreduceAlgo::Ring;  // the exact reduce-scatter's
    p.nodes = node_aware(call.bytes, true, settings_.hierarchy);
    return p;
  }
  if (call.device == Device::Cuda) {
    // NCCL's own kernel wherever it reduces the op exactly and no algorithm is named (the
    // reduce-scatter and reduce have one schedule each, NCCL's is as good); CUDA's exact calls
    // run flat.
    const bool named = call.kind == CallKind::Allreduce && settings_.algorithm != AllreduceAlgo::Auto;
    p.nccl = !named && nccl_reduces(call.op, call.dtype);
    return p;
  }
  if (call.kind != CallKind::Reduce) p.nodes = node_aware(call.bytes, false, settings_.hierarchy);
  return p;
}

void Planner::settle(Comm& c, const Call& call, Plan& p) {
  const bool reduce_scatter = call.kind == CallKind::ReduceScatter;
  if (!p.compressed) {
    if (call.kind != CallKind::Allreduce || p.nccl || p.dense != AllreduceAlgo::Auto) return;
    if (call.device == Device::Host && c.size() > 1) {
      p.choice = tuner(Device::Host).dense(c, shape_of(c, call.bytes, false, p.nodes));
      p.dense = p.choice.dense;
      p.observed = !p.nodes;  // node-aware calls are not measured (plan/tuner.h)
    } else {
      p.dense = rule_dense(p.nodes ? call.bytes / p.nodes->ranks_per_node() : call.bytes,
                           p.nodes ? p.nodes->nodes() : c.size());
    }
    return;
  }
  CompressionConfig& run = p.run;
  const Tuner::Shape shape = shape_of(c, f32_bytes(call), reduce_scatter, p.nodes);
  if (run.autotune) {  // every device: its tuner measured its own kernels and links
    p.choice = tuner(call.device)
                   .codec(c, shape, run.candidates, run.algorithm, p.dense, run.feedback(),
                          static_cast<size_t>(run.topk_block));
    const CodecCandidate& chosen = run.candidates[p.choice.codec];
    run.autotune = false;
    run.codec = run.named = chosen.name;
    run.parsed = chosen.spec;
    run.algorithm = p.choice.algo;
    run.segment_elems = p.choice.segment_elems;
    run.lag = p.choice.lag;
    p.dense = p.choice.dense;
  } else {
    run = as_named(run);
    run.algorithm = resolve_compressed(run.parsed, run.algorithm);
    // A fixed codec's SRA call is planned too, as the one way of a one-candidate choice: its bits
    // are the codec's at any segment length, which the plan sets from the agreed figures as under
    // codec="auto" (8 MiB where the codec bounds the call, cost::sra_segment_elems); its time
    // calibrates the model like any other call's. Only where the length can matter: a call whose
    // parts (count/n elements; node-aware, the inter-node shard's parts are the same) fit one
    // segment runs alike either way, so it pays no probe and no agreements (~2 % of 256 KiB calls
    // on 4 ranks).
    const size_t n = static_cast<size_t>(c.size()), count = static_cast<size_t>(call.numel);
    const bool one_segment = n < 2 || (count + n - 1) / n <= compressed::kSegmentElems;
    if (run.algorithm == CompressedAlgo::Sra && !one_segment) {
      p.choice =
          tuner(call.device).codec(c, shape, {{run.codec, run.parsed}}, CompressedAlgo::Sra, p.dense, run.feedback());
      run.segment_elems = p.choice.segment_elems;
      run.lag = p.choice.lag;
    }
  }
  if (p.dense == AllreduceAlgo::Auto) p.dense = AllreduceAlgo::Ring;  // not run: exact ways are concrete
  p.observed = !p.choice.key.empty() && !p.nodes;
}

}  // namespace ringzip
