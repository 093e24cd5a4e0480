#pragma once
// A group's transport when some of its ranks share this rank's node: messages to them go
// through `local` (shared memory, transport/shm/), all others through `wide` (Gloo over TCP).
// Receives from any source and user point-to-point stay on `wide` (the backend posts those
// there directly), so each medium matches its own tags.
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace ringzip {

class RoutedTransport final : public Transport {
 public:
  // local_ranks: the group ranks `local` connects, by its index (this rank among them).
  RoutedTransport(std::unique_ptr<Transport> wide, std::unique_ptr<Transport> local, std::vector<int> local_ranks);
  int rank() const override { return wide_->rank(); }
  int size() const override { return wide_->size(); }
  std::string name() const override { return local_->name() + "+" + wide_->name(); }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) override {
    return wide_->irecv_any(data, bytes, tag);
  }
  void group_start() override;
  void group_end() override;
  bool eager_receives() const override { return wide_->eager_receives() && local_->eager_receives(); }
  int lookahead() const override;
  void abort() override;
  double round_trip() const override { return wide_->round_trip(); }
  double window_bytes() const override { return wide_->window_bytes(); }
  void pace(double bits_per_s) override { wide_->pace(bits_per_s); }
  double peer_rate() const override { return wide_->peer_rate(); }
  int warmed() const override { return wide_->warmed(); }
  int connections(int peer) const override {
    return index_.at(peer) >= 0 ? local_->connections(index_[peer]) : wide_->connections(peer);
  }
  void close() override;
  Transport& wide() { return *wide_; }

 private:
  std::unique_ptr<Transport> wide_, local_;
  std::vector<int> index_;  // per group rank: its index on `local`, or -1
};

}  // namespace ringzip
