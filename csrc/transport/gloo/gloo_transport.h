#pragma once
// CPU transport: byte messages through torch's own ProcessGroupGloo (its send/recv),
// which the Python creator builds on a prefix of the group's store.
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <mutex>

#include "transport/transport.h"

namespace ringzip {

class GlooTransport final : public Transport {
 public:
  explicit GlooTransport(c10::intrusive_ptr<c10d::Backend> gloo);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "gloo"; }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, uint32_t tag) override;
  std::unique_ptr<Request> irecv_any(void* data, size_t bytes, uint32_t tag) override;
  void abort() override;
  void close() override;

 private:
  c10::intrusive_ptr<c10d::Backend> live() const;  // throws once closed

  mutable std::mutex mu_;
  c10::intrusive_ptr<c10d::Backend> gloo_;
  int rank_;
  int size_;
  std::once_flag aborted_;
  std::vector<at::Tensor> poison_;  // kept alive: gloo may still point at them
  std::vector<c10::intrusive_ptr<c10d::Work>> poison_work_;
};

}  // namespace ringzip
