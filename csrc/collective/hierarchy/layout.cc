#include "collective/hierarchy/layout.h"

#include <map>
#include <stdexcept>

namespace ringzip {

NodeLayout::NodeLayout(const std::vector<int>& node_of) {
  std::map<int, int> index;  // label -> node number, in order of the lowest rank
  for (int r = 0; r < static_cast<int>(node_of.size()); ++r) {
    auto [it, fresh] = index.emplace(node_of[r], static_cast<int>(members_.size()));
    if (fresh) members_.emplace_back();
    node_.push_back(it->second);
    local_.push_back(static_cast<int>(members_[it->second].size()));
    members_[it->second].push_back(r);
  }
}

std::vector<int> NodeLayout::peers(int local) const {
  std::vector<int> out;
  for (const auto& m : members_) out.push_back(m.at(local));
  return out;
}

int NodeLayout::ranks_per_node() const {
  if (members_.empty()) return 0;
  for (const auto& m : members_)
    if (m.size() != members_[0].size()) return 0;
  return static_cast<int>(members_[0].size());
}

std::string NodeLayout::unsuitable() const {
  if (nodes() <= 1) return "all ranks are on one node";
  const int per = ranks_per_node();
  if (per == 0) return "the nodes hold different numbers of ranks (" + describe() + ")";
  if (per == 1) return "one rank per node";
  return "";
}

std::string NodeLayout::describe() const {
  const int per = ranks_per_node();
  if (per > 0)
    return std::to_string(nodes()) + " node" + (nodes() == 1 ? "" : "s") + " x " + std::to_string(per) + " rank" +
           (per == 1 ? "" : "s");
  std::string s = std::to_string(nodes()) + " nodes of ";
  for (int i = 0; i < nodes(); ++i) s += (i ? "+" : "") + std::to_string(members_[i].size());
  return s + " ranks";
}

}  // namespace ringzip
