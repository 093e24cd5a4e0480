#pragma once
// CPU transport: byte messages through torch's own ProcessGroupGloo (its send/recv), which the
// Python creator builds on a prefix of the group's store: a pool of them, each with its own TCP
// connection to every peer. One connection keeps at most its send buffer in flight per round
// trip (4 MiB by default: ~330 Mbit/s at 100 ms), so a collective's large message travels as
// stripes, one per connection, reassembled in place (docs/design.md, "Filling a long link").
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/stripes.h"
#include "transport/transport.h"

namespace ringzip {

class GlooTransport final : public Transport {
 public:
  // pool[0] carries every message that is not striped (user point-to-point, receives from any
  // source, collective messages under 2 x kStripeMin); every rank must hold as many.
  explicit GlooTransport(std::vector<c10::intrusive_ptr<c10d::Backend>> pool);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "gloo"; }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) override;
  void abort() override;
  void close() override;
  int connections(int peer) const override { return peer == rank_ ? 0 : static_cast<int>(pool_size_); }

 private:
  using Post = c10::intrusive_ptr<c10d::Work> (c10d::Backend::*)(std::vector<at::Tensor>&, int, int);
  std::unique_ptr<Request> post(Post how, const void* data, size_t bytes, int peer, uint32_t tag);
  c10::intrusive_ptr<c10d::Backend> live(size_t i) const;  // throws once closed
  void poison(size_t member);

  mutable std::mutex mu_;
  std::vector<c10::intrusive_ptr<c10d::Backend>> pool_;
  size_t pool_size_;
  int rank_;
  int size_;
  std::once_flag aborted_;
  std::vector<at::Tensor> poison_;  // kept alive: gloo may still point at them
  std::vector<c10::intrusive_ptr<c10d::Work>> poison_work_;
};

}  // namespace ringzip
