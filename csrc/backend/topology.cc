// The node layout of a group (docs/algorithms.md, "Node-aware collectives"): which calls run
// node-aware is the planner's decision (plan/plan.h).
#include "backend/backend.h"
#include "common/check.h"
#include "transport/routed.h"

namespace ringzip {

void RingzipBackend::set_topology(const std::vector<int>& node_of, std::unique_ptr<Transport> local) {
  RZ_CHECK_VALUE(static_cast<int>(node_of.size()) == size_, "set_topology: ", node_of.size(),
                 " node labels for a group of ", size_);
  RZ_CHECK(seq_.load() == 0, "set_topology: the group already ran collectives");
  planner_.set_layout(NodeLayout(node_of));
  const NodeLayout& layout = planner_.layout();
  if (local) {
    net_ = std::make_unique<RoutedTransport>(std::move(net_), std::move(local), layout.members(layout.node(rank_)));
    p2p_ = &static_cast<RoutedTransport&>(*net_).wide();
  }
}

}  // namespace ringzip
