// The node layout of a group and the choice between node-aware and flat calls
// (docs/algorithms.md, "Node-aware collectives").
#include "backend/backend.h"
#include "common/check.h"
#include "transport/routed.h"

namespace ringzip {

HierarchyMode parse_hierarchy(const std::string& s) {
  if (s == "auto") return HierarchyMode::Auto;
  if (s == "node") return HierarchyMode::Node;
  if (s == "flat") return HierarchyMode::Flat;
  RZ_CHECK_VALUE(false, "unknown hierarchy '", s, "' (expected auto, node or flat)");
}

const char* hierarchy_name(HierarchyMode m) {
  switch (m) {
    case HierarchyMode::Auto: return "auto";
    case HierarchyMode::Node: return "node";
    case HierarchyMode::Flat: return "flat";
  }
  return "?";
}

void RingzipBackend::set_topology(const std::vector<int>& node_of, std::unique_ptr<Transport> local) {
  RZ_CHECK_VALUE(static_cast<int>(node_of.size()) == size_, "set_topology: ", node_of.size(),
                 " node labels for a group of ", size_);
  RZ_CHECK(seq_.load() == 0, "set_topology: the group already ran collectives");
  layout_ = NodeLayout(node_of);
  if (local) {
    net_ = std::make_unique<RoutedTransport>(std::move(net_), std::move(local), layout_.members(layout_.node(rank_)));
    p2p_ = &static_cast<RoutedTransport&>(*net_).wide();
  }
}

const NodeLayout* RingzipBackend::node_aware(size_t bytes, bool compressed) const {
  const HierarchyMode mode = hierarchy_.load();
  if (mode == HierarchyMode::Flat || !layout_.unsuitable().empty()) return nullptr;
  // Below this, a dense call is latency-bound: three steps of messages cost more than the bytes
  // the node-aware path keeps off the slow link (the flat chooser then picks rd or star).
  constexpr size_t kDenseMinBytes = 1 << 20;
  if (mode == HierarchyMode::Auto && !compressed && bytes < kDenseMinBytes) return nullptr;
  return &layout_;
}

std::string RingzipBackend::flat_reason() const {
  if (hierarchy_.load() == HierarchyMode::Flat) return "hierarchy='flat'";
  return layout_.unsuitable();
}

}  // namespace ringzip
