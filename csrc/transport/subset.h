#pragma once
// A view of a transport restricted to some of its ranks: the node-aware collectives run their
// intra-node and inter-node steps as ordinary collectives over such views (collective/
// hierarchy/). Index i of the view is rank ranks[i] of the parent; posts go to the parent, so
// the view owns nothing: aborting it aborts the parent (the whole group's call is lost).
#include <vector>

#include "transport/transport.h"

namespace ringzip {

class SubsetTransport final : public Transport {
 public:
  // `ranks` must hold the parent's own rank.
  SubsetTransport(Transport& parent, std::vector<int> ranks);
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  std::string name() const override { return parent_.name(); }
  int group_rank(int i) const override { return parent_.group_rank(ranks_.at(i)); }
  int group_size() const override { return parent_.group_size(); }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override {
    return parent_.isend(data, bytes, ranks_.at(peer), tag);
  }
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override {
    return parent_.irecv(data, bytes, ranks_.at(peer), tag);
  }
  std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) override;
  void group_start() override { parent_.group_start(); }
  void group_end() override { parent_.group_end(); }
  bool eager_receives() const override { return parent_.eager_receives(); }
  int lookahead() const override { return parent_.lookahead(); }
  void abort() override { parent_.abort(); }
  double round_trip() const override { return parent_.round_trip(); }
  double window_bytes() const override { return parent_.window_bytes(); }
  double peer_rate() const override { return parent_.peer_rate(); }
  int connections(int peer) const override { return parent_.connections(ranks_.at(peer)); }

 private:
  Transport& parent_;
  std::vector<int> ranks_;
  int rank_ = -1;
};

}  // namespace ringzip
