#pragma once
// Node-aware all-reduce and reduce-scatter (docs/algorithms.md, "Node-aware collectives"):
// an exact reduce-scatter among the ranks of each node, the inter-node step on each local
// shard among the ranks with the same local rank (one per node; the group's dense algorithm,
// or its codec and compressed algorithm with error feedback on the shard), and an exact
// all-gather inside the node. Each byte crosses the slow link once per node instead of once per
// rank, and compression error is added only where the slow link is. Every rank ends with
// bitwise-identical results: the ranks of one local rank agree after the inter-node step (as
// any group does) and the all-gather copies.
#include "collective/algorithms.h"
#include "collective/compressed.h"
#include "collective/hierarchy/layout.h"
#include "transport/subset.h"

namespace ringzip {

// `nodes`: the group's layout; nodes.unsuitable() must be empty (several nodes, equally many
// ranks each, more than one).
void hierarchical_allreduce(Comm& c, const NodeLayout& nodes, Buf data, RedOp op, AllreduceAlgo inter_algo);
void hierarchical_compressed_allreduce(Comm& c, const NodeLayout& nodes, float* data, size_t count,
                                       const CompressedCall& call);
// data: c.size() equal parts; afterwards part c.rank() holds the reduction (other parts are
// overwritten with partial results).
void hierarchical_reduce_scatter(Comm& c, const NodeLayout& nodes, Buf data, RedOp op);
void hierarchical_compressed_reduce_scatter(Comm& c, const NodeLayout& nodes, float* data, size_t count,
                                            const CompressedCall& call);

}  // namespace ringzip
