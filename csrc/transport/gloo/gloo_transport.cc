#include "transport/gloo/gloo_transport.h"

#include <ATen/ATen.h>

namespace ringzip {
namespace {

class GlooRequest final : public Request {
 public:
  explicit GlooRequest(c10::intrusive_ptr<c10d::Work> work) : work_(std::move(work)) {}
  void wait(std::chrono::milliseconds timeout) override { work_->wait(timeout); }
  int source() const override { return work_->sourceRank(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
};

std::vector<at::Tensor> as_bytes(const void* data, size_t bytes) {
  return {at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(bytes)},
                        at::TensorOptions().dtype(at::kByte))};
}

}  // namespace

GlooTransport::GlooTransport(c10::intrusive_ptr<c10d::Backend> gloo)
    : gloo_(std::move(gloo)), rank_(gloo_->getRank()), size_(gloo_->getSize()) {}

std::unique_ptr<Request> GlooTransport::isend(const void* data, size_t bytes, int peer, uint32_t tag) {
  if (bytes == 0) return std::make_unique<DoneRequest>();
  auto tensors = as_bytes(data, bytes);
  return std::make_unique<GlooRequest>(gloo_->send(tensors, peer, static_cast<int>(tag)));
}

std::unique_ptr<Request> GlooTransport::irecv(void* data, size_t bytes, int peer, uint32_t tag) {
  if (bytes == 0) return std::make_unique<DoneRequest>(peer);
  auto tensors = as_bytes(data, bytes);
  return std::make_unique<GlooRequest>(gloo_->recv(tensors, peer, static_cast<int>(tag)));
}

std::unique_ptr<Request> GlooTransport::irecv_any(void* data, size_t bytes, uint32_t tag) {
  auto tensors = as_bytes(data, bytes);
  return std::make_unique<GlooRequest>(gloo_->recvAnysource(tensors, static_cast<int>(tag)));
}

}  // namespace ringzip
