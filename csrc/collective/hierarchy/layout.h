#pragma once
// Which ranks of a group share a node (a machine, or an emulated one: docs/algorithms.md,
// "Node-aware collectives"). Nodes are numbered by their lowest rank; the ranks of a node are
// its local ranks 0, 1, ... in group-rank order.
#include <string>
#include <vector>

namespace ringzip {

class NodeLayout {
 public:
  NodeLayout() = default;
  // node_of[r]: any label of rank r's node (equal labels: one node).
  explicit NodeLayout(const std::vector<int>& node_of);
  int size() const { return static_cast<int>(node_.size()); }
  int nodes() const { return static_cast<int>(members_.size()); }
  int node(int rank) const { return node_.at(rank); }
  int local_rank(int rank) const { return local_.at(rank); }
  // Group ranks of node `node`, ascending.
  const std::vector<int>& members(int node) const { return members_.at(node); }
  // The rank with local rank `local` on every node, by node.
  std::vector<int> peers(int local) const;
  // Ranks per node, or 0 when the nodes differ in size.
  int ranks_per_node() const;
  // Empty when node-aware collectives can run on this layout; else why not (for the log).
  std::string unsuitable() const;
  std::string describe() const;  // e.g. "2 nodes x 2 ranks"

 private:
  std::vector<int> node_, local_;
  std::vector<std::vector<int>> members_;
};

}  // namespace ringzip
