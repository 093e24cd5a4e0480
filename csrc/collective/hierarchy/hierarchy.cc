#include "collective/hierarchy/hierarchy.h"

#include <algorithm>
#include <stdexcept>

#include "collective/hierarchy/pipeline.h"

namespace ringzip {
namespace {

// The intra-node all-gather's tag steps: above the reduce-scatter's (fewer than this many ranks
// per node), below the compressed algorithms' gather steps. Intra-node and inter-node steps
// never share a pair of ranks, so their tags cannot meet.
constexpr uint32_t kGatherStepBase = 0x7000;

// The two views of the group's transport the steps run over: this rank's node, and this rank's
// local rank on every node.
class Hierarchy {
 public:
  Hierarchy(Transport& net, const NodeLayout& layout)
      : layout_(layout),
        intra_(net, layout.members(layout.node(net.rank()))),
        inter_(net, layout.peers(layout.local_rank(net.rank()))) {}
  const NodeLayout& layout() const { return layout_; }
  Transport& intra() { return intra_; }
  Transport& inter() { return inter_; }

 private:
  const NodeLayout& layout_;
  SubsetTransport intra_, inter_;
};

Hierarchy views(Comm& c, const NodeLayout& nodes) {
  if (!nodes.unsuitable().empty()) throw std::logic_error("node-aware collective: " + nodes.unsuitable());
  if (nodes.size() != c.size()) throw std::logic_error("node-aware collective: the layout is of another group");
  return Hierarchy(c.net, nodes);
}

// Runs `inner` as one step of c's call over `net` (same sequence number, tag key and deadline)
// and adds its bytes (those of steps inside the node apart: stats count what crossed between
// nodes as the codec's wire bytes) and codec time to `into`, which belongs to one thread.
enum class Span { InsideNode, BetweenNodes };
struct Totals {
  size_t between = 0, inside = 0;
  double codec_seconds = 0;
  void add_to(Comm& c) const {
    c.bytes_sent += between;
    c.bytes_intra_node += inside;
    c.codec_seconds += codec_seconds;
  }
};
template <typename F>
void step(const Comm& c, Totals& into, Span span, Transport& net, const char* what, F inner) {
  Comm s{net, c.dev, c.seq, c.deadline, c.op + " (" + what + ")"};
  s.tag_key = c.tag_key;
  inner(s);
  (span == Span::InsideNode ? into.inside : into.between) += s.bytes_sent;
  into.codec_seconds += s.codec_seconds;
}

// The inter-node step of chunk `chunk` of local rank `local` compresses with its own RNG
// streams: the streams are keyed by rank and element offset, which every shard starts at 0.
CompressedCall shard_call(const CompressedCall& call, int local, int chunk, size_t off) {
  CompressedCall sub = call;
  sub.seed = call.seed ^ (static_cast<uint64_t>(local) << 48) ^ (static_cast<uint64_t>(chunk) << 40);
  if (call.residual) sub.residual = call.residual + off;
  return sub;
}

// All-reduce in chunks of about kChunkBytes (at most kMaxChunks), pipelined (pipeline.h) where
// the transport takes posts from two threads at once (host transports: lookahead() > 0).
constexpr size_t kChunkBytes = size_t(8) << 20;
constexpr size_t kMaxChunks = 8;
// Tag steps of chunk i's intra-node stages start at i * kChunkSteps (reduce-scatter) and
// kGatherStepBase + i * kChunkSteps (all-gather): a ring over P ranks takes P - 1 steps.
constexpr uint32_t kChunkSteps = 0x100;

std::vector<size_t> chunk_bounds(const Buf& data, int per_node) {
  const size_t m = std::clamp<size_t>(data.bytes() / kChunkBytes, 1, kMaxChunks);
  if (per_node >= static_cast<int>(kChunkSteps))
    throw std::logic_error("node-aware all-reduce: too many ranks per node");
  return even_parts(data.count, static_cast<int>(m));
}

// Inter(Comm& over the inter-node view, Buf shard, size_t shard offset in elements, int chunk).
template <typename Inter>
void allreduce_by_node(Comm& c, const NodeLayout& nodes, Buf data, RedOp op, Inter inter) {
  Hierarchy h = views(c, nodes);
  const int l = nodes.local_rank(c.rank()), per = h.intra().size();
  const std::vector<size_t> at = chunk_bounds(data, per);
  const int m = static_cast<int>(at.size()) - 1;
  auto chunk = [&](int i) { return Buf{data.at(at[i]), at[i + 1] - at[i], data.dtype}; };
  auto parts = [&](int i) { return even_parts(at[i + 1] - at[i], per); };
  Totals node_side, link_side;
  run_pipeline(
      c.net, m, c.net.lookahead() > 0,
      [&](int i) {
        step(c, node_side, Span::InsideNode, h.intra(), "intra-node reduce-scatter",
             [&](Comm& s) { ring_reduce_scatter(s, chunk(i), op, parts(i), i * kChunkSteps); });
      },
      [&](int i) {
        const std::vector<size_t> p = parts(i);
        const Buf shard{chunk(i).at(p[l]), p[l + 1] - p[l], data.dtype};
        step(c, link_side, Span::BetweenNodes, h.inter(), "inter-node all-reduce",
             [&](Comm& s) { inter(s, shard, at[i] + p[l], i); });
      },
      [&](int i) {
        step(c, node_side, Span::InsideNode, h.intra(), "intra-node all-gather",
             [&](Comm& s) { ring_allgather(s, chunk(i), parts(i), kGatherStepBase + i * kChunkSteps); });
      });
  node_side.add_to(c);
  link_side.add_to(c);
}

// Reduce-scatter: the parts are staged so that local rank l's intra-node shard holds, node by
// node, the parts of the ranks with local rank l; the inter-node reduce-scatter of that shard
// then leaves each rank its own part.
template <typename Inter>
void reduce_scatter_by_node(Comm& c, const NodeLayout& lay, Buf data, RedOp op, Inter inter) {
  Hierarchy h = views(c, lay);
  const int n = c.size(), nodes = lay.nodes(), per = lay.ranks_per_node();
  if (data.count % n) throw std::invalid_argument("hierarchical reduce-scatter: parts of unequal size");
  const size_t part = data.count / n, pbytes = part * dtype_size(data.dtype);
  auto staged_mem = c.dev.alloc(data.bytes());
  Buf staged{staged_mem.get(), data.count, data.dtype};
  auto slot = [&](int rank) { return static_cast<size_t>(lay.local_rank(rank) * nodes + lay.node(rank)); };
  for (int r = 0; r < n; ++r) c.dev.copy(staged.at(slot(r) * part), data.at(r * part), pbytes);
  const std::vector<size_t> shards = even_parts(data.count, per);
  Totals totals;
  step(c, totals, Span::InsideNode, h.intra(), "intra-node reduce-scatter",
       [&](Comm& s) { ring_reduce_scatter(s, staged, op, shards); });
  const int l = lay.local_rank(c.rank());
  Buf shard{staged.at(shards[l]), shards[l + 1] - shards[l], data.dtype};
  step(c, totals, Span::BetweenNodes, h.inter(), "inter-node reduce-scatter",
       [&](Comm& s) { inter(s, shard, shards[l]); });
  totals.add_to(c);
  c.dev.copy(data.at(c.rank() * part), staged.at(slot(c.rank()) * part), pbytes);
}

}  // namespace

void hierarchical_allreduce(Comm& c, const NodeLayout& nodes, Buf data, RedOp op, AllreduceAlgo inter_algo) {
  allreduce_by_node(c, nodes, data, op, [&](Comm& s, Buf shard, size_t, int) { allreduce(s, shard, op, inter_algo); });
}

void hierarchical_compressed_allreduce(Comm& c, const NodeLayout& nodes, float* data, size_t count,
                                       const CompressedCall& call) {
  const int l = nodes.local_rank(c.rank());
  allreduce_by_node(c, nodes, Buf{data, count, DType::F32}, RedOp::Sum, [&](Comm& s, Buf shard, size_t off, int i) {
    compressed_allreduce(s, static_cast<float*>(shard.data), shard.count, shard_call(call, l, i, off));
  });
}

void hierarchical_reduce_scatter(Comm& c, const NodeLayout& nodes, Buf data, RedOp op) {
  reduce_scatter_by_node(c, nodes, data, op, [&](Comm& s, Buf shard, size_t) {
    ring_reduce_scatter(s, shard, op, even_parts(shard.count, s.size()));
  });
}

void hierarchical_compressed_reduce_scatter(Comm& c, const NodeLayout& nodes, float* data, size_t count,
                                            const CompressedCall& call) {
  const int l = nodes.local_rank(c.rank());
  reduce_scatter_by_node(c, nodes, Buf{data, count, DType::F32}, RedOp::Sum, [&](Comm& s, Buf shard, size_t off) {
    compressed_reduce_scatter(s, static_cast<float*>(shard.data), shard.count, shard_call(call, l, 0, off));
  });
}

}  // namespace ringzip
